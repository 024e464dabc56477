"""Controller scenarios driven by pyrmq's `ControllerClient`, run unchanged against the real
Apache RocketMQ controller (tests/interop/test_controller_client.py) and against pyrmq's
embedded one (tests/controller/test_controller_server.py): both must answer alike.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from controller_client import errors
from controller_client.client import ControllerClient
from controller_client.messages import INT32_MAX, BrokerHeartbeatRequestHeader, SyncStateSet
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from store.broker_identity import (
    BROKER_IDENTITY_FILE_NAME,
    BrokerIdentity,
    TempBrokerIdentity,
    load_broker_identity,
)

CLUSTER, BROKER = "DefaultCluster", "broker-a"
ROOT = Path(__file__).resolve().parents[2]


async def pyrmq_admin(*args: str) -> subprocess.CompletedProcess[str]:
    """`pyrmq-admin ARGS` as a real process."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "controller.admin", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def find_leader(client: ControllerClient, timeout_s: float) -> str:
    """Leader election of a fresh DLedger node takes a few seconds: ask until one is known."""
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                return await client.find_leader()
            except errors.ControllerUnavailableError:
                await asyncio.sleep(0.2)


def heartbeat(
    broker_id: int, *, epoch: int = -1, max_offset: int = 0
) -> BrokerHeartbeatRequestHeader:
    return BrokerHeartbeatRequestHeader(
        CLUSTER,
        f"127.0.0.1:{30910 + broker_id}",
        BROKER,
        broker_id,
        epoch,
        max_offset,
        0,
        10_000,
        INT32_MAX,
    )


