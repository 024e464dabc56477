"""The real `mqadmin` (rocketmq-tools, each release) against pyrmq's embedded controller:
getControllerMetaData, getControllerConfig, getSyncStateSet and electMaster succeed and print
pyrmq's state. The controller's address is also given as the name server (`-n`): one address
serves both."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.controller.test_controller_server import addr_of, close_all, running, three_brokers
from tests.interop.harness import JavaEnv

pytestmark = pytest.mark.interop

# The brokers here heartbeat once; mqadmin's JVMs take seconds each, so they must stay alive.
HEARTBEAT_TIMEOUT_MS = 600_000


async def test_mqadmin_controller_commands(java_env: JavaEnv, tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        addr = addr_of(server.address)
        listeners, clients = await three_brokers(addr, tmp_path, timeout_ms=HEARTBEAT_TIMEOUT_MS)
        try:
            meta = await asyncio.to_thread(
                java_env.mqadmin, addr, "getControllerMetaData", "-a", addr
            )
            assert f"#ControllerLeaderAddress\t{addr}" in meta.stdout.splitlines(), meta.stdout
            config = await asyncio.to_thread(
                java_env.mqadmin, addr, "getControllerConfig", "-a", addr
            )
            assert "enableControllerInNamesrv" in config.stdout, config.stdout

            sss = await asyncio.to_thread(
                java_env.mqadmin, addr, "getSyncStateSet", "-a", addr, "-b", "broker-a"
            )
            lines = sss.stdout.splitlines()
            assert "#brokerName\tbroker-a" in lines, sss.stdout
            assert f"#MasterAddr\t{listeners[0].addr}" in lines
            assert "#MasterEpoch\t1" in lines
            assert "#SyncStateSetEpoch\t2" in lines
            assert "#SyncStateSetNums\t3" in lines
            assert sum("InSyncReplica:" in line for line in lines) == 3

            elected = await asyncio.to_thread(
                java_env.mqadmin,
                addr,
                "electMaster",
                "-a", addr,
                "-b", "2",
                "-bn", "broker-a",
                "-c", "DefaultCluster",
            )  # fmt: skip
            lines = elected.stdout.splitlines()
            assert f"#BrokerMasterAddr\t{listeners[1].addr}" in lines, elected.stdout
            assert "#MasterEpoch\t2" in lines
            assert "#SyncStateSetEpoch\t3" in lines
            # No "#Broker" lines: mqadmin decodes the body as a BrokerMemberGroup while the
            # controller (Java's too) sends an ElectMasterResponseBody that nests it.

            after = await asyncio.to_thread(
                java_env.mqadmin, addr, "getSyncStateSet", "-a", addr, "-b", "broker-a"
            )
            assert f"#MasterAddr\t{listeners[1].addr}" in after.stdout.splitlines(), after.stdout
            assert "#SyncStateSetNums\t1" in after.stdout.splitlines()
        finally:
            await close_all(listeners, clients)
