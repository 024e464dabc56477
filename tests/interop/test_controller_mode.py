"""Three pyrmq brokers in controller mode under the REAL Apache RocketMQ controller.

A standalone Java `ControllerStartup` (DLedger, one node) and pyrmq's name server run on
loopback; three pyrmq brokers (`enableControllerMode=true`, allAckInSyncStateSet=true) register
with the controller, get persistent ids 1, 2, 3, one is elected master and the others replicate
from it (their HA address learned from the name server).

Scenarios (seeded: the seed is printed, `PYRMQ_SEED` replays one), each printing
acked / lost / failover seconds:
- kill -9 of the master under a sync-ack load: no acknowledged message is lost, the controller
  elects a new master from the SyncStateSet, the old master restarted on its store rejoins as a
  slave and cuts only its unconfirmed tail (all three commitlogs end byte-identical), and the
  real `mqadmin getSyncStateSet` shows the new master and all three in the set; no queue
  offset is handed out twice (no rollback, RocketMQ #6344/#7689);
- SIGSTOP of the master past the controller's heartbeat timeout: another member is elected; the
  paused master, resumed, answers nothing SUCCESS (its lease ran out, docs/reliability.md M17), then
  is demoted and rejoins; no acknowledged message is lost;
- a master that lost committed data in a power loss does not lead again (M9).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from broker.config import load_broker_config
from broker.replicas_manager import LOST_COMMITTED_FILE_NAME
from controller_client.client import ControllerClient
from controller_client.errors import ControllerError
from pyrmq_client import BrokerClient, Message
from pyrmq_client.errors import BrokerClientError
from remoting.codes import ResponseCode
from remoting.errors import RemotingError
from store.checkpoint import CHECKPOINT_FILE_NAME, load_checkpoint
from store.message_store import MessageStore
from tests.interop.build import NEWEST
from tests.interop.harness import JavaEnv, JavaProcess, _write_properties
from tests.interop.network import free_port, port_accepts
from tests.interop.pyrmq_env import COMMITLOG_FILE_BYTES, PyrmqEnv, PyrmqProcess, wait_until
from tests.support.store_helpers import read_all

pytestmark = pytest.mark.interop

CONTROLLER_MAIN = "org.apache.rocketmq.controller.ControllerStartup"
START_TIMEOUT_S = 60.0
TOPIC = "FailoverTopic"
HEARTBEAT_TIMEOUT_MS = 3_000
BROKER_CONF: dict[str, str | int | bool] = {
    "enableControllerMode": True,
    "brokerIP2": "127.0.0.1",
    "allAckInSyncStateSet": True,
    "brokerHeartbeatInterval": 300,
    "controllerHeartBeatTimeoutMills": HEARTBEAT_TIMEOUT_MS,
    "syncBrokerMetadataPeriod": 1000,
    "syncControllerMetadataPeriod": 3000,
    "haSendHeartbeatInterval": 500,
    "haHousekeepingInterval": 3000,
    "checkSyncStateSetPeriod": 500,
    "haMaxTimeSlaveNotCatchup": 3000,
    "slaveTimeout": 3000,
}


def start_controllers(java: JavaEnv, work_dir: Path, count: int = 1
                      ) -> dict[str, JavaProcess]:
    """`count` ControllerStartup nodes of one DLedger group on 127.0.0.1, scanning every second
    (default 5 s); their remoting addresses (DLedger serves remoting on its peer port)."""
    ports = [free_port() for _ in range(count)]
    peers = ";".join(f"n{i}-127.0.0.1:{port}" for i, port in enumerate(ports))
    started: dict[str, JavaProcess] = {}
    for i, port in enumerate(ports):
        node_dir = work_dir / f"n{i}"
        node_dir.mkdir(parents=True, exist_ok=True)
        conf = _write_properties(node_dir / "controller.conf", {
            "controllerType": "DLedger",
            "controllerDLegerGroup": "pyrmq",
            "controllerDLegerPeers": peers,
            "controllerDLegerSelfId": f"n{i}",
            "controllerStorePath": str(node_dir / "store"),
            "scanNotActiveBrokerInterval": 1000,
            "scanInactiveMasterInterval": 1000,
        })
        started[f"127.0.0.1:{port}"] = java.start_java(
            CONTROLLER_MAIN, ["-c", str(conf)], name=f"controller-n{i}",
            jvm_args=("--add-opens", "java.base/java.lang=ALL-UNNAMED"))
    deadline = time.monotonic() + START_TIMEOUT_S
    for addr, process in started.items():
        while not port_accepts(addr):
            if not process.alive() or time.monotonic() > deadline:
                raise AssertionError(
                    f"controller did not listen on {addr}\n{process.diagnostics()}")
            time.sleep(0.2)
    return started


def start_controller(java: JavaEnv, work_dir: Path) -> str:
    """One controller node; its remoting address."""
    return next(iter(start_controllers(java, work_dir)))


_ROLE = re.compile(r"became (master|slave) master_epoch=(\d+)")


def role_of(process: PyrmqProcess) -> tuple[str, int] | None:
    """The last HA role this process took (from its log): ("master" | "slave", epoch)."""
    found = _ROLE.findall(process.log())
    return None if not found else (found[-1][0], int(found[-1][1]))


def sync_state_set_of(process: PyrmqProcess) -> set[int] | None:
    found = re.findall(r"sync_state_set applied old=\[[\d, ]*\] new=\[([\d, ]*)\]", process.log())
    return None if not found else {int(x) for x in found[-1].split(",") if x.strip()}


def controller_id(process: PyrmqProcess) -> int:
    assert process.store_dir is not None
    return int((process.store_dir / "brokerIdentity").read_text().rsplit("#", 1)[1])


def commitlog(process: PyrmqProcess) -> bytes:
    assert process.store_dir is not None
    directory = process.store_dir / "commitlog"
    return b"".join(path.read_bytes() for path in sorted(directory.iterdir()))


def bodies_in(process: PyrmqProcess) -> set[bytes]:
    store = MessageStore(replace(load_broker_config(process.config_path).config.to_store_config(),
                                 read_uncommitted=True))
    store.open()
    try:
        return {record.body for record in read_all(store, TOPIC, 0)}
    finally:
        store.close()


@dataclass
class Load:
    """A sync-ack load: `acked` holds every body answered SUCCESS."""

    rng: random.Random
    acked: list[bytes] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # queue offsets of the acked sends
    refused: int = 0
    unknown: int = 0
    next_index: int = 0
    milestone: int | None = None  # `reached` is set once this many are acked
    reached: asyncio.Event = field(default_factory=asyncio.Event)

    def body(self, tag: str) -> bytes:
        self.next_index += 1
        return f"{tag}-{self.next_index}-".encode() + self.rng.randbytes(self.rng.randint(50, 400))

    async def run(self, address: str, *, tag: str, until: asyncio.Event, count: int | None = None,
                  concurrency: int = 8) -> None:
        """Send to `address` until `until` is set (or `count` acked), `concurrency` at once."""
        host, port = address.rsplit(":", 1)
        goal = None if count is None else len(self.acked) + count
        async with await BrokerClient.connect(host, int(port)) as client:

            async def worker() -> None:
                while not until.is_set() and (goal is None or len(self.acked) < goal):
                    body = self.body(tag)
                    try:
                        result = await client.send(Message(TOPIC, body), producer_group="fo",
                                                   queue_id=0, timeout_ms=5000)
                    except BrokerClientError:
                        self.refused += 1  # a definite refusal: not stored
                        continue
                    except (RemotingError, OSError):
                        self.unknown += 1
                        return
                    if result.code == ResponseCode.SUCCESS:
                        self.acked.append(body)
                        self.offsets.append(result.queue_offset)
                        if self.milestone is not None and len(self.acked) >= self.milestone:
                            self.reached.set()
                    else:
                        self.refused += 1

            await asyncio.gather(*(worker() for _ in range(concurrency)))


async def first_success(processes: list[PyrmqProcess], load: Load, deadline_s: float
                        ) -> PyrmqProcess:
    """Try one send on each live broker every 50 ms until one answers SUCCESS."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for process in processes:
            if not process.alive():
                continue
            host, port = process.addr.rsplit(":", 1)
            body = load.body("probe")
            try:
                async with await BrokerClient.connect(host, int(port)) as client:
                    result = await client.send(Message(TOPIC, body), producer_group="fo",
                                               queue_id=0, timeout_ms=3000)
            except (BrokerClientError, RemotingError, OSError):
                continue
            if result.code == ResponseCode.SUCCESS:
                load.acked.append(body)
                load.offsets.append(result.queue_offset)
                return process
        await asyncio.sleep(0.05)
    raise AssertionError("no broker answered a send SUCCESS in time\n" +
                         "\n".join(p.diagnostics() for p in processes))


