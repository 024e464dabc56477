#!/usr/bin/env bash
# The test command: set up, lint, type-check, run every test and the benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy --strict"
.venv/bin/mypy --strict store remoting broker ha controller_client controller pyrmq_client pyspark_rocketmq tests benchmarks examples
echo "== pytest"
.venv/bin/pytest -q -p no:cacheprovider --durations=30 tests "$@"
echo "== benchmarks"
.venv/bin/pytest -q -p no:cacheprovider benchmarks --benchmark-disable-gc -s
