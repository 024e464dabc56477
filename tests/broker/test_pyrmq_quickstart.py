"""`pyrmq-quickstart` as a real process: it prints its progress and a ready line, the group it
started serves a send and a pull through its name server (examples/quickstart.py), a kill -9 of
the master shows the controller's new master (the example then reaches it through the name
server, with every earlier message still there) and the old one is started again, and SIGINT
stops every child with nothing left listening on any port the group used; started again on its
data dir, it comes back on the same addresses with its messages."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 150.0
STOP_TIMEOUT_S = 60.0
READY = "pyrmq-quickstart: ready"


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


def start(data_dir: Path, out_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with out_path.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "broker.quickstart", "--data-dir", str(data_dir),
             "--namesrv-port", "0"],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


def wait_for(done: Callable[[str], bool], process: subprocess.Popen[bytes], out_path: Path,
             children: set[int], what: str) -> str:
    """Poll the quickstart's output until `done`; collects its children's pids meanwhile."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not done(out_path.read_text()):
        assert process.poll() is None, out_path.read_text()
        assert time.monotonic() < deadline, f"no {what} in time\n" + out_path.read_text()
        children |= _children(process.pid)
        time.sleep(0.1)
    children |= _children(process.pid)
    return out_path.read_text()


def example(namesrv: str, env: dict[str, str]) -> str:
    run = subprocess.run(
        [sys.executable, "examples/quickstart.py", "--namesrv", namesrv],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def stop(process: subprocess.Popen[bytes], out_path: Path) -> str:
    process.send_signal(signal.SIGINT)
    status = process.wait(timeout=STOP_TIMEOUT_S)
    text = out_path.read_text()
    print(text[text.index("pyrmq-quickstart: ready"):])
    assert status == 0, text
    assert "stopped: b1 exit 0, b2 exit 0, b3 exit 0, controller exit 0" in text, text
    return text


def test_quickstart_serves_through_its_name_server_and_stops_everything(tmp_path: Path) -> None:
    data_dir = tmp_path / "qs"
    out_path = tmp_path / "quickstart.out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = start(data_dir, out_path, env)
    children: set[int] = set()
    try:
        text = wait_for(lambda t: READY in t, process, out_path, children, "ready line")
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
        assert "received 10 messages" in example(namesrv.group(1), env)

        # kill -9 of the master: the quickstart shows the controller's new master and starts the
        # old one again; the example finds the new master through the name server.
        elected = re.search(r"master elected: (b\d) (\S+) ", text)
        assert elected is not None, text
        master_pid = next(pid for pid in children if f"/{elected.group(1)}/broker.conf".encode()
                          in Path(f"/proc/{pid}/cmdline").read_bytes())
        os.kill(master_pid, signal.SIGKILL)
        new_master = re.compile(rf"controller: master (b\d) (?!{re.escape(elected.group(2))})"
                                r"\S+ .*SyncStateSet \[")
        wait_for(lambda t: bool(new_master.search(t))
                 and f"{elected.group(1)} exited with status -9" in t,
                 process, out_path, children, "failover shown")
        # Queue offsets 0..19 on the new master: the first ten are still there.
        assert "received queueOffset=19 " in example(namesrv.group(1), env)

        text = stop(process, out_path)
        assert len(children) == 5, (children, text)  # and the old master started again
        assert not [pid for pid in children if _alive(pid)], text
        assert not [port for port in ports if _listening(port)], text

        # Started again on its data dir: the same addresses, the controller's state and the
        # messages are back.
        process = start(data_dir, tmp_path / "again.out", env)
        again = wait_for(lambda t: READY in t, process, tmp_path / "again.out", children,
                         "ready line after a restart")
        brokers = re.compile(r"brokers of broker-a: .*")
        assert f"name server and controller {namesrv.group(1)}," in again, again
        assert _match(brokers, again) == _match(brokers, text), again
        assert "received queueOffset=29 " in example(namesrv.group(1), env)
        stop(process, tmp_path / "again.out")
        assert not [pid for pid in children if _alive(pid)], again
        assert not [port for port in ports if _listening(port)], again
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _match(pattern: re.Pattern[str], text: str) -> str:
    found = pattern.search(text)
    assert found is not None, text
    return found.group(0)
