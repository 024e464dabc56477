"""`pyrmq-controller` as a real process: print the config, serve, stop on SIGTERM with status 0."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from remoting.bodies import ClusterInfo
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand

pytestmark = pytest.mark.timeout(30)

COMMAND = (sys.executable, "-m", "controller")
ROOT = Path(__file__).resolve().parents[2]


def write_conf(tmp_path: Path, text: str) -> Path:
    conf = tmp_path / "controller.conf"
    conf.write_text(text)
    return conf


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        (*COMMAND, *args), cwd=ROOT, capture_output=True, text=True, timeout=20, check=False
    )


def test_print_config_items_and_exit(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, f"listenPort=19876\ncontrollerStorePath={tmp_path}/ctl\n")
    everything = run_cli("-c", str(conf), "-p")
    assert everything.returncode == 0, everything.stderr
    assert everything.stdout.splitlines() == [
        "listenPort=19876",
        "bindAddress=0.0.0.0",
        f"controllerStorePath={tmp_path}/ctl",
        "scanNotActiveBrokerInterval=5000",
        "brokerChannelExpiredTime=120000",
        "serverChannelMaxIdleTimeSeconds=120",
        "serverSocketBacklog=1024",
        "enableControllerInNamesrv=true",
        "controllerListenPort=",
        "scanInactiveMasterInterval=5000",
        "inactiveMasterScanDelay=10000",
        "electMasterMaxRetryCount=3",
        "enableElectUncleanMaster=false",
        "notifyBrokerRoleChanged=true",
        "pyrmqAdminAllowlist=",
    ]
    important = run_cli("-c", str(conf), "-m")
    assert important.returncode == 0, important.stderr
    assert important.stdout.splitlines() == [
        "listenPort=19876",
        f"controllerStorePath={tmp_path}/ctl",
        "enableControllerInNamesrv=true",
        "controllerListenPort=",
    ]


def test_bad_config_exits_1_naming_the_line(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "# pyrmq\nlistenPort=ninety\n")
    result = run_cli("-c", str(conf))
    assert result.returncode == 1
    assert f"{conf}:2: listenPort='ninety' is not an int" in result.stderr


def test_missing_config_file_exits_1(tmp_path: Path) -> None:
    result = run_cli("-c", str(tmp_path / "absent.conf"))
    assert result.returncode == 1
    assert "absent.conf: cannot read" in result.stderr


def test_port_in_use_exits_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf = write_conf(tmp_path, f"listenPort={port}\nbindAddress=127.0.0.1\n")
        result = run_cli("-c", str(conf))
    assert result.returncode == 1
    assert f"cannot serve on 127.0.0.1:{port}" in result.stderr


async def test_serves_until_sigterm_then_exits_0(tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path,
        f"listenPort=0\nbindAddress=127.0.0.1\ncontrollerStorePath={tmp_path}\nsomeJavaKey=1\n",
    )
    process = await asyncio.create_subprocess_exec(
        *COMMAND, "-c", str(conf), cwd=ROOT, stderr=asyncio.subprocess.PIPE
    )
    assert process.stderr is not None
    try:
        async with asyncio.timeout(15):
            log_lines: list[bytes] = []
            while (match := _listening(log_lines)) is None:
                line = await process.stderr.readline()
                assert line, f"exited before listening: {b''.join(log_lines)!r}"
                log_lines.append(line)
            client = await RemotingClient.connect("127.0.0.1", match)
            response = await client.invoke(
                RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3_000
            )
            assert response.code == ResponseCode.SUCCESS
            assert ClusterInfo.decode(response.body) == ClusterInfo()
            process.send_signal(signal.SIGTERM)
            rest = await process.stderr.read()
            assert await process.wait() == 0
            await client.close()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    log = b"".join(log_lines).decode() + rest.decode()
    assert "unknown key someJavaKey ignored" in log
    assert "pyrmq-controller stopped" in log


def _listening(lines: list[bytes]) -> int | None:
    """The port from the server's "listening address=host:port" log line, once it is there."""
    for line in lines:
        found = re.search(rb"listening address=127\.0\.0\.1:(\d+)", line)
        if found:
            return int(found.group(1))
    return None
