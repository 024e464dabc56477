#!/usr/bin/env bash
# Start pyrmq's name server (127.0.0.1:9876) and one broker (127.0.0.1:10911) on loopback with
# conf/*.conf; Ctrl-C (or SIGTERM) stops both gracefully. Data goes to ./run/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p run
.venv/bin/pyrmq-controller -c conf/controller.conf &
controller=$!
broker=""
stop() {
    [ -n "$broker" ] && kill -TERM "$broker" 2>/dev/null || true
    [ -n "$broker" ] && wait "$broker" 2>/dev/null || true
    kill -TERM "$controller" 2>/dev/null || true
    wait "$controller" 2>/dev/null || true
}
trap stop EXIT INT TERM
.venv/bin/pyrmq-broker -c conf/broker.conf &
broker=$!
echo "pyrmq: name server 127.0.0.1:9876, broker broker-a 127.0.0.1:10911 (Ctrl-C to stop)"
wait "$broker"
