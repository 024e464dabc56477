"""AutoSwitchHA with real pyrmq processes on loopback: one master and two slaves, roles given in
`broker.conf` (`pyrmqHaRole`) until the controller work lands.

A client sends through the master with allAckInSyncStateSet=true (pyrmq's default): every
SUCCESS means both slaves acknowledged. A slave killed with SIGKILL is shrunk out, writes go on,
and once restarted on its store it catches up and rejoins. At the end every commitlog file is
byte-identical on the three brokers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.client import BrokerClient, Message, Producer
from remoting.codes import ResponseCode
from tests.interop.network import free_broker_port
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess, wait_until

TOPIC = "HaTopic"
HA_CONF = {
    "enableControllerMode": True,
    "haSendHeartbeatInterval": 500,
    "haHousekeepingInterval": 3000,
    "checkSyncStateSetPeriod": 500,
    "haMaxTimeSlaveNotCatchup": 3000,
    "slaveTimeout": 3000,
}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[PyrmqEnv]:
    with PyrmqEnv(tmp_path) as made:
        yield made


def sync_state_set_of(process: PyrmqProcess) -> set[int] | None:
    """The master's last applied SyncStateSet, from its log."""
    found = re.findall(r"sync_state_set applied old=\[[\d, ]*\] new=\[([\d, ]*)\]", process.log())
    if not found:
        return None
    return {int(x) for x in found[-1].split(",") if x.strip()}


def commitlog(process: PyrmqProcess) -> dict[str, bytes]:
    assert process.store_dir is not None
    directory = process.store_dir / "commitlog"
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


async def send_all(address: str, count: int, *, tag: str, concurrency: int = 8) -> list[int]:
    """Send `count` messages through the master, `concurrency` at a time; their codes."""
    host, port = address.rsplit(":", 1)
    codes: list[int] = []
    async with await BrokerClient.connect(host, int(port)) as client:
        producer = Producer(client, "HaProducer")
        next_index = iter(range(count))

        async def worker() -> None:
            for index in next_index:
                result = await producer.send(
                    Message(TOPIC, f"{tag}-{index}".encode() * 20), queue_id=index % 4)
                codes.append(result.code)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return codes


def start(env: PyrmqEnv, broker_id: int, role: str, *, master_ha: str = "",
          store_dir: Path | None = None, listen_port: int | None = None) -> PyrmqProcess:
    port = listen_port or free_broker_port()
    conf: dict[str, str | int | bool] = {
        **HA_CONF, "brokerId": broker_id, "pyrmqHaRole": role, "haListenPort": port + 1,
    }
    if role == "master":
        conf |= {"pyrmqHaSyncStateSet": str(broker_id), "pyrmqHaReplicaIds": "1,2,3"}
    else:
        conf |= {"pyrmqHaMasterAddress": master_ha}
    return env.start_broker(None, listen_port=port, store_dir=store_dir, extra_conf=conf,
                            name=f"b{broker_id}")


async def test_master_and_two_slave_processes_replicate_and_survive_a_slave_kill(
    env: PyrmqEnv,
) -> None:
    master = start(env, 1, "master")
    master_ha = f"127.0.0.1:{master.port + 1}"
    slaves = {i: start(env, i, "slave", master_ha=master_ha) for i in (2, 3)}
    wait_until(lambda: sync_state_set_of(master) == {1, 2, 3}, timeout_s=30,
               what="both slaves in the master's SyncStateSet", process=master)
    codes = await send_all(master.addr, 2000, tag="first")
    assert codes == [ResponseCode.SUCCESS] * 2000  # each one acked by both slaves

    killed = slaves[3]
    killed.kill()
    wait_until(lambda: sync_state_set_of(master) == {1, 2}, timeout_s=30,
               what="slave 3 shrunk out after its connection closed", process=master)
    codes = await send_all(master.addr, 1000, tag="while-3-down")
    assert codes == [ResponseCode.SUCCESS] * 1000

    restarted = start(env, 3, "slave", master_ha=master_ha, store_dir=killed.store_dir)
    wait_until(lambda: sync_state_set_of(master) == {1, 2, 3}, timeout_s=30,
               what="restarted slave 3 caught up and rejoined", process=restarted)
    codes = await send_all(master.addr, 500, tag="after")
    assert codes == [ResponseCode.SUCCESS] * 500

    for process in (master, slaves[2], restarted):
        assert process.terminate() == 0, process.diagnostics()
    expected = commitlog(master)
    assert len(expected) >= 2  # the log crossed commitlog files
    assert commitlog(slaves[2]) == expected
    assert commitlog(restarted) == expected
