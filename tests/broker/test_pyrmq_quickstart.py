"""`pyrmq-quickstart` as a real process: it prints its progress and a ready line, the group it
started serves a send and a pull through its name server (examples/quickstart.py), a kill -9 of
the master shows the controller's new master (the example then reaches it through the name
server, with every earlier message still there) and the old one is started again, and SIGINT
stops every child with nothing left listening on any port the group used."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 150.0
STOP_TIMEOUT_S = 60.0


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: its parent (the quickstart) has not reaped it yet.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    return False


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def test_quickstart_serves_through_its_name_server_and_stops_everything(tmp_path: Path) -> None:
    data_dir = tmp_path / "qs"
    out_path = tmp_path / "quickstart.out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with out_path.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "broker.quickstart", "--data-dir", str(data_dir),
             "--namesrv-port", "0"],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    children: set[int] = set()
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "pyrmq-quickstart: ready" not in out_path.read_text():
            assert process.poll() is None, out_path.read_text()
            assert time.monotonic() < deadline, "no ready line in time\n" + out_path.read_text()
            children |= _children(process.pid)
            time.sleep(0.1)
        children |= _children(process.pid)
        text = out_path.read_text()
        print(text)
        for progress in ("controller and name server up", "b1 registered", "b2 registered",
                         "b3 registered", "master elected", "SyncStateSet of 3"):
            assert progress in text, text
        assert len(children) == 4, (children, text)  # the controller and three brokers
        namesrv = re.search(r"ready: name server and controller (\S+),", text)
        assert namesrv is not None, text
        ports = {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", text)}
        assert len(ports) == 1 + 3 * 3, (sorted(ports), text)  # namesrv; listen, HA, metrics
        assert all(_listening(port) for port in ports), text

        example = subprocess.run(
            [sys.executable, "examples/quickstart.py", "--namesrv", namesrv.group(1)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert example.returncode == 0, example.stdout + example.stderr
        assert "received 10 messages" in example.stdout, example.stdout

        # kill -9 of the master: the quickstart shows the controller's new master and starts the
        # old one again; the example finds the new master through the name server.
        elected = re.search(r"master elected: (b\d) (\S+) ", text)
        assert elected is not None, text
        master_pid = next(pid for pid in children if f"/{elected.group(1)}/broker.conf".encode()
                          in Path(f"/proc/{pid}/cmdline").read_bytes())
        os.kill(master_pid, signal.SIGKILL)
        wait_for = re.compile(rf"controller: master (b\d) (?!{re.escape(elected.group(2))})\S+ "
                              r".*SyncStateSet \[")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (wait_for.search(out_path.read_text())
                   and f"{elected.group(1)} exited with status -9" in out_path.read_text()):
            assert process.poll() is None, out_path.read_text()
            assert time.monotonic() < deadline, "no failover shown\n" + out_path.read_text()
            children |= _children(process.pid)
            time.sleep(0.1)
        children |= _children(process.pid)
        example = subprocess.run(
            [sys.executable, "examples/quickstart.py", "--namesrv", namesrv.group(1)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert example.returncode == 0, example.stdout + example.stderr + out_path.read_text()
        assert "received 20 messages" in example.stdout, example.stdout  # nothing acked lost

        process.send_signal(signal.SIGINT)
        status = process.wait(timeout=STOP_TIMEOUT_S)
        text = out_path.read_text()
        print(text[text.index("pyrmq-quickstart: ready"):])
        assert status == 0, text
        assert "stopped: b1 exit 0, b2 exit 0, b3 exit 0, controller exit 0" in text, text
        assert len(children) == 5, (children, text)  # and the old master started again
        assert not [pid for pid in children if _alive(pid)], text
        assert not [port for port in ports if _listening(port)], text
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
