#!/usr/bin/env bash
# Create .venv and install pyrmq with the pinned dev dependencies (constraints.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e '.[dev]'
.venv/bin/python -m tests.interop.build  # RocketMQ 5.3.3 jars + our Java programs for tests/interop (Maven; seconds when cached)
