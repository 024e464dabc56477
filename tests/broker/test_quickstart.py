"""The README quick start: conf/*.conf start a name server and a broker, and
examples/quickstart.py sends and pulls through them (ports and dirs moved to free ones)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _conf(source: Path, target: Path, overrides: dict[str, str]) -> Path:
    lines = []
    for line in source.read_text().splitlines():
        key = line.split("=", 1)[0].strip()
        lines.append(f"{key}={overrides.pop(key)}" if key in overrides else line)
    lines.extend(f"{key}={value}" for key, value in overrides.items())
    target.write_text("\n".join(lines) + "\n")
    return target


def _wait_port(port: int, deadline_s: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"process exited with {process.returncode}"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"port {port} never opened")


def test_quickstart_example_against_the_default_confs(tmp_path: Path) -> None:
    namesrv_port, broker_port = _free_port(), _free_port()
    controller_conf = _conf(REPO / "conf/controller.conf", tmp_path / "controller.conf",
                            {"listenPort": str(namesrv_port),
                             "controllerStorePath": str(tmp_path / "controller")})
    broker_conf = _conf(REPO / "conf/broker.conf", tmp_path / "broker.conf", {
        "listenPort": str(broker_port), "namesrvAddr": f"127.0.0.1:{namesrv_port}",
        "storePathRootDir": str(tmp_path / "store"), "mappedFileSizeCommitLog": "1048576",
        "metricsExporterType": "DISABLE",
    })
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    logs = [(tmp_path / name).open("wb") for name in ("controller.log", "broker.log")]
    controller = subprocess.Popen([sys.executable, "-m", "controller", "-c",
                                   str(controller_conf)], cwd=REPO, env=env,
                                  stdout=logs[0], stderr=subprocess.STDOUT)
    broker = None
    try:
        _wait_port(namesrv_port, 20, controller)
        broker = subprocess.Popen([sys.executable, "-m", "broker", "-c", str(broker_conf)],
                                  cwd=REPO, env=env, stdout=logs[1], stderr=subprocess.STDOUT)
        _wait_port(broker_port, 30, broker)
        example = subprocess.run(
            [sys.executable, "examples/quickstart.py", "--broker", f"127.0.0.1:{broker_port}"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
        )
        assert example.returncode == 0, example.stdout + example.stderr
        assert "received 10 messages" in example.stdout
    finally:
        for process in (broker, controller):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
        for log in logs:
            log.close()
    assert broker is not None
    assert broker.returncode == 0, (tmp_path / "broker.log").read_text()
    assert controller.returncode == 0, (tmp_path / "controller.log").read_text()