@pytest.fixture
def newest_java_env(tmp_path: Path) -> Iterator[JavaEnv]:
    """The newest release only, for the slowest scenario (CI time)."""
    with JavaEnv.of_version(NEWEST, tmp_path / "java") as java:
        yield java


@pytest.fixture
def env(tmp_path: Path) -> Iterator[PyrmqEnv]:
    with PyrmqEnv(tmp_path / "pyrmq") as made:
        yield made


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("PYRMQ_SEED", random.randrange(2**32)))
    print(f"seed={value} (PYRMQ_SEED={value} replays it)")
    return value


@dataclass
class Group:
    controller: str
    namesrv: PyrmqProcess
    brokers: list[PyrmqProcess]

    def start_broker(self, env: PyrmqEnv, name: str, *, store_dir: Path | None = None,
                     listen_port: int | None = None) -> PyrmqProcess:
        return env.start_broker(self.namesrv, name=name, store_dir=store_dir,
                                listen_port=listen_port, timeout_s=START_TIMEOUT_S,
                                extra_conf={**BROKER_CONF, "controllerAddr": self.controller,
                                            # a free port of its own (listenPort + 1 may be
                                            # some client's ephemeral port by a restart)
                                            "haListenPort": free_port()})

    def master(self) -> PyrmqProcess:
        masters = [p for p in self.brokers if p.alive() and (role_of(p) or ("", 0))[0] == "master"]
        assert len(masters) == 1, [role_of(p) for p in self.brokers]
        return masters[0]


