#!/usr/bin/env bash
# The test command: set up, lint, type-check, run every test and the benchmarks.
# pytest runs in two passes (tests/conftest.py marks the `serial` and `alone` tests): first the
# tests not marked serial as two pytest streams side by side, then the serial (timing-dependent)
# tests: the `alone` ones by themselves, then the rest as the same two streams. Stream A runs the
# JVM tests (tests/interop, tests/spark) of the reference release; stream B the Python-only
# tests, then the interop tests of the other releases and a Spark test (the Python-only tests
# take a third of stream A's time: stream B would idle for the rest). So for a while two JVM
# tests run at once, never more. The benchmarks run last, alone and serially: they measure speed.
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
# Two Spark tests run at the end of stream B, not in stream A, so that the two streams end
# together: the worked example in the first pass (A took 9.8 min, B 7.8, 2026-12-02), the
# failover streaming test in the serial pass.
moved=(tests/spark/test_example.py tests/spark/test_failover_streaming.py)
# One pass: stream A in the background beside stream B, then stream A's output (its own log).
two_streams() {  # <label> <pytest options, e.g. -m ...>
    local label=$1 jvm_log jvm
    shift
    jvm_log=$(mktemp)
    echo "== pytest, $label: stream A (JVM tests of the reference release, Spark) beside stream B"
    run --durations=20 -k "not ($others)" tests/interop tests/spark "${moved[@]/#/--ignore=}" \
        "$@" >"$jvm_log" 2>&1 &
    jvm=$!
    echo "== pytest, $label: stream B (Python-only tests, the other releases' interop tests," \
        "${moved[*]})"
    run --durations=20 tests --ignore=tests/interop --ignore=tests/spark "$@" || failed=1
    run --durations=10 -k "$others" tests/interop "$@" || failed=1
    run "${moved[@]}" "$@" || failed=1
    wait "$jvm" || failed=1
    echo "== pytest, $label: stream A (ran alongside)"
    cat "$jvm_log"
    rm -f "$jvm_log"
}
two_streams "not serial" -m "not serial" "$@"
echo "== pytest: serial, the tests that run alone"
# Those that time the event loop or the host first, before any JVM of this pass: the host-pause
# probes' test, run right after the groups of Java brokers, once saw no pause at all.
run --durations=10 -m alone tests --ignore=tests/interop --ignore=tests/spark "$@" || failed=1
run --durations=10 -m alone tests/interop tests/spark "$@" || failed=1
two_streams "serial" -m "serial and not alone" "$@"
[ "$failed" = 0 ] || exit 1
echo "== benchmarks"
.venv/bin/pytest -q -p no:cacheprovider --durations=25 benchmarks --benchmark-disable-gc -s
