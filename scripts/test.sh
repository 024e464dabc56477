#!/usr/bin/env bash
# The test command: set up, lint, type-check, run every test and the benchmarks.
# pytest runs in two passes (tests/conftest.py marks the tests): everything not marked `serial`
# on two pytest-xdist workers (interop grouped per RocketMQ release, Spark in one group), then the
# timing-dependent tests alone. The benchmarks run last, alone and serially: they measure speed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy --strict"
.venv/bin/mypy --strict store remoting broker ha controller_client controller pyrmq_client pyspark_rocketmq tests benchmarks examples
failed=0
pass_() {  # one pytest pass; exit status 5 (a selection with no test in this pass) is no failure
    .venv/bin/pytest -q -p no:cacheprovider "$@" || [ $? = 5 ] || failed=1
}
echo "== pytest, two workers (not serial)"
pass_ --durations=30 -n 2 --dist loadgroup -m "not serial" tests "$@"
echo "== pytest, serial (timing-dependent)"
pass_ --durations=15 -m serial tests "$@"
[ "$failed" = 0 ] || exit 1
echo "== benchmarks"
.venv/bin/pytest -q -p no:cacheprovider benchmarks --benchmark-disable-gc -s
