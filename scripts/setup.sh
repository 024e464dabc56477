#!/usr/bin/env bash
# Create .venv and install pyrmq with the pinned dev dependencies (constraints.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e '.[dev]'
