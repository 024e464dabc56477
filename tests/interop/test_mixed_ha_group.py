"""One controller-mode broker set of two pyrmq brokers and a real Apache RocketMQ broker (each
release): replication and failover across the two implementations, in both directions, under
the real Java `ControllerStartup` of each release (with pyrmq's name server): one group per
release. (The scenario also takes pyrmq's embedded controller, `mixed_group_fails_over_both_ways`.)

Every broker uses `allAckInSyncStateSet=true` and 1 MiB commitlog files (a slave writes the
master's bytes at the master's offsets, file ends included, so the file size must match). The
pyrmq brokers run with `forceVerifyPropCRC=false` (Java's default): with pyrmq's default (true)
a Java master's records, which carry no `__CRC32#` property, are invalid to pyrmq, and a promoted
pyrmq slave refuses to lead (tests/unit/test_foreign_records.py).

The scenario (seeded: the seed is printed, `PYRMQ_SEED` replays one):
1. pyrmq p1 is elected master; pyrmq p2 and the Java broker j3 join as slaves and the
   SyncStateSet {p1, p2, j3}; under sync sends j3's and p2's commitlogs equal p1's byte for byte.
2. pyrmq -> Java: p2 stops (so the Java broker is the only other in-sync member), the set
   shrinks to {p1, j3}; p1 is killed (SIGKILL) under a sync-ack load; j3 is elected and answers
   sends as master.
3. p2 restarts on its store: the Java master's slave, back in the set, its commitlog equal to
   j3's.
4. Java -> pyrmq: j3 is killed under a sync-ack load; p2 is elected and answers as master.
5. j3 restarts on its store: p2's slave, back in the set, its commitlog equal to p2's.
No acknowledged message is lost (all are in p2's store) and no queue offset was handed out
twice. Each run prints acked / lost / both failover times (noisy single samples on a shared
machine, never asserted).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from controller_client.client import ReplicaInfo
from tests.interop.controller_group import (
    BROKER,
    JAVA_START_TIMEOUT_S,
    MIXED_CONF,
    MIXED_PYRMQ_CONF,
    START_TIMEOUT_S,
    Group,
    Load,
    bodies_in,
    commitlog,
    controller_id,
    env,
    first_success,
    role_of,
    seed,
    start_embedded_controller,
    start_java_controller,
    wait_identical,
    wait_replica_info,
)
from tests.interop.harness import JavaEnv, JavaServer
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess, wait_until

__all__ = ["env", "seed"]  # fixtures

pytestmark = pytest.mark.interop


def members(*brokers: PyrmqProcess | JavaServer) -> Callable[[ReplicaInfo], bool]:
    """A `wait_replica_info` condition: the SyncStateSet is exactly these brokers' ids."""
    ids = {controller_id(b) for b in brokers}
    return lambda info: info.sync_state_set.sync_state_set == ids


async def test_mixed_group_fails_over_both_ways(
    java_env: JavaEnv, env: PyrmqEnv, tmp_path: Path, seed: int,
) -> None:
    await mixed_group_fails_over_both_ways(java_env, env, tmp_path, seed, "java-controller")


