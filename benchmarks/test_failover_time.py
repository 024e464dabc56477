"""Failover time after kill -9 of the master: a pyrmq group under pyrmq's embedded controller
against three Java brokers (Apache RocketMQ NEWEST, 5.5.0) under the Java controller, in one run.

Both groups: three brokers of `broker-a`, enableControllerMode, allAckInSyncStateSet=true and the
same broker settings (`BROKER_CONF` of tests/interop/controller_group.py: heartbeat every
300 ms, controller heartbeat timeout 3 s); each controller scans every second. A trial: wait
until the controller's SyncStateSet holds all three and the master answers a send, SIGKILL the
master, then try one send (1 s timeout) on each surviving broker every 20 ms; the failover time
is from the SIGKILL to the first SUCCESS. The killed broker then restarts on its store and port
and the next trial waits until it is back in the SyncStateSet. PYRMQ_FAILOVER_TRIALS trials
each (default 3; the issue's figure is 10). Printed: min/median/max of each and the ratio
pyrmq/Java of the medians (goal <= 1.0), never asserted: single-digit samples on a shared
2-core machine are noisy.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.conftest import record
from broker.quickstart import replicas_info
from pyrmq_client import BrokerClient, Message
from pyrmq_client.errors import BrokerClientError
from remoting.codes import ResponseCode
from remoting.errors import RemotingError
from tests.interop.build import NEWEST
from tests.interop.controller_group import BROKER_CONF, TOPIC, start_java_controller
from tests.interop.harness import JavaEnv
from tests.interop.pyrmq_env import PyrmqEnv

TRIALS = int(os.environ.get("PYRMQ_FAILOVER_TRIALS", "3"))
SETTLE_TIMEOUT_S = 120.0
PROBE_INTERVAL_S = 0.02
PROBE_TIMEOUT_MS = 1000


@dataclass
class Member:
    """One broker of a group, whichever implementation: kill it, start it again."""

    addr: str
    alive: Callable[[], bool]
    kill: Callable[[], None]
    restart: Callable[[], Member]


async def send_ok(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    try:
        async with await BrokerClient.connect(host, int(port)) as client:
            result = await client.send(Message(TOPIC, b"failover-probe"), producer_group="fo",
                                       queue_id=0, timeout_ms=PROBE_TIMEOUT_MS)
    except (BrokerClientError, RemotingError, OSError):
        return False
    return result.code == ResponseCode.SUCCESS


async def settled(controller: str, members: list[Member]) -> Member:
    """Wait until the controller's SyncStateSet holds all three and its master answers a send;
    the master."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        info = await replicas_info(controller)
        if info is not None and len(info.in_sync_replicas) == len(members):
            master = next((m for m in members if m.addr == info.master_address), None)
            if master is not None and await send_ok(master.addr):
                return master
        if time.monotonic() > deadline:
            raise AssertionError(f"the group did not settle: {info}")
        await asyncio.sleep(0.1)


async def trials(controller: str, members: list[Member]) -> list[float]:
    times: list[float] = []
    for _ in range(TRIALS):
        master = await settled(controller, members)
        others = [m for m in members if m is not master]
        killed_at = time.monotonic()
        master.kill()
        deadline = killed_at + SETTLE_TIMEOUT_S
        while not any([await send_ok(m.addr) for m in others if m.alive()]):
            assert time.monotonic() < deadline, "no new master answered a send"
            await asyncio.sleep(PROBE_INTERVAL_S)
        times.append(time.monotonic() - killed_at)
        restarted = await asyncio.to_thread(master.restart)
        members[members.index(master)] = restarted
    await settled(controller, members)
    return times


def pyrmq_group(env: PyrmqEnv, base: Path) -> tuple[str, list[Member]]:
    controller = env.start_namesrv(name="controller", store_dir=base / "controller-store",
                                   extra_conf={"scanNotActiveBrokerInterval": 1000,
                                               "scanInactiveMasterInterval": 1000})
    conf = {**BROKER_CONF, "controllerAddr": controller.addr}

    def start(name: str, store_dir: Path | None = None, port: int | None = None) -> Member:
        process = env.start_broker(controller, name=name, store_dir=store_dir, listen_port=port,
                                   timeout_s=SETTLE_TIMEOUT_S, extra_conf=conf)
        return Member(process.addr, process.alive, process.kill,
                      lambda: start(name, process.store_dir, process.port))

    return controller.addr, [start(f"b{i}") for i in (1, 2, 3)]


def java_group(env: JavaEnv, base: Path) -> tuple[str, list[Member]]:
    controller = start_java_controller(env, base / "controller")
    namesrv = env.start_java_namesrv()
    conf = {**BROKER_CONF, "controllerAddr": controller}

    def start(name: str, store_dir: Path | None = None, port: int | None = None) -> Member:
        server = env.start_java_broker(namesrv, listen_port=port, store_dir=store_dir,
                                       extra_conf=conf, name=name, timeout_s=SETTLE_TIMEOUT_S)
        port_now = int(server.addr.rsplit(":", 1)[1])
        return Member(server.addr, server.process.alive, server.process.kill,
                      lambda: start(name, server.store_dir, port_now))

    return controller, [start(f"b{i}") for i in (1, 2, 3)]


def describe(times: list[float]) -> str:
    return (f"min {min(times):.3f} s, median {statistics.median(times):.3f} s, "
            f"max {max(times):.3f} s over {len(times)} trials")


def test_failover_time_after_kill_9_of_the_master(tmp_path: Path) -> None:
    with PyrmqEnv(tmp_path / "pyrmq") as env:
        controller, members = pyrmq_group(env, tmp_path / "pyrmq")
        ours = asyncio.run(trials(controller, members))
    with JavaEnv.of_version(NEWEST, tmp_path / "java") as java:
        controller, members = java_group(java, tmp_path / "java")
        theirs = asyncio.run(trials(controller, members))
    ratio = statistics.median(ours) / statistics.median(theirs)
    record("failover after kill -9 of the master (fault to the first SUCCESS on the new master), "
           "3 brokers, allAckInSyncStateSet:")
    record(f"    pyrmq group, embedded controller: {describe(ours)}")
    record(f"    RocketMQ {NEWEST} group, Java controller: {describe(theirs)}")
    record(f"    ratio pyrmq/Java of the medians: {ratio:.2f} (goal <= 1.0; noisy host)")