async def register_heartbeat_elect_alter(
    addr: str, tmp_path: Path, *, leader_timeout_s: float
) -> None:
    """Three brokers get ids 1, 2, 3 through the persistent id protocol; broker 1 is elected
    (the first election); broker 2 joins the SyncStateSet; requests with stale epochs, from the
    wrong master, with a taken id or for an unknown set are refused with RocketMQ's codes and
    change nothing."""
    client = ControllerClient((addr,))
    try:
        leader = await find_leader(client, leader_timeout_s)
        assert leader == addr
        # A fresh DLedger leader names itself before its state machine serves (2007 meanwhile).
        async with asyncio.timeout(leader_timeout_s):
            while True:
                try:
                    assert await client.get_next_broker_id(CLUSTER, BROKER) == 1
                    break
                except errors.ControllerNotLeaderError:
                    await asyncio.sleep(0.2)
        for store_root in ("b1", "b2", "b3"):
            (tmp_path / store_root).mkdir()

        first = await client.register(tmp_path / "b1", CLUSTER, BROKER, "127.0.0.1:30911")
        assert first.broker_id == 1
        assert load_broker_identity(tmp_path / "b1" / BROKER_IDENTITY_FILE_NAME) == (
            BrokerIdentity(CLUSTER, BROKER, 1)
        )
        assert first.master.master_broker_id is None  # no master elected yet

        second = await client.register(tmp_path / "b2", CLUSTER, BROKER, "127.0.0.1:30912")
        assert second.broker_id == 2
        third = await client.register(tmp_path / "b3", CLUSTER, BROKER, "127.0.0.1:30913")
        assert third.broker_id == 3

        # Registering again from the identity file: same id, nothing new applied.
        again = await client.register(tmp_path / "b1", CLUSTER, BROKER, "127.0.0.1:30911")
        assert again.broker_id == 1
        assert await client.get_next_broker_id(CLUSTER, BROKER) == 4
        # An id held by another broker (another check code) is refused: 2014.
        with pytest.raises(errors.ControllerBrokerIdInvalidError):
            await client.apply_broker_id(TempBrokerIdentity(CLUSTER, BROKER, 2, "10.9.9.9:1;1"))
        assert await client.get_next_broker_id(CLUSTER, BROKER) == 4

        assert await client.heartbeat(heartbeat(1)) == []

        info = await client.get_replica_info(BROKER)
        assert info.header.master_broker_id is None

        # Broker 1 asks first: the set never had a master, so it wins.
        elected, elected_body = await client.elect_master(CLUSTER, BROKER, 1)
        assert elected.master_broker_id == 1
        assert elected.master_address == "127.0.0.1:30911"
        assert elected_body.sync_state_set == {1}
        assert elected.master_epoch is not None
        master_epoch = elected.master_epoch
        info = await client.get_replica_info(BROKER)
        assert info.header.master_broker_id == 1
        assert info.header.master_epoch == master_epoch
        assert info.sync_state_set.sync_state_set == {1}
        sss_epoch = info.sync_state_set.sync_state_set_epoch

        # Broker 2 asks while 1 is alive: the master stays (2011, treated as an answer).
        still, _ = await client.elect_master(CLUSTER, BROKER, 2)
        assert (still.master_broker_id, still.master_epoch) == (1, master_epoch)

        await client.heartbeat(heartbeat(2))
        refused = [
            (errors.ControllerInvalidMasterError, 2, master_epoch, {1, 2}, sss_epoch),
            (errors.ControllerFencedMasterEpochError, 1, master_epoch - 1, {1, 2}, sss_epoch),
            (errors.ControllerFencedSyncStateSetEpochError, 1, master_epoch, {1, 2}, sss_epoch - 1),
            (errors.ControllerBrokerNotAliveError, 1, master_epoch, {1, 3}, sss_epoch),
            (errors.ControllerInvalidReplicasError, 1, master_epoch, {1, 7}, sss_epoch),
        ]
        for error, master, epoch, members, members_epoch in refused:
            with pytest.raises(error):
                await client.alter_sync_state_set(
                    BROKER, master, epoch, SyncStateSet(frozenset(members), members_epoch)
                )
        info = await client.get_replica_info(BROKER)  # none of them changed anything
        assert info.sync_state_set == SyncStateSet(frozenset({1}), sss_epoch)

        new_set = await client.alter_sync_state_set(
            BROKER, 1, master_epoch, SyncStateSet(frozenset({1, 2}), sss_epoch)
        )
        assert new_set == SyncStateSet(frozenset({1, 2}), sss_epoch + 1)

        # pyrmq-admin reads both controllers alike.
        meta = await pyrmq_admin("getControllerMetaData", "-a", addr)
        assert f"#ControllerLeaderAddress\t{addr}" in meta.stdout.splitlines(), meta.stderr
        sss = await pyrmq_admin("getSyncStateSet", "-a", addr, "-b", BROKER)
        lines = sss.stdout.splitlines()
        assert "#MasterAddr\t127.0.0.1:30911" in lines, sss.stderr
        assert f"#MasterEpoch\t{master_epoch}" in lines
        assert "#SyncStateSetNums\t2" in lines
        assert sum(" InSyncReplica:" in line for line in lines) == 2
        assert sum(" NotInSyncReplica:" in line for line in lines) == 1
        # The same set again: refused (2013, the proposed set equals the current one).
        with pytest.raises(errors.ControllerAlterSyncStateSetFailedError):
            await client.alter_sync_state_set(
                BROKER, 1, master_epoch, SyncStateSet(frozenset({1, 2}), sss_epoch + 1)
            )

        with pytest.raises(errors.ControllerBrokerMetadataNotExistError):
            await client.get_replica_info("no-such-broker")
        with pytest.raises(errors.ControllerBrokerNeedToBeRegisteredError):
            await client.register_broker(CLUSTER, BROKER, 9, "127.0.0.1:1")

        # A heartbeat without brokerId: 2005 (sent as a request, to read the answer).
        bad = RemotingCommand.request(
            RequestCode.BROKER_HEARTBEAT,
            {"clusterName": CLUSTER, "brokerName": BROKER, "brokerAddr": "127.0.0.1:1"},
        )
        remoting_client = await client._client(addr)
        response = await remoting_client.invoke(bad, 3000)
        assert response.code == errors.ControllerInvalidRequestError.code_expected
    finally:
        await client.close()
