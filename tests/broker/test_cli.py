"""`pyrmq-broker`: printing the config, refusing bad files and busy ports, a graceful SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from broker.__main__ import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from pyrmq_client import BrokerClient, Message, Producer
from remoting.codes import RequestCode
from tests.broker.support import FakeNameServer, wait_until
from tests.interop.network import free_port

pytestmark = pytest.mark.timeout(150)

REPO = Path(__file__).resolve().parents[2]


def thread_names(pid: int) -> set[str]:
    """The kernel's names of the threads of process `pid`."""
    names = set()
    for comm in Path(f"/proc/{pid}/task").glob("*/comm"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            names.add(comm.read_text().rstrip("\n"))
    return names


def process_name(pid: int) -> str:
    """The kernel's name of process `pid` (its main thread's): what ps and pgrep show."""
    return Path(f"/proc/{pid}/comm").read_text().rstrip("\n")


def test_print_important_config_items(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-b\nbrokerClusterName=C1\n")
    assert main(["-c", str(conf), "-n", "10.0.0.1:9876", "-m"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert "brokerName=broker-b" in lines
    assert "brokerClusterName=C1" in lines
    assert "namesrvAddr=10.0.0.1:9876" in lines
    assert not any(line.startswith("haTransferBatchSize=") for line in lines)


def test_print_all_config_items(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-b\n")
    assert main(["-c", str(conf), "-p"]) == EXIT_OK
    assert "haTransferBatchSize=32768" in capsys.readouterr().out.splitlines()


def test_bad_value_exits_2_naming_key_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-b\nlistenPort=ten\n")
    assert main(["-c", str(conf), "-p"]) == EXIT_USAGE
    assert f"{conf}:2: listenPort='ten' is not an int32" in capsys.readouterr().err


def test_old_style_slave_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerId=1\nbrokerRole=SLAVE\nstorePathRootDir={tmp_path / 's'}\n")
    assert main(["-c", str(conf)]) == EXIT_USAGE
    assert "brokerId=1 without enableControllerMode" in capsys.readouterr().err


async def test_sigterm_stops_gracefully_and_unregisters(tmp_path: Path) -> None:
    async with FakeNameServer() as namesrv:
        conf = tmp_path / "broker.conf"
        conf.write_text(
            "brokerClusterName = DefaultCluster\nbrokerName = broker-a\nbrokerId = 0\n"
            "brokerIP1 = 127.0.0.1\nbindAddress = 127.0.0.1\nlistenPort = 0\n"
            f"storePathRootDir = {tmp_path / 'store'}\nmappedFileSizeCommitLog = 1048576\n"
            "mappedFileSizeConsumeQueue = 20000\nmetricsExporterType = DISABLE\n"
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "broker", "-c", str(conf), "-n", namesrv.address,
            cwd=REPO, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert process.stderr is not None
        log: list[str] = []
        try:
            async with asyncio.timeout(20):
                while True:
                    line = (await process.stderr.readline()).decode()
                    assert line, f"broker exited early:\n{''.join(log)}"
                    log.append(line)
                    if "broker started" in line:
                        break
            match = re.search(r"address=127\.0\.0\.1:(\d+)", log[-1])
            assert match is not None
            async with await BrokerClient.connect("127.0.0.1", int(match.group(1))) as client:
                result = await Producer(client, "PG").send(Message("TopicTest", b"x"))
                assert result.queue_offset == 0
            await wait_until(lambda: len(namesrv.registrations) >= 1, timeout_s=10,
                             what="registration")
            # Its threads carry their names in the kernel (broker/os_threads.py); the loop's
            # thread keeps the process's.
            wanted = {"pyrmq-log", "loop-monitor", *(f"store-io_{i}" for i in range(4))}
            await wait_until(lambda: wanted <= thread_names(process.pid), timeout_s=10,
                             what=f"thread names {sorted(wanted)}")
            assert process_name(process.pid).startswith("python"), process_name(process.pid)
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(20):
                rest = (await process.stderr.read()).decode()
                code = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert code == EXIT_OK, "".join(log) + rest
        assert "broker stopped cleanly" in rest
        assert "start-up heap frozen" in "".join(log) + rest  # the entry point freezes it
        assert len(namesrv.of_code(RequestCode.UNREGISTER_BROKER)) == 1
        assert not (tmp_path / "store" / "abort").exists()  # a clean close removes it
        assert (tmp_path / "store" / "config" / "topics.json").exists()


def test_controller_mode_without_a_controller_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"enableControllerMode=true\nstorePathRootDir={tmp_path / 's'}\n")
    assert main(["-c", str(conf)]) == EXIT_USAGE
    assert "enableControllerMode=true needs controllerAddr" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["listenPort", "haListenPort", "metricsPromExporterPort"])
def test_a_port_in_use_is_a_one_line_error_naming_its_key(tmp_path: Path, key: str) -> None:
    # Several brokers on one host is the normal set-up: a port another process holds stops
    # the broker with one line that names the key to change, not a traceback.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = {k: free_port() for k in ("listenPort", "haListenPort", "metricsPromExporterPort")}
        ports[key] = busy
        conf = tmp_path / "broker.conf"
        conf.write_text(
            f"brokerIP1=127.0.0.1\nbrokerIP2=127.0.0.1\nstorePathRootDir={tmp_path / 'store'}\n"
            "enableControllerMode=true\npyrmqHaRole=master\nmetricsPromExporterHost=127.0.0.1\n"
            + "".join(f"{k}={v}\n" for k, v in ports.items())
        )
        run = subprocess.run(
            [sys.executable, "-m", "broker", "-c", str(conf)], cwd=REPO, capture_output=True,
            text=True, timeout=120, check=False,
        )
    assert run.returncode == EXIT_FAILED, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    errors = [line for line in run.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, run.stderr
    assert f"({key}={busy}): already in use" in errors[0]


def test_a_broker_whose_log_is_not_read_keeps_answering(tmp_path: Path) -> None:
    # A log reader that stops reading (a paused terminal, a stuck collector) fills the pipe;
    # a write to it then blocks. The broker's log is written by a thread of its own
    # (remoting/log_writer.py), so its event loop goes on: before, the broker answered nothing
    # once 64 KiB of warnings had filled the pipe.
    port = free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerIP1=127.0.0.1\nbrokerIP2=127.0.0.1\nbindAddress=127.0.0.1\nlistenPort={port}\n"
        f"haListenPort={free_port()}\nstorePathRootDir={tmp_path / 'store'}\n"
        "mappedFileSizeCommitLog=1048576\nmappedFileSizeConsumeQueue=20000\n"
        "metricsExporterType=DISABLE\n"
    )
    broker = subprocess.Popen(
        [sys.executable, "-m", "broker", "-c", str(conf)], cwd=REPO, stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    assert broker.stderr is not None
    try:
        for line in broker.stderr:  # up: from here on nobody reads its log for a while
            if b"broker started" in line:
                break
        bad_connections = 1000  # a warning each: some 150 KB of log, the pipe takes 64 KiB
        for _ in range(bad_connections):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(b"\xff" * 32)  # a frame length no decoder takes

        async def send() -> int:
            async with asyncio.timeout(10), \
                    await BrokerClient.connect("127.0.0.1", port) as client:
                return (await Producer(client, "PG").send(Message("TopicTest", b"x"))).queue_offset

        assert asyncio.run(send()) == 0
        broker.send_signal(signal.SIGTERM)
        _, rest = broker.communicate(timeout=60)  # the reader is back: the rest is written
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
    assert broker.returncode == EXIT_OK
    log = rest.decode()
    assert log.count("closing remoting connection") == bad_connections  # none dropped
    assert "broker stopped cleanly" in log
