#!/usr/bin/env bash
# Create .venv and install pyrmq with the pinned dev dependencies (constraints.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's redis-server: the peer of benchmarks/test_broker_throughput.py (CI runs as root).
if ! command -v redis-server >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server
    else
        echo "note: redis-server is missing; the broker benchmark needs it (apt-get install redis-server)"
    fi
fi
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# editable_mode=compat: the repository root goes on sys.path by a .pth file, so that
# pkgutil.iter_modules() lists pyspark_rocketmq and Spark's own data-source lookup finds format
# `rocketmq` from any directory (setuptools' default editable finder hook is invisible to it).
.venv/bin/python -m pip install --quiet -c constraints.txt -e '.[dev,spark]' \
    --config-settings editable_mode=compat
.venv/bin/python -m tests.interop.build  # every RocketMQ release in tests/interop/build.py ROCKETMQ_VERSIONS + our Java programs (Maven; seconds when cached)
# The stock C++ client (PyPI rocketmq 0.4.4 over librocketmq) for tests/interop, in its own venv.
if [ ! -x .venv-cpp/bin/python ]; then
    python3 -m venv .venv-cpp
fi
.venv-cpp/bin/python -m pip install --quiet -r tests/interop/cpp-requirements.txt
