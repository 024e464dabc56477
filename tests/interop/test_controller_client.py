"""pyrmq's controller client against the real Apache RocketMQ controller (each release).

A standalone `ControllerStartup` (DLedger, one node, loopback, free ports) is started; pyrmq's
`ControllerClient` finds its leader, registers a broker through the persistent broker id
protocol (GET_NEXT_BROKER_ID, APPLY_BROKER_ID, REGISTER_BROKER), heartbeats, and reads the
broker set's replica info; a second broker of the same set gets id 2.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from controller_client import errors
from controller_client.client import ControllerClient
from controller_client.messages import INT32_MAX, BrokerHeartbeatRequestHeader, SyncStateSet
from store.broker_identity import BROKER_IDENTITY_FILE_NAME, BrokerIdentity, load_broker_identity
from tests.interop.harness import JavaEnv, _write_properties
from tests.interop.network import free_port, port_accepts

pytestmark = pytest.mark.interop

CONTROLLER_MAIN = "org.apache.rocketmq.controller.ControllerStartup"
START_TIMEOUT_S = 30.0
CLUSTER, BROKER = "DefaultCluster", "broker-a"


def start_controller(java: JavaEnv, work_dir: Path) -> str:
    """ControllerStartup, one DLedger node on 127.0.0.1; returns its remoting address."""
    # With DLedger the controller serves remoting on its Raft peer address (no other port).
    port = free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    conf = _write_properties(
        work_dir / "controller.conf",
        {
            "controllerType": "DLedger",
            "controllerDLegerGroup": "pyrmq",
            "controllerDLegerPeers": f"n0-127.0.0.1:{port}",
            "controllerDLegerSelfId": "n0",
            "controllerStorePath": str(work_dir / "store"),
        },
    )
    process = java.start_java(
        CONTROLLER_MAIN,
        ["-c", str(conf)],
        name="controller",
        # hessian (the controller's Raft log codec) reflects into java.lang on JDK 17.
        jvm_args=("--add-opens", "java.base/java.lang=ALL-UNNAMED"),
    )
    addr = f"127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not port_accepts(addr):
        if not process.alive() or time.monotonic() > deadline:
            raise AssertionError(f"controller did not listen on {addr}\n{process.diagnostics()}")
        time.sleep(0.2)
    return addr


async def find_leader(client: ControllerClient, timeout_s: float) -> str:
    """Leader election of a fresh DLedger node takes a few seconds: ask until one is known."""
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                return await client.find_leader()
            except errors.ControllerUnavailableError:
                await asyncio.sleep(0.2)


async def test_register_heartbeat_replica_info(java_env: JavaEnv, tmp_path: Path) -> None:
    addr = start_controller(java_env, tmp_path / "controller")
    client = ControllerClient((addr,))
    try:
        leader = await find_leader(client, START_TIMEOUT_S)
        for store_root in ("b1", "b2"):
            (tmp_path / store_root).mkdir()
        assert leader == addr

        first = await client.register(tmp_path / "b1", CLUSTER, BROKER, "127.0.0.1:30911")
        assert first.broker_id == 1
        assert load_broker_identity(tmp_path / "b1" / BROKER_IDENTITY_FILE_NAME) == (
            BrokerIdentity(CLUSTER, BROKER, 1)
        )
        assert first.master.master_broker_id is None  # no master elected yet

        second = await client.register(tmp_path / "b2", CLUSTER, BROKER, "127.0.0.1:30912")
        assert second.broker_id == 2

        # Registering again from the identity file: same id, nothing new applied.
        again = await client.register(tmp_path / "b1", CLUSTER, BROKER, "127.0.0.1:30911")
        assert again.broker_id == 1
        assert await client.get_next_broker_id(CLUSTER, BROKER) == 3

        heartbeat = BrokerHeartbeatRequestHeader(
            CLUSTER, "127.0.0.1:30911", BROKER, 1, -1, 0, 0, 10_000, INT32_MAX
        )
        assert await client.heartbeat(heartbeat) == []

        info = await client.get_replica_info(BROKER)
        assert info.header.master_broker_id is None

        # Broker 1 (alive: it heartbeats) is elected; then broker 2, alive too, joins its set.
        elected, elected_body = await client.elect_master(CLUSTER, BROKER, 1)
        assert elected.master_broker_id == 1
        assert elected.master_address == "127.0.0.1:30911"
        assert elected_body.sync_state_set == {1}
        info = await client.get_replica_info(BROKER)
        assert info.header.master_broker_id == 1
        assert info.header.master_epoch == elected.master_epoch
        assert info.sync_state_set.sync_state_set == {1}
        await client.heartbeat(
            BrokerHeartbeatRequestHeader(
                CLUSTER, "127.0.0.1:30912", BROKER, 2, -1, 0, 0, 10_000, INT32_MAX
            )
        )
        assert elected.master_epoch is not None
        new_set = await client.alter_sync_state_set(
            BROKER,
            1,
            elected.master_epoch,
            SyncStateSet(frozenset({1, 2}), info.sync_state_set.sync_state_set_epoch),
        )
        assert new_set == SyncStateSet(
            frozenset({1, 2}), info.sync_state_set.sync_state_set_epoch + 1
        )
        # The same set again: refused (2013, the proposed set equals the current one).
        with pytest.raises(errors.ControllerAlterSyncStateSetFailedError):
            await client.alter_sync_state_set(
                BROKER,
                1,
                elected.master_epoch,
                SyncStateSet(frozenset({1, 2}), info.sync_state_set.sync_state_set_epoch),
            )

        with pytest.raises(errors.ControllerBrokerMetadataNotExistError):
            await client.get_replica_info("no-such-broker")
    finally:
        await client.close()