def start_group(java_env: JavaEnv, env: PyrmqEnv, tmp_path: Path,
                controller: str | None = None) -> Group:
    controller = controller or start_controller(java_env, tmp_path / "controller")
    group = Group(controller, env.start_namesrv(), [])
    for name in ("b1", "b2", "b3"):
        group.brokers.append(group.start_broker(env, name))
    master = group.master()
    assert sorted(controller_id(p) for p in group.brokers) == [1, 2, 3]
    wait_until(lambda: sync_state_set_of(master) == {1, 2, 3}, timeout_s=START_TIMEOUT_S,
               what="both slaves in the master's SyncStateSet", process=master)
    return group


def check_no_loss(group: Group, load: Load, *, survivors: list[PyrmqProcess]) -> int:
    """Stop everything; every acked body must be in every broker's store. Returns lost."""
    for process in group.brokers:
        if process.alive():
            assert process.terminate() == 0, process.diagnostics()
    acked = set(load.acked)
    lost = 0
    for process in survivors:
        stored = bodies_in(process)
        lost = max(lost, len(acked - stored))
    return lost


async def kill_the_master_under_sync_ack_load(
    group: Group, env: PyrmqEnv, rng: random.Random, get_sync_state_set: Callable[[], str],
    *, controller: str,
) -> None:
    """The kill -9 scenario on a started group (module docstring); `get_sync_state_set()` is
    what an admin tool (mqadmin, pyrmq-admin) prints for `getSyncStateSet -b broker-a`: it must
    show the new master and all three in the set."""
    old = group.master()
    old_id, old_port = controller_id(old), old.port
    load = Load(rng, milestone=rng.randint(300, 1500))
    stop = asyncio.Event()

    async def killer() -> None:
        await load.reached.wait()
        old.kill()  # SIGKILL with sends in flight
        stop.set()

    started = time.monotonic()
    await asyncio.gather(load.run(old.addr, tag="before", until=stop), killer())
    killed_at = time.monotonic()
    acked_before = len(load.acked)
    others = [p for p in group.brokers if p is not old]
    new = await first_success(others, load, deadline_s=30)
    failover_s = time.monotonic() - killed_at
    role = role_of(new)
    assert role is not None
    assert role[0] == "master"
    assert role[1] >= 2
    await load.run(new.addr, tag="after", until=asyncio.Event(), count=300)

    # The old master comes back on its store and address: a slave that cuts its unconfirmed tail.
    back = group.start_broker(env, "b-old", store_dir=old.store_dir, listen_port=old_port)
    group.brokers.append(back)
    assert controller_id(back) == old_id
    wait_until(lambda: (role_of(back) or ("", 0))[0] == "slave", timeout_s=START_TIMEOUT_S,
               what="the old master rejoined as a slave", process=back)
    wait_until(lambda: sync_state_set_of(new) == {1, 2, 3}, timeout_s=START_TIMEOUT_S,
               what="the old master caught up and rejoined the SyncStateSet", process=back)
    await load.run(new.addr, tag="rejoined", until=asyncio.Event(), count=200)
    # The admin tool shows the set the controller holds: the new master and both others.
    shown = get_sync_state_set()
    assert re.search(rf"#MasterBrokerId\s+{controller_id(new)}\b", shown), shown
    assert re.search(rf"#MasterAddr\s+{re.escape(new.addr)}\b", shown), shown
    assert sorted(int(i) for i in re.findall(r"InSyncReplica:.*brokerId=(\d+),.*alive=true",
                                              shown)) == [1, 2, 3], shown

    survivors = [p for p in group.brokers if p is not old]
    lost = check_no_loss(group, load, survivors=survivors)
    print(f"{controller}, kill -9 of the master: acked={len(load.acked)} (before the kill "
          f"{acked_before}) lost={lost} failover_s={failover_s:.2f} refused={load.refused} "
          f"unknown={load.unknown} total_s={time.monotonic() - started:.1f}")
    assert lost == 0
    # No queue offset was handed out twice across the failover (RocketMQ #6344, #7689).
    assert len(set(load.offsets)) == len(load.offsets)
    expected = commitlog(new)
    for process in survivors:
        assert commitlog(process) == expected, f"{process.name}'s commitlog differs"


