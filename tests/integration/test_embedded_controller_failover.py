"""Three pyrmq brokers in controller mode under pyrmq's EMBEDDED controller: no Java at all.

The failover scenarios of tests/interop/test_controller_mode.py (same broker settings, load,
checks: tests/interop/controller_group.py) with `pyrmq-controller` (one address is the name
server and the controller) in place of the Java ControllerStartup, seeded (`PYRMQ_SEED` replays
one), each printing acked / lost / failover seconds:
- kill -9 of the master under an allAck (sync-ack) load: no acknowledged message is lost, the
  controller elects a new master from the SyncStateSet, the old master restarted on its store
  rejoins as a slave and cuts only its unconfirmed tail (all commitlogs end byte-identical),
  `pyrmq-admin getSyncStateSet` shows the new master and all three in the set, and no queue
  offset is handed out twice;
- SIGSTOP of the master under that load past the heartbeat timeout: another member is elected;
  the paused master, resumed, answers the sends queued meanwhile with a definite error (its
  lease ran out, M17), never SUCCESS, then rejoins as a slave; nothing acked is lost;
- kill -9 of the master and an immediate restart on its store: a consumer pulling from every
  broker never sees a queue offset go back or served with two bodies (RocketMQ #6344, #7689);
- kill -9 of everything, the controller included, under load, then a restart on the same stores
  and ports: the controller replays its event log (same broker ids, masterEpoch goes on from
  where it was), a master serves again with all three in its SyncStateSet, nothing acked lost;
- a topic created mid-run reaches the slaves (slave metadata sync) and is served by the next
  master.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from pathlib import Path

import pytest

from pyrmq_client import BrokerClient, Message
from remoting.codes import ResponseCode
from tests.interop.controller_group import (
    START_TIMEOUT_S,
    Group,
    Load,
    check_no_loss,
    commitlog,
    controller_id,
    env,
    first_success,
    kill_the_master_under_sync_ack_load,
    master_sync_state_set,
    pause_the_master_past_the_heartbeat_timeout,
    pyrmq_admin,
    restart_the_master_at_once,
    role_of,
    seed,
    start_embedded_controller,
    start_group,
)
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess, wait_until

__all__ = ["env", "seed"]  # fixtures

pytestmark = pytest.mark.timeout(300)


def start_embedded_group(env: PyrmqEnv, controller_store: Path) -> Group:
    """pyrmq-controller (name server and controller on one address) and brokers b1..b3."""
    return start_group(env, None, start_embedded_controller(env, controller_store))


async def test_kill_the_master_under_sync_ack_load(
    env: PyrmqEnv, tmp_path: Path, seed: int,
) -> None:
    group = start_embedded_group(env, tmp_path / "controller-store")
    await kill_the_master_under_sync_ack_load(
        group, env, random.Random(seed),
        lambda: pyrmq_admin("getSyncStateSet", "-a", group.controller, "-b", "broker-a"),
        controller="embedded controller")


async def test_a_paused_master_acknowledges_nothing_after_its_lease(
    env: PyrmqEnv, tmp_path: Path, seed: int,
) -> None:
    group = start_embedded_group(env, tmp_path / "controller-store")
    await pause_the_master_past_the_heartbeat_timeout(group, random.Random(seed),
                                                      controller="embedded controller")


async def test_restart_the_master_at_once(env: PyrmqEnv, tmp_path: Path, seed: int) -> None:
    group = start_embedded_group(env, tmp_path / "controller-store")
    await restart_the_master_at_once(group, env, random.Random(seed),
                                     controller="embedded controller")


async def test_kill_everything_including_the_controller_and_restart(
    env: PyrmqEnv, tmp_path: Path, seed: int,
) -> None:
    rng = random.Random(seed)
    controller_store = tmp_path / "controller-store"
    group = start_embedded_group(env, controller_store)
    master = group.master()
    ids = {p.name: controller_id(p) for p in group.brokers}
    epoch_before = (role_of(master) or ("", 0))[1]
    load = Load(rng, milestone=rng.randint(300, 1500))
    stop = asyncio.Event()
    victims = [group.namesrv, *group.brokers]
    rng.shuffle(victims)

    async def killer() -> None:
        await load.reached.wait()
        for process in victims:  # SIGKILL, in a seeded order, with sends in flight
            process.kill()
        stop.set()

    await asyncio.gather(load.run(master.addr, tag="before", until=stop), killer())
    acked_before = len(load.acked)

    started = time.monotonic()
    namesrv = start_embedded_controller(env, controller_store, name="controller-again",
                                        listen_port=group.namesrv.port)
    old = group.brokers
    group = Group(namesrv.addr, namesrv, [])
    # All at once: the replayed SyncStateSet may hold one broker only (the controller, if it
    # outlived some brokers, elected a new master with a set of itself), and the others wait
    # for it (no unclean election), unregistered with the name server until they have a role.
    group.brokers = list(await asyncio.gather(*(asyncio.to_thread(
        group.start_broker, env, f"{process.name}-again", store_dir=process.store_dir,
        listen_port=process.port) for process in old)))
    assert {p.name.removesuffix("-again"): controller_id(p) for p in group.brokers} == ids
    new = group.wait_for_master()
    role = role_of(new)
    assert role is not None
    assert role[1] >= epoch_before  # the replayed log goes on; no epoch went back
    wait_until(lambda: master_sync_state_set(new) == {1, 2, 3}, timeout_s=START_TIMEOUT_S,
               what="all three back in the SyncStateSet", process=new)
    recovered_s = time.monotonic() - started
    await load.run(new.addr, tag="after", until=asyncio.Event(), count=300)
    shown = pyrmq_admin("getSyncStateSet", "-a", group.controller, "-b", "broker-a")
    assert re.search(rf"#MasterAddr\s+{re.escape(new.addr)}\b", shown), shown
    epoch_shown = re.search(r"#MasterEpoch\s+(\d+)", shown)
    assert epoch_shown is not None, shown
    assert int(epoch_shown.group(1)) == role[1], shown

    lost = check_no_loss(group, load, survivors=group.brokers)
    print(f"embedded controller, everything killed ({', '.join(p.name for p in victims)}) and "
          f"restarted: acked={len(load.acked)} (before the kill {acked_before}) lost={lost} "
          f"master_epoch {epoch_before} -> {role[1]} serving_again_s={recovered_s:.1f} "
          f"refused={load.refused} unknown={load.unknown}")
    assert lost == 0
    assert len(set(load.offsets)) == len(load.offsets)
    expected = commitlog(new)
    for process in group.brokers:
        assert commitlog(process) == expected, f"{process.name}'s commitlog differs"


async def test_a_topic_created_mid_run_is_served_by_the_next_master(
    env: PyrmqEnv, tmp_path: Path, seed: int,
) -> None:
    """A topic created on the master after the group formed (7 queues, unlike an auto-created
    topic's 4) reaches the slaves by the slave metadata sync (M11); once the master is killed,
    the next master lists it as created, serves sends to its last queue and the messages sent
    before the kill."""
    rng = random.Random(seed)
    group = start_embedded_group(env, tmp_path / "controller-store")
    old = group.master()
    topic = "MidRunTopic"
    bodies = [rng.randbytes(rng.randint(20, 200)) for _ in range(rng.randint(5, 40))]
    host, port = old.addr.rsplit(":", 1)
    async with await BrokerClient.connect(host, int(port)) as client:
        await client.create_topic(topic, read_queue_nums=7, write_queue_nums=7)
        for body in bodies:
            sent = await client.send(Message(topic, body), producer_group="fo", queue_id=6,
                                     timeout_ms=5000)
            assert sent.code == ResponseCode.SUCCESS
    others = [p for p in group.brokers if p is not old]

    def synced(process: PyrmqProcess) -> bool:
        assert process.store_dir is not None
        return f'"{topic}"' in (process.store_dir / "config" / "topics.json").read_text()

    wait_until(lambda: all(synced(p) for p in others), timeout_s=START_TIMEOUT_S,
               what=f"both slaves hold {topic} (slave metadata sync)")
    old.kill()
    new = await first_success(others, Load(rng), deadline_s=30)
    host, port = new.addr.rsplit(":", 1)
    async with await BrokerClient.connect(host, int(port)) as client:
        config = (await client.topic_configs()).topic_config_table[topic]
        assert (config.read_queue_nums, config.write_queue_nums) == (7, 7)
        sent = await client.send(Message(topic, b"after the failover"), producer_group="fo",
                                 queue_id=6, timeout_ms=5000)
        assert sent.code == ResponseCode.SUCCESS
        assert sent.queue_offset == len(bodies)
        # Consume queues are dispatched after the append (as Java's ReputMessageService does,
        # here up to the confirm offset): the last send becomes pullable a moment later.
        # A pull returns at most 32 messages (maxTransferCountOnMessageInMemory, as in Java):
        # read on from each pull's next offset.
        wanted = [*bodies, b"after the failover"]
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(got) < len(wanted) and time.monotonic() < deadline:
            pulled = await client.pull("MidRunConsumer", topic, 6, len(got), max_nums=64)
            got += [m.body for m in pulled.messages]
            if not pulled.messages:
                await asyncio.sleep(0.05)
    assert got == wanted
    print(f"embedded controller, topic created mid-run: {len(bodies)} messages before the kill, "
          f"served by the next master {new.name}")
