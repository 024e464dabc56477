#!/usr/bin/env bash
# The test command: set up, lint, type-check, run every test and the benchmarks.
# pytest runs in two passes (tests/conftest.py marks the `serial` tests): first the tests not
# marked serial as two pytest streams side by side, then the serial (timing-dependent) tests
# alone. Stream A runs the JVM tests (tests/interop, tests/spark) of the reference release;
# stream B the Python-only tests, then the interop tests of the other releases (the Python-only
# tests take a third of stream A's time: stream B would idle for the rest). So for a while two
# JVM tests run at once, never more. The benchmarks run last, alone and serially: they measure
# speed.
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
# Interop test ids name their release (test_x[rocketmq-5.3.3]): the releases after the first
# (the reference) in tests/interop/build.py ROCKETMQ_VERSIONS, as a pytest -k expression.
others=$(.venv/bin/python -c 'from tests.interop.build import ROCKETMQ_VERSIONS as v
print(" or ".join(f"rocketmq-{r}" for r in v[1:]) or "no-other-release")')
jvm_log=$(mktemp)
echo "== pytest: stream A (JVM tests of the reference release, Spark) beside stream B"
run --durations=20 -m "not serial" -k "not ($others)" tests/interop tests/spark "$@" \
    >"$jvm_log" 2>&1 &
jvm=$!
echo "== pytest: stream B (Python-only tests, then the other releases' interop tests)"
run --durations=20 -m "not serial" tests --ignore=tests/interop --ignore=tests/spark "$@" \
    || failed=1
run --durations=10 -m "not serial" -k "$others" tests/interop "$@" || failed=1
wait "$jvm" || failed=1
echo "== pytest: stream A (ran alongside)"
cat "$jvm_log"
rm -f "$jvm_log"
echo "== pytest: serial (timing-dependent), alone"
run --durations=15 -m serial tests "$@" || failed=1
[ "$failed" = 0 ] || exit 1
echo "== benchmarks"
.venv/bin/pytest -q -p no:cacheprovider benchmarks --benchmark-disable-gc -s