async def test_kill_the_master_under_sync_ack_load(
    java_env: JavaEnv, env: PyrmqEnv, tmp_path: Path, seed: int,
) -> None:
    group = start_group(java_env, env, tmp_path)
    await kill_the_master_under_sync_ack_load(
        group, env, random.Random(seed), lambda: java_env.mqadmin(
            group.namesrv.addr, "getSyncStateSet", "-a", group.controller, "-b", "broker-a",
        ).stdout, controller="Java controller")


async def test_a_paused_master_acknowledges_nothing_after_its_lease(
    java_env: JavaEnv, env: PyrmqEnv, tmp_path: Path, seed: int,
) -> None:
    rng = random.Random(seed)
    group = start_group(java_env, env, tmp_path)
    old = group.master()
    load = Load(rng)
    await load.run(old.addr, tag="before", until=asyncio.Event(), count=rng.randint(100, 500))
    os.kill(old.pid, signal.SIGSTOP)
    paused_at = time.monotonic()
    others = [p for p in group.brokers if p is not old]
    try:
        new = await first_success(others, load, deadline_s=60)
        failover_s = time.monotonic() - paused_at
        # A client that sent to the paused master meanwhile: its sends wait in the socket.
        host, port = old.addr.rsplit(":", 1)
        async with await BrokerClient.connect(host, int(port)) as client:
            pending = [asyncio.create_task(client.send(
                Message(TOPIC, body), producer_group="fo", queue_id=0, timeout_ms=10_000))
                for body in (load.body("zombie") for _ in range(20))]
            await asyncio.sleep(0)
            os.kill(old.pid, signal.SIGCONT)
            results = await asyncio.gather(*pending, return_exceptions=True)
    finally:
        os.kill(old.pid, signal.SIGCONT)
    zombies = [(r.code, r.remark) if isinstance(r, BrokerClientError) else
               (r.code, "stored") if not isinstance(r, BaseException) else (-1, repr(r))
               for r in results]
    assert all(code != ResponseCode.SUCCESS for code, _ in zombies), zombies
    # A definite refusal (14), by the lease or, once demoted, by the fence; never a timeout.
    assert {code for code, _ in zombies} == {ResponseCode.SERVICE_NOT_AVAILABLE}, zombies
    zombie_codes = sorted({remark or "" for _, remark in zombies})
    wait_until(lambda: (role_of(old) or ("", 0))[0] == "slave", timeout_s=START_TIMEOUT_S,
               what="the resumed old master demoted to slave", process=old)
    await load.run(new.addr, tag="after", until=asyncio.Event(), count=200)
    wait_until(lambda: sync_state_set_of(new) == {1, 2, 3}, timeout_s=START_TIMEOUT_S,
               what="the old master rejoined the SyncStateSet", process=old)
    lost = check_no_loss(group, load, survivors=group.brokers)
    print(f"SIGSTOP of the master: acked={len(load.acked)} lost={lost} "
          f"failover_s={failover_s:.2f} resumed master answered={zombie_codes}")
    assert lost == 0