async def mixed_group_fails_over_both_ways(
    java_env: JavaEnv, env: PyrmqEnv, tmp_path: Path, seed: int, controller_kind: str,
) -> None:
    """The module's scenario under "java-controller" (the release's ControllerStartup, pyrmq's
    name server) or "embedded-controller" (pyrmq's, also the name server). CI runs the Java
    controller for each release: one group a release (CI time). Under the embedded controller
    the scenario passed once with a 5.3.3 broker on 2026-11-25 (README); Java brokers of both
    releases run under it in CI in test_java_brokers_pyrmq_controller.py."""
    rng = random.Random(seed)
    started = time.monotonic()
    if controller_kind == "java-controller":
        controller = start_java_controller(java_env, tmp_path / "controller")
        namesrv = env.start_namesrv()
    else:
        namesrv = start_embedded_controller(env, tmp_path / "controller-store")
        controller = namesrv.addr
    group = Group(controller, namesrv, [])
    label = f"{controller_kind} (RocketMQ {java_env.version})"

    def start_java(name: str, *, again: JavaServer | None = None) -> JavaServer:
        return java_env.start_java_broker(
            namesrv.addr, name=name, timeout_s=JAVA_START_TIMEOUT_S,
            listen_port=None if again is None else int(again.addr.rsplit(":", 1)[1]),
            store_dir=None if again is None else again.store_dir,
            extra_conf={**MIXED_CONF, "controllerAddr": controller})

    # 1. p1 master, p2 and j3 its slaves.
    p1 = group.start_broker(env, "p1", conf=MIXED_PYRMQ_CONF)
    await wait_replica_info(controller, lambda i: i.header.master_address == p1.addr,
                            what="p1 elected master")
    p2 = group.start_broker(env, "p2", conf=MIXED_PYRMQ_CONF)
    j3 = start_java("j3")
    group.brokers = [p1, p2]
    await wait_replica_info(controller, members(p1, p2, j3), what="p2 and j3 in the set")
    load = Load(rng)
    await load.run(p1.addr, tag="start", until=asyncio.Event(), count=rng.randint(50, 200))
    replicated = await wait_identical(lambda: commitlog(p1), lambda: commitlog(j3),
                                      what="pyrmq master -> Java slave")
    await wait_identical(lambda: commitlog(p1), lambda: commitlog(p2),
                         what="pyrmq master -> pyrmq slave")

    # 2. pyrmq -> Java: with p2 stopped, j3 is the only other member the controller can elect.
    assert p2.terminate() == 0, p2.diagnostics()
    await wait_replica_info(controller, members(p1, j3), what="the set shrunk to {p1, j3}")
    killed_at = await load.until_killed(p1.addr, p1.kill, after=rng.randint(100, 400))
    await first_success([j3], load, deadline_s=30)
    to_java_s = time.monotonic() - killed_at
    await wait_replica_info(controller, lambda i: i.header.master_address == j3.addr,
                            what="j3 master at the controller")
    await load.run(j3.addr, tag="java-master", until=asyncio.Event(), count=100)

    # 3. p2 back, as the Java master's slave.
    p2 = group.start_broker(env, "p2-again", conf=MIXED_PYRMQ_CONF, store_dir=p2.store_dir,
                            listen_port=p2.port)
    group.brokers = [p2]
    wait_until(lambda: (role_of(p2) or ("", 0))[0] == "slave", timeout_s=START_TIMEOUT_S,
               what="p2 the Java master's slave", process=p2)
    await wait_replica_info(controller, members(j3, p2), what="p2 back in the set")
    await load.run(j3.addr, tag="java-master", until=asyncio.Event(), count=100)
    from_java = await wait_identical(lambda: commitlog(j3), lambda: commitlog(p2),
                                     what="Java master -> pyrmq slave")

    # 4. Java -> pyrmq.
    killed_at = await load.until_killed(j3.addr, j3.process.kill, after=rng.randint(100, 400))
    await first_success([p2], load, deadline_s=30)
    to_pyrmq_s = time.monotonic() - killed_at
    # The broker's log is written by a thread of its own (remoting/log_writer.py): its line may
    # reach the file a little after the first SUCCESS.
    wait_until(lambda: (role_of(p2) or ("", 0))[0] == "master", timeout_s=5,
               what="p2's log saying it became master", process=p2)
    await load.run(p2.addr, tag="pyrmq-master", until=asyncio.Event(), count=100)

    # 5. j3 back, as the pyrmq master's slave.
    j3 = start_java("j3-again", again=j3)
    await wait_replica_info(controller, lambda i: i.header.master_address == p2.addr
                            and members(p2, j3)(i), what="j3 back in the set")
    await load.run(p2.addr, tag="rejoined", until=asyncio.Event(), count=100)
    to_java = await wait_identical(lambda: commitlog(p2), lambda: commitlog(j3),
                                   what="pyrmq master -> restarted Java slave")

    assert p2.terminate() == 0, p2.diagnostics()
    lost = len(set(load.acked) - bodies_in(p2))
    print(f"mixed group of {BROKER} under the {label}: replicated {replicated} bytes to the "
          f"Java slave, {from_java} from the Java master, {to_java} to the restarted Java slave "
          f"(all byte-identical); acked={len(load.acked)} lost={lost} "
          f"failover pyrmq->Java {to_java_s:.2f} s, Java->pyrmq {to_pyrmq_s:.2f} s; "
          f"refused={load.refused} unknown={load.unknown} "
          f"total_s={time.monotonic() - started:.1f}")
    assert lost == 0
    assert len(set(load.offsets)) == len(load.offsets)
