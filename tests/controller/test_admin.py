"""`pyrmq-admin` (a real process) against pyrmq's embedded controller and name server: each
command prints mqadmin's lines; failures are one line on stderr and exit status 1."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from remoting.client import RemotingClient
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.server import RemotingServer
from tests.controller.test_controller_server import (
    addr_of,
    close_all,
    running,
    three_brokers,
)
from tests.controller.test_server import register_request

ROOT = Path(__file__).resolve().parents[2]


async def admin(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "controller.admin", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_controller_commands(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        addr = addr_of(server.address)
        listeners, clients = await three_brokers(addr, tmp_path)
        try:
            meta = await admin("getControllerMetaData", "-a", addr)
            assert meta.returncode == 0, meta.stderr
            assert f"#ControllerLeaderAddress\t{addr}" in meta.stdout.splitlines()

            sss = await admin("getSyncStateSet", "-a", addr, "-b", "broker-a")
            assert sss.returncode == 0, sss.stderr
            lines = [line for line in sss.stdout.splitlines() if line]
            assert lines[:6] == [
                "#brokerName\tbroker-a",
                "#MasterBrokerId\t1",
                f"#MasterAddr\t{listeners[0].addr}",
                "#MasterEpoch\t1",
                "#SyncStateSetEpoch\t2",
                "#SyncStateSetNums\t3",
            ]
            assert sum(" InSyncReplica:" in line and "online" in line for line in lines) == 3

            elected = await admin(
                "electMaster", "-a", addr, "-b", "2", "-bn", "broker-a", "-c", "DefaultCluster"
            )
            assert elected.returncode == 0, elected.stderr
            assert f"#BrokerMasterAddr\t{listeners[1].addr}" in elected.stdout.splitlines()
            assert "#MasterEpoch\t2" in elected.stdout.splitlines()
            assert f"\t#Broker\t3\t{listeners[2].addr}" in elected.stdout.splitlines()

            # Broker 2 is master now: electing it again is refused (2011), one line, status 1.
            again = await admin(
                "electMaster", "-a", addr, "-b", "2", "-bn", "broker-a", "-c", "DefaultCluster"
            )
            assert again.returncode == 1
            assert "2011 CONTROLLER_MASTER_STILL_EXIST" in again.stderr
            assert len(again.stderr.splitlines()) == 1
        finally:
            await close_all(listeners, clients)


async def test_name_server_commands(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        addr = addr_of(server.address)
        # The registration lives as long as its connection: keep it open meanwhile.
        async with await RemotingClient.connect(*server.address) as client:
            answer = await client.invoke(register_request(addr, 0), 3000)
            assert answer.code == ResponseCode.SUCCESS
            listed = await admin("clusterList", "-n", addr)
            assert listed.returncode == 0, listed.stderr
            rows = [line.split() for line in listed.stdout.splitlines()[1:]]
            assert rows == [["DefaultCluster", "broker-a", "0", addr]]
            # The "broker" registered here is the controller itself: it has no epoch cache.
            epoch = await admin("getBrokerEpoch", "-n", addr, "-b", "broker-a")
            assert epoch.returncode == 1
            assert "GET_BROKER_EPOCH_CACHE" in epoch.stderr
            assert "3 REQUEST_CODE_NOT_SUPPORTED" in epoch.stderr


async def test_unreachable_controller_is_one_line(tmp_path: Path) -> None:
    result = await admin("getControllerMetaData", "-a", "127.0.0.1:1")
    assert result.returncode == 1
    assert result.stderr.startswith("pyrmq-admin getControllerMetaData: ")
    assert len(result.stderr.splitlines()) == 1


async def test_an_undecodable_answer_is_one_line() -> None:
    """A broker (or anything on that port) answering SUCCESS with a body that is not
    HARuntimeInfo: one line naming the command, status 1, no traceback."""

    async def answer(_connection: RemotingConnection, request: RemotingCommand) \
            -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=b"[1, 2")

    async with RemotingServer(answer, name="garbage") as server:
        await server.start("127.0.0.1")
        host, port = server.address
        result = await admin("haStatus", "-b", f"{host}:{port}")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("pyrmq-admin haStatus: the answer's body does not decode")
    assert len(result.stderr.splitlines()) == 1
