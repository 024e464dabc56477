#!/usr/bin/env bash
# Start the quickstart group on loopback: pyrmq's name server and embedded controller
# (127.0.0.1:9876) and three brokers of broker-a in controller mode (free ports, printed);
# Ctrl-C (or SIGTERM) stops all of them gracefully. Data goes to ./run/quickstart/.
# The same as `.venv/bin/pyrmq-quickstart`; arguments are passed on (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/pyrmq-quickstart "$@"
