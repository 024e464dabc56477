"""Real Apache RocketMQ brokers (each release) in controller mode under pyrmq's embedded
controller, whose one address is both their `namesrvAddr` and their `controllerAddr`.

Two Java brokers of one set register (ids 1 and 2 through the persistent id protocol), the
first is elected master, the second becomes its slave and joins the SyncStateSet (the Java
master's ALTER_SYNC_STATE_SET). Their epoch caches are read with pyrmq-admin and the real
mqadmin (getBrokerEpoch). Then the master is killed with SIGKILL: the controller elects the
slave as soon as the master's connection closes and pushes the role change; the new master
registers at the name server as brokerId 0. The failover time printed (kill to the new
master in GET_REPLICA_INFO) is a noisy single sample on a shared machine, never asserted.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller_client.client import ControllerClient, ReplicaInfo
from remoting.bodies import ClusterInfo
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.controller.test_controller_server import addr_of, running
from tests.interop.harness import JavaEnv, JavaServer

pytestmark = pytest.mark.interop

ROOT = Path(__file__).resolve().parents[2]
BROKER = "broker-a"
DEADLINE_S = 90.0


def controller_mode_conf(controller: str) -> dict[str, str | int | bool]:
    return {
        "enableControllerMode": True,
        "controllerAddr": controller,
        "brokerIP2": "127.0.0.1",
        "allAckInSyncStateSet": True,
    }


async def poll(
    client: ControllerClient, done: object, *, what: str, timeout_s: float = DEADLINE_S
) -> ReplicaInfo:
    assert callable(done)
    deadline = time.monotonic() + timeout_s
    while True:
        info = await client.get_replica_info(BROKER)
        if done(info):
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: last {info}")
        await asyncio.sleep(0.05)


async def registered_ids(namesrv: tuple[str, int]) -> dict[int, str]:
    async with await RemotingClient.connect(*namesrv) as client:
        answer = await client.invoke(
            RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3000
        )
    assert answer.code == ResponseCode.SUCCESS
    broker = ClusterInfo.decode(answer.body).broker_addr_table.get(BROKER)
    return {} if broker is None else dict(broker.broker_addrs)


async def test_java_brokers_fail_over_under_the_embedded_controller(
    java_env: JavaEnv, tmp_path: Path
) -> None:
    async with running(tmp_path) as server:
        addr = addr_of(server.address)
        conf = controller_mode_conf(addr)
        first: JavaServer = await asyncio.to_thread(
            java_env.start_java_broker, addr, extra_conf=conf, name="b1"
        )
        second: JavaServer = await asyncio.to_thread(
            java_env.start_java_broker, addr, extra_conf=conf, name="b2"
        )
        client = ControllerClient((addr,))
        try:
            info = await poll(
                client,
                lambda i: i.sync_state_set.sync_state_set == {1, 2},
                what="the slave in the SyncStateSet",
            )
            assert info.header.master_broker_id == 1
            assert info.header.master_address == first.addr
            master_epoch = info.header.master_epoch
            assert master_epoch is not None

            ours = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "controller.admin", "getBrokerEpoch", "-n", addr,
                 "-b", BROKER],
                cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert ours.returncode == 0, ours.stderr
            assert f"#brokerAddr\t{first.addr}" in ours.stdout.splitlines()
            assert f"#Epoch: EpochEntry{{epoch={master_epoch}, startOffset=0," in ours.stdout
            theirs = await asyncio.to_thread(
                java_env.mqadmin, addr, "getBrokerEpoch", "-b", BROKER
            )
            assert first.addr in theirs.stdout, theirs.stdout
            assert second.addr in theirs.stdout

            killed_at = time.monotonic()
            first.process.kill()
            info = await poll(
                client, lambda i: i.header.master_broker_id == 2, what="the slave elected"
            )
            failover_s = time.monotonic() - killed_at
            assert info.header.master_epoch == master_epoch + 1
            assert info.header.master_address == second.addr
            assert info.sync_state_set.sync_state_set == {2}
            deadline = time.monotonic() + DEADLINE_S
            while (await registered_ids(server.address)).get(0) != second.addr:
                assert time.monotonic() < deadline, "the new master never registered as id 0"
                await asyncio.sleep(0.1)
            print(f"\nfailover kill -9 -> new master at the controller: {failover_s:.3f} s")
        finally:
            await client.close()
            for broker in (first, second):
                broker.process.kill()