def lose_tail(process: PyrmqProcess, keep: int) -> None:
    """A power loss on a stopped broker: every commitlog byte from `keep` on becomes zero (the
    page cache that never reached the disk)."""
    assert process.store_dir is not None
    file_bytes = COMMITLOG_FILE_BYTES
    for path in sorted((process.store_dir / "commitlog").iterdir()):
        start = int(path.name)
        if start + file_bytes <= keep:
            continue
        with path.open("r+b") as file:
            offset = max(0, keep - start)
            file.seek(offset)
            file.write(bytes(file_bytes - offset))


async def master_cleared(controller: str) -> bool:
    client = ControllerClient((controller,))
    try:
        info = await client.get_replica_info("broker-a")
    finally:
        await client.close()
    return not info.header.master_address


async def test_a_master_that_lost_committed_data_does_not_lead_again(
    newest_java_env: JavaEnv, env: PyrmqEnv, tmp_path: Path, seed: int,
) -> None:
    """All three hang (SIGSTOP) until the controller's election finds nobody alive (the set has
    no master, the SyncStateSet is still {1, 2, 3}); all are killed; the old master loses the
    tail of its log below its checkpoint's confirmOffset (a power loss) and restarts first. It
    holds back from the controller (M9), so a replica that kept everything is elected; it joins
    as a slave and its durable lostCommitted mark is cleared. No acked message is lost.
    (Without the hold, a run here saw the Java controller elect that broker at once.)"""
    rng = random.Random(seed)
    group = start_group(newest_java_env, env, tmp_path)
    old = group.master()
    load = Load(rng)
    await load.run(old.addr, tag="before", until=asyncio.Event(), count=rng.randint(300, 800))
    assert old.store_dir is not None
    checkpoint = old.store_dir / CHECKPOINT_FILE_NAME
    acked_end = max(len(commitlog(old).rstrip(b"\0")), 1)
    wait_until(lambda: load_checkpoint(checkpoint).checkpoint.confirm_phy_offset >= acked_end,
               timeout_s=30, what="the master's checkpoint holds the confirmOffset", process=old)
    for process in group.brokers:
        os.kill(process.pid, signal.SIGSTOP)
    for _ in range(300):  # 60 s
        if await master_cleared(group.controller):
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the controller still names a master of the hung set")
    for process in group.brokers:
        process.kill()
    confirm = load_checkpoint(checkpoint).checkpoint.confirm_phy_offset
    lose_tail(old, rng.randint(confirm // 4, confirm // 2))

    started = time.monotonic()
    back = env.start_broker(None, name="b-lost", store_dir=old.store_dir, listen_port=old.port,
                            timeout_s=START_TIMEOUT_S, extra_conf={
                                **BROKER_CONF, "controllerAddr": group.controller,
                                "namesrvAddr": group.namesrv.addr, "haListenPort": free_port()})
    wait_until(lambda: "staying away from the controller" in back.log(), timeout_s=30,
               what="the broker that lost data holds back (M9)", process=back)
    assert (old.store_dir / LOST_COMMITTED_FILE_NAME).exists()
    others = [group.start_broker(env, f"{p.name}-again", store_dir=p.store_dir,
                                 listen_port=p.port) for p in group.brokers if p is not old]
    group.brokers = [back, *others]
    new = group.master()
    assert new is not back
    wait_until(lambda: (role_of(back) or ("", 0))[0] == "slave", timeout_s=START_TIMEOUT_S,
               what="the broker that lost data joined as a slave", process=back)
    wait_until(lambda: sync_state_set_of(new) == {1, 2, 3}, timeout_s=START_TIMEOUT_S,
               what="it caught up and rejoined the SyncStateSet", process=back)
    rejoin_s = time.monotonic() - started
    assert "became master" not in back.log()
    assert not (old.store_dir / LOST_COMMITTED_FILE_NAME).exists()
    await load.run(new.addr, tag="after", until=asyncio.Event(), count=100)
    lost = check_no_loss(group, load, survivors=group.brokers)
    print(f"lost_committed master restarted first: acked={len(load.acked)} lost={lost} "
          f"rejoined_as_slave_s={rejoin_s:.1f}")
    assert lost == 0
    expected = commitlog(new)
    for process in group.brokers:
        assert commitlog(process) == expected, f"{process.name}'s commitlog differs"


async def controller_leader(addrs: str, timeout_s: float, *, other_than: str = "") -> str:
    """The leader the controllers name (one other than `other_than`: the survivors name a
    killed leader until they have elected the next)."""
    client = ControllerClient(tuple(a for a in addrs.split(";") if a != other_than))
    try:
        for _ in range(int(timeout_s / 0.2)):
            try:
                leader = await client.find_leader()
            except ControllerError:
                leader = other_than
            if leader != other_than:
                return leader
            await asyncio.sleep(0.2)
    finally:
        await client.close()
    raise AssertionError(f"no controller leader among {addrs} within {timeout_s} s")


async def test_killing_the_controller_leader_moves_no_broker(
    newest_java_env: JavaEnv, env: PyrmqEnv, tmp_path: Path, seed: int,
) -> None:
    """A three-node DLedger controller group; its leader is killed under load. No broker
    changes role, the next controller leader takes over, and the master refuses no send: a
    majority of the controllers still read its heartbeats, which keeps its lease (M17)."""
    rng = random.Random(seed)
    controllers = start_controllers(newest_java_env, tmp_path / "controllers", 3)
    addrs = ";".join(controllers)
    leader = await controller_leader(addrs, START_TIMEOUT_S)
    group = start_group(newest_java_env, env, tmp_path, controller=addrs)
    master = group.master()
    roles = {p.name: role_of(p) for p in group.brokers}
    load = Load(rng)
    await load.run(master.addr, tag="before", until=asyncio.Event(), count=rng.randint(100, 300))
    stop = asyncio.Event()

    async def kill_the_leader() -> float:
        controllers[leader].kill()
        killed_at = time.monotonic()
        await controller_leader(addrs, START_TIMEOUT_S, other_than=leader)
        elected_s = time.monotonic() - killed_at
        load.milestone = len(load.acked) + 300  # writes go on under the next leader
        load.reached.clear()
        await load.reached.wait()
        stop.set()
        return elected_s

    # Sends run across the controller failover (refusals would be counted).
    _, leader_s = await asyncio.gather(load.run(master.addr, tag="during", until=stop),
                                       kill_the_leader())
    assert {p.name: role_of(p) for p in group.brokers} == roles  # nobody moved
    lost = check_no_loss(group, load, survivors=group.brokers)
    print(f"controller leader killed: next leader in {leader_s:.1f} s, acked={len(load.acked)} "
          f"lost={lost} refused={load.refused}")
    assert lost == 0
    assert load.refused == 0  # the master's lease held through the controller failover
