#!/usr/bin/env bash
# The test command: set up, lint, type-check, run every test and the benchmarks.
# pytest runs in two passes (tests/conftest.py marks the `serial` tests): first the tests not
# marked serial as two pytest processes side by side, the JVM tests (tests/interop, tests/spark)
# in one and the Python-only tests in the other; then the serial (timing-dependent) tests alone.
# The benchmarks run last, alone and serially: they measure speed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy --strict"
.venv/bin/mypy --strict store remoting broker ha controller_client controller pyrmq_client pyspark_rocketmq tests benchmarks examples
failed=0
run() {  # one pytest run; exit status 5 (nothing selected in this part) is no failure
    .venv/bin/pytest -q -p no:cacheprovider "$@" || [ $? = 5 ]
}
jvm_log=$(mktemp)
echo "== pytest: JVM tests and Python-only tests side by side (not serial)"
run --durations=20 -m "not serial" tests/interop tests/spark "$@" >"$jvm_log" 2>&1 &
jvm=$!
run --durations=20 -m "not serial" tests --ignore=tests/interop --ignore=tests/spark "$@" \
    || failed=1
wait "$jvm" || failed=1
echo "== pytest: the JVM tests (tests/interop, tests/spark; ran alongside)"
cat "$jvm_log"
rm -f "$jvm_log"
echo "== pytest: serial (timing-dependent), alone"
run --durations=15 -m serial tests "$@" || failed=1
[ "$failed" = 0 ] || exit 1
echo "== benchmarks"
.venv/bin/pytest -q -p no:cacheprovider benchmarks --benchmark-disable-gc -s
