"""One broker set (`broker-a`) in controller mode on loopback, for the failover scenarios of
tests/integration/test_embedded_controller_failover.py (pyrmq's embedded controller),
tests/interop/test_controller_mode.py (the real Java controller) and
tests/interop/test_mixed_ha_group.py (pyrmq and Java brokers in one set).

What is here, once for all three:
- the broker and controller settings of every scenario (`BROKER_CONF`: heartbeats every 300 ms,
  a 3 s controller heartbeat timeout, allAckInSyncStateSet; controllers scan every second);
- starting the controllers (`start_java_controllers`, `start_embedded_controller`) and a group
  (`Group`, `start_group`);
- what a test reads of a broker: its role (`role_of`), SyncStateSet, controller id, commitlog,
  stored bodies; and of the controller (`wait_replica_info`);
- the sync-ack load (`Load`), `first_success`, `check_no_loss`;
- the scenarios shared by the embedded and the Java controller: kill -9 of the master under a
  sync-ack load, SIGSTOP of the master past the heartbeat timeout;
- the fixtures `env` (a PyrmqEnv) and `seed` (printed; `PYRMQ_SEED` replays a run), imported
  by the test modules.

Every wait has a deadline and fails with the processes' logs; nothing sleeps for a fixed time
to let something happen.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, Protocol, TypeVar

import pytest

from broker.config import load_broker_config
from controller_client.client import ControllerClient, ReplicaInfo
from pyrmq_client import BrokerClient, Message
from pyrmq_client.errors import BrokerClientError
from remoting.codes import ResponseCode
from remoting.errors import RemotingError
from store.message_store import MessageStore
from tests.interop.harness import JavaEnv, JavaProcess, JavaServer, _write_properties
from tests.interop.network import free_port, port_accepts
from tests.interop.pyrmq_env import COMMITLOG_FILE_BYTES, PyrmqEnv, PyrmqProcess, wait_until
from tests.support.store_helpers import read_all

REPO: Final = Path(__file__).resolve().parents[2]
CONTROLLER_MAIN: Final = "org.apache.rocketmq.controller.ControllerStartup"
START_TIMEOUT_S: Final = 60.0
JAVA_START_TIMEOUT_S: Final = 120.0  # a JVM on a busy 2-core host (TLS set-up alone took 30 s)
CATCH_UP_S: Final = 60.0
BROKER: Final = "broker-a"
TOPIC: Final = "FailoverTopic"
HEARTBEAT_TIMEOUT_MS: Final = 3_000
BROKER_CONF: Final[dict[str, str | int | bool]] = {
    "enableControllerMode": True,
    "brokerIP1": "127.0.0.1",
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
# A set of Java and pyrmq brokers: the slave writes the master's bytes at the master's offsets,
# file ends included, so both use the same commitlog file size.
MIXED_CONF: Final[dict[str, str | int | bool]] = {
    **BROKER_CONF,
    "mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES,
}
# The pyrmq broker of a mixed set takes Java's default: a Java master's records carry no
# __CRC32# property (its enabledAppendPropCRC defaults to false), and with pyrmq's default
# (true) a promoted pyrmq slave finds them invalid and refuses to lead
# (tests/unit/test_foreign_records.py).
MIXED_PYRMQ_CONF: Final[dict[str, str | int | bool]] = {**MIXED_CONF, "forceVerifyPropCRC": False}
# Both controllers scan every second (Java's and pyrmq's default: 5 s).
CONTROLLER_SCANS: Final[dict[str, str | int | bool]] = {
    "scanNotActiveBrokerInterval": 1000,
    "scanInactiveMasterInterval": 1000,
}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[PyrmqEnv]:
    with PyrmqEnv(tmp_path / "pyrmq") as made:
        yield made


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("PYRMQ_SEED", random.randrange(2**32)))
    print(f"seed={value} (PYRMQ_SEED={value} replays it)")
    return value


# --- controllers --------------------------------------------------------------------------------

def start_java_controllers(java: JavaEnv, work_dir: Path, count: int = 1
                           ) -> dict[str, JavaProcess]:
    """`count` ControllerStartup nodes of one DLedger group on 127.0.0.1; their remoting
    addresses (DLedger serves remoting on its peer port)."""
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
            **CONTROLLER_SCANS,
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


def start_java_controller(java: JavaEnv, work_dir: Path) -> str:
    """One Java controller node; its remoting address."""
    return next(iter(start_java_controllers(java, work_dir)))


def start_embedded_controller(env: PyrmqEnv, store_dir: Path, *, name: str = "controller",
                              listen_port: int | None = None) -> PyrmqProcess:
    """`pyrmq-controller`: the name server and the embedded controller on one address."""
    return env.start_namesrv(name=name, store_dir=store_dir, listen_port=listen_port,
                             extra_conf=CONTROLLER_SCANS)


# --- what a test reads of a broker --------------------------------------------------------------

_ROLE = re.compile(r"became (master|slave) master_epoch=(\d+)")
_APPLIED = re.compile(r"sync_state_set applied old=\[[\d, ]*\] new=\[([\d, ]*)\]")
_HELD = re.compile(r"became master .*sync_state_set=\[([\d, ]*)\]|"
                   r"sync_state_set applied old=\[[\d, ]*\] new=\[([\d, ]*)\]")


def role_of(process: PyrmqProcess) -> tuple[str, int] | None:
    """The last HA role this process took (from its log): ("master" | "slave", epoch)."""
    found = _ROLE.findall(process.log())
    return None if not found else (found[-1][0], int(found[-1][1]))


def _ids(text: str) -> set[int]:
    return {int(x) for x in text.split(",") if x.strip()}


def sync_state_set_of(process: PyrmqProcess) -> set[int] | None:
    """The last SyncStateSet this (master) process applied."""
    found = _APPLIED.findall(process.log())
    return None if not found else _ids(found[-1])


def master_sync_state_set(process: PyrmqProcess) -> set[int] | None:
    """The SyncStateSet this master holds: the last one it took on becoming master (a replayed
    set) or applied since."""
    found = [m.group(1) if m.group(1) is not None else m.group(2)
             for m in _HELD.finditer(process.log())]
    return None if not found else _ids(found[-1])


def controller_id(process: PyrmqProcess | JavaServer) -> int:
    assert process.store_dir is not None
    return int((process.store_dir / "brokerIdentity").read_text().rsplit("#", 1)[1])


def commitlog_of(directory: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(directory.iterdir()))


def commitlog(process: PyrmqProcess | JavaServer) -> bytes:
    assert process.store_dir is not None
    return commitlog_of(process.store_dir / "commitlog")


def written(log: bytes) -> int:
    """The end of the written range (file preallocation is zeros; a record never ends in 0)."""
    return len(log.rstrip(b"\0"))


def bodies_in(process: PyrmqProcess) -> set[bytes]:
    """Every body of TOPIC queue 0 in a stopped pyrmq broker's store (confirmed or not)."""
    store = MessageStore(replace(load_broker_config(process.config_path).config.store,
                                 read_uncommitted=True))
    store.open()
    try:
        return {record.body for record in read_all(store, TOPIC, 0)}
    finally:
        store.close()


async def wait_identical(master: Callable[[], bytes], slave: Callable[[], bytes], *,
                         what: str, at_least: int = 1) -> int:
    """Wait until the slave holds the master's written range byte for byte; its length."""
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        expected = master()
        end = written(expected)
        got = slave()
        if end >= at_least and got[:end] == expected[:end] and written(got) == end:
            return end
        if time.monotonic() > deadline:
            first = next((i for i in range(min(end, len(got))) if got[i] != expected[i]), None)
            raise AssertionError(
                f"{what}: the slave's commitlog differs: master written={end}, slave "
                f"written={written(got)}, first differing byte at {first}")
        await asyncio.sleep(0.2)


async def wait_replica_info(controller: str, done: Callable[[ReplicaInfo], bool], *,
                            what: str, timeout_s: float = START_TIMEOUT_S) -> ReplicaInfo:
    """Poll the controller's GET_REPLICA_INFO of `broker-a` until `done`."""
    client = ControllerClient(tuple(controller.split(";")))
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            info = await client.get_replica_info(BROKER)
            if done(info):
                return info
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: last {info}")
            await asyncio.sleep(0.1)
    finally:
        await client.close()


def pyrmq_admin(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "controller.admin", *args], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# --- load ---------------------------------------------------------------------------------------

async def connect(address: str, *, timeout_s: float = 10.0) -> BrokerClient:
    """A client of a broker that answers: a connect refused or reset (a busy host's full
    accept queue) is tried again until `timeout_s`."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await BrokerClient.connect(host, int(port))
        except (RemotingError, OSError):
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)


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

    def ack(self, body: bytes, queue_offset: int) -> None:
        self.acked.append(body)
        self.offsets.append(queue_offset)
        if self.milestone is not None and len(self.acked) >= self.milestone:
            self.reached.set()

    async def run(self, address: str, *, tag: str, until: asyncio.Event, count: int | None = None,
                  concurrency: int = 8) -> None:
        """Send to `address` until `until` is set (or `count` acked), `concurrency` at once."""
        goal = None if count is None else len(self.acked) + count
        async with await connect(address) as client:

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
                        self.ack(body, result.queue_offset)
                    else:
                        self.refused += 1

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def until_killed(self, address: str, kill: Callable[[], None], *, after: int
                           ) -> float:
        """Send to `address`; once `after` more are acked, `kill()` (with sends in flight) and
        stop. Returns the kill's monotonic time."""
        self.milestone = len(self.acked) + after
        self.reached.clear()
        stop = asyncio.Event()
        killed_at = 0.0

        async def killer() -> None:
            nonlocal killed_at
            await self.reached.wait()
            kill()
            killed_at = time.monotonic()
            stop.set()

        await asyncio.gather(self.run(address, tag="before", until=stop), killer())
        return killed_at


class Broker(Protocol):
    """A pyrmq or a Java broker, as `first_success` sees it."""

    @property
    def addr(self) -> str: ...


def _alive(broker: Broker) -> bool:
    if isinstance(broker, JavaServer):
        return broker.process.alive()
    return not isinstance(broker, PyrmqProcess) or broker.alive()


B = TypeVar("B", bound=Broker)


async def first_success(brokers: Sequence[B], load: Load, deadline_s: float) -> B:
    """Try one send on each live broker every 50 ms until one answers SUCCESS (it is master)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for broker in brokers:
            if not _alive(broker):
                continue
            host, port = broker.addr.rsplit(":", 1)
            body = load.body("probe")
            try:
                async with await BrokerClient.connect(host, int(port)) as client:
                    result = await client.send(Message(TOPIC, body), producer_group="fo",
                                               queue_id=0, timeout_ms=3000)
            except (BrokerClientError, RemotingError, OSError):
                continue
            if result.code == ResponseCode.SUCCESS:
                load.ack(body, result.queue_offset)
                return broker
        await asyncio.sleep(0.05)
    raise AssertionError("no broker answered a send SUCCESS in time\n" + "\n".join(
        b.diagnostics() if isinstance(b, PyrmqProcess) else str(b) for b in brokers))


# --- a group of pyrmq brokers -------------------------------------------------------------------

@dataclass
class Group:
    """pyrmq brokers b1..b3 of `broker-a`; `controller` is the controllerAddr, `namesrv` the
    pyrmq process that is their name server (and, embedded, the controller too)."""

    controller: str
    namesrv: PyrmqProcess
    brokers: list[PyrmqProcess]

    def start_broker(self, env: PyrmqEnv, name: str, *, store_dir: Path | None = None,
                     listen_port: int | None = None,
                     conf: dict[str, str | int | bool] = BROKER_CONF) -> PyrmqProcess:
        return env.start_broker(self.namesrv, name=name, store_dir=store_dir,
                                listen_port=listen_port, timeout_s=START_TIMEOUT_S,
                                extra_conf={**conf, "controllerAddr": self.controller,
                                            # a free port of its own (listenPort + 1 may be
                                            # some client's ephemeral port by a restart)
                                            "haListenPort": free_port()})

    def master(self) -> PyrmqProcess:
        masters = [p for p in self.brokers if p.alive() and (role_of(p) or ("", 0))[0] == "master"]
        assert len(masters) == 1, [role_of(p) for p in self.brokers]
        return masters[0]

    def wait_for_master(self) -> PyrmqProcess:
        def one_master() -> bool:
            return sum((role_of(p) or ("", 0))[0] == "master" for p in self.brokers) == 1

        wait_until(one_master, timeout_s=START_TIMEOUT_S, what="one broker became master")
        return self.master()


def start_group(env: PyrmqEnv, controller: str | None, namesrv: PyrmqProcess) -> Group:
    """Brokers b1, b2, b3 under `controller` (None: `namesrv` is the embedded controller);
    returns once ids 1-3 are taken and both slaves are in the master's SyncStateSet."""
    group = Group(controller or namesrv.addr, namesrv, [])
    for name in ("b1", "b2", "b3"):
        group.brokers.append(group.start_broker(env, name))
    master = group.master()
    assert sorted(controller_id(p) for p in group.brokers) == [1, 2, 3]
    wait_until(lambda: sync_state_set_of(master) == {1, 2, 3}, timeout_s=START_TIMEOUT_S,
               what="both slaves in the master's SyncStateSet", process=master)
    return group


def check_no_loss(group: Group, load: Load, *, survivors: list[PyrmqProcess]) -> int:
    """Stop everything; every acked body must be in every survivor's store. Returns lost."""
    for process in group.brokers:
        if process.alive():
            assert process.terminate() == 0, process.diagnostics()
    acked = set(load.acked)
    return max((len(acked - bodies_in(p)) for p in survivors), default=0)


# --- scenarios shared by the embedded and the Java controller -----------------------------------

async def kill_the_master_under_sync_ack_load(
    group: Group, env: PyrmqEnv, rng: random.Random, get_sync_state_set: Callable[[], str],
    *, controller: str,
) -> None:
    """kill -9 of the master under a sync-ack load: no acknowledged message is lost, a new
    master comes from the SyncStateSet, the old master restarted on its store rejoins as a slave
    and cuts only its unconfirmed tail (all commitlogs end byte-identical), no queue offset is
    handed out twice (RocketMQ #6344, #7689). `get_sync_state_set()` is what an admin tool
    (mqadmin, pyrmq-admin) prints for `getSyncStateSet -b broker-a`: it must show the new
    master and all three in the set."""
    old = group.master()
    old_id, old_port = controller_id(old), old.port
    load = Load(rng)
    started = time.monotonic()
    killed_at = await load.until_killed(old.addr, old.kill, after=rng.randint(300, 1500))
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
    assert len(set(load.offsets)) == len(load.offsets)
    expected = commitlog(new)
    for process in survivors:
        assert commitlog(process) == expected, f"{process.name}'s commitlog differs"


async def pause_the_master_past_the_heartbeat_timeout(
    group: Group, rng: random.Random, *, controller: str,
) -> None:
    """SIGSTOP of the master under a sync-ack load until another member is elected (past the
    controller's heartbeat timeout: a hang closes no connection). Sends that a client queued on
    the paused master meanwhile are answered, once it resumes (SIGCONT), with a definite
    refusal (14, by the lease (M17) or, once demoted, by the fence), never SUCCESS; it rejoins
    as a slave and the SyncStateSet; no acknowledged message is lost."""
    old = group.master()
    load = Load(rng, milestone=rng.randint(100, 500))
    others = [p for p in group.brokers if p is not old]
    stop = asyncio.Event()
    sending = asyncio.create_task(load.run(old.addr, tag="before", until=stop))
    try:
        await load.reached.wait()
        os.kill(old.pid, signal.SIGSTOP)  # with sends in flight
        paused_at = time.monotonic()
        stop.set()
        acked_before = len(load.acked)
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
        # The sends in flight at the pause: answered once resumed, or timed out (unknown);
        # one answered SUCCESS counts as acked and must not be lost.
        await sending
    finally:
        os.kill(old.pid, signal.SIGCONT)
        stop.set()
    zombies = [(r.code, r.remark) if isinstance(r, BrokerClientError) else
               (r.code, "stored") if not isinstance(r, BaseException) else (-1, repr(r))
               for r in results]
    assert all(code != ResponseCode.SUCCESS for code, _ in zombies), zombies
    # A definite refusal (14), by the lease or, once demoted, by the fence; never a timeout.
    assert {code for code, _ in zombies} == {ResponseCode.SERVICE_NOT_AVAILABLE}, zombies
    zombie_remarks = sorted({remark or "" for _, remark in zombies})
    wait_until(lambda: (role_of(old) or ("", 0))[0] == "slave", timeout_s=START_TIMEOUT_S,
               what="the resumed old master demoted to slave", process=old)
    await load.run(new.addr, tag="after", until=asyncio.Event(), count=200)
    wait_until(lambda: sync_state_set_of(new) == {1, 2, 3}, timeout_s=START_TIMEOUT_S,
               what="the old master rejoined the SyncStateSet", process=old)
    lost = check_no_loss(group, load, survivors=group.brokers)
    print(f"{controller}, SIGSTOP of the master: acked={len(load.acked)} (before the pause "
          f"{acked_before}) lost={lost} failover_s={failover_s:.2f} refused={load.refused} "
          f"unknown={load.unknown} resumed master answered={zombie_remarks}")
    assert lost == 0
    assert len(set(load.offsets)) == len(load.offsets)


@dataclass
class QueueWatcher:
    """A consumer of TOPIC queue 0 that pulls from every address in turn, each from its own
    cursor, and notes what would show a queue-offset rollback (RocketMQ #6344, #7689): one
    queue offset served with two different bodies (by any brokers, at any time), or a queue
    max offset below one the master answered before (by this master or an earlier one).
    `master()` names the address that is master now (the one consumers pull from); a slave,
    or a broker restarting, may lag behind until it has caught up."""

    addresses: list[str]
    master: Callable[[], str | None]
    served: dict[int, bytes] = field(default_factory=dict)  # queue offset -> body
    master_highest: int = 0
    violations: list[str] = field(default_factory=list)
    pulls: int = 0

    async def _pull(self, client: BrokerClient, address: str, cursor: int) -> int:
        is_master = self.master() == address
        result = await client.pull("QueueWatcher", TOPIC, 0, cursor, max_nums=64,
                                   timeout_ms=1000)
        self.pulls += 1
        for message in result.messages:
            first = self.served.setdefault(message.queue_offset, message.body)
            if first != message.body:
                self.violations.append(
                    f"{address} served queue offset {message.queue_offset} with another body "
                    f"({message.body[:24]!r}, first seen {first[:24]!r})")
            cursor = max(cursor, message.queue_offset + 1)
        if is_master and self.master() == address:  # master before and after the pull
            if result.max_offset < self.master_highest:
                self.violations.append(
                    f"master {address}: queue max offset {result.max_offset}, below the "
                    f"{self.master_highest} a master answered before")
            self.master_highest = max(self.master_highest, result.max_offset)
        return cursor

    async def run(self, until: asyncio.Event) -> None:
        cursors = dict.fromkeys(self.addresses, 0)
        clients: dict[str, BrokerClient] = {}
        try:
            while not until.is_set():
                for address in self.addresses:
                    try:
                        if address not in clients:
                            host, port = address.rsplit(":", 1)
                            clients[address] = await BrokerClient.connect(host, int(port))
                        cursors[address] = await self._pull(clients[address], address,
                                                            cursors[address])
                    except BrokerClientError:
                        continue  # refused (e.g. fenced, no such topic yet): pull again later
                    except (RemotingError, OSError, TimeoutError):
                        client = clients.pop(address, None)  # down or restarting
                        if client is not None:
                            await client.close()
                await asyncio.sleep(0.02)
        finally:
            for client in clients.values():
                await client.close()


async def restart_the_master_at_once(
    group: Group, env: PyrmqEnv, rng: random.Random, *, controller: str,
) -> None:
    """kill -9 of the master under a sync-ack load and an immediate restart on its store and
    address, while a consumer pulls from every broker: queue offsets seen by consumers never go
    back and no offset is served with two bodies (RocketMQ #6344, #7689); every acked message
    is stored at the queue offset its send was answered with; none is lost."""
    old = group.master()
    old_id, old_port = controller_id(old), old.port

    def master() -> str | None:
        masters = [p.addr for p in group.brokers
                   if p.alive() and (role_of(p) or ("", 0))[0] == "master"]
        return masters[0] if len(masters) == 1 else None

    watcher = QueueWatcher([p.addr for p in group.brokers], master)
    watching = asyncio.Event()
    watch = asyncio.create_task(watcher.run(watching))
    try:
        load = Load(rng)
        killed_at = await load.until_killed(old.addr, old.kill, after=rng.randint(300, 1200))
        acked_before = len(load.acked)
        # The restart begins at once; sends look for the new master meanwhile.
        restarting = asyncio.create_task(asyncio.to_thread(
            group.start_broker, env, "b-again", store_dir=old.store_dir, listen_port=old_port))
        new = await first_success([p for p in group.brokers if p is not old], load,
                                  deadline_s=30)
        failover_s = time.monotonic() - killed_at
        back = await restarting
        restarted_s = time.monotonic() - killed_at
        group.brokers.append(back)
        assert controller_id(back) == old_id
        await load.run(new.addr, tag="after", until=asyncio.Event(), count=300)
        # (In threads: the watcher goes on pulling meanwhile.)
        await asyncio.to_thread(
            wait_until, lambda: (role_of(back) or ("", 0))[0] in {"master", "slave"},
            timeout_s=START_TIMEOUT_S, what="the restarted master took a role", process=back)
        await asyncio.to_thread(
            wait_until, lambda: master_sync_state_set(new) == {1, 2, 3},
            timeout_s=START_TIMEOUT_S, what="all three in the SyncStateSet", process=new)
        await load.run(new.addr, tag="rejoined", until=asyncio.Event(), count=200)
        # The watcher sees every acked offset on the master (consume queues follow the
        # confirmed appends a moment later).
        goal = max(load.offsets) + 1
        await asyncio.to_thread(
            wait_until, lambda: len(watcher.served) >= goal, timeout_s=CATCH_UP_S,
            what="the consumer saw every acked offset", process=new)
    finally:
        watching.set()
        await watch
    at = dict(zip(load.acked, load.offsets, strict=True))
    misplaced = [(at[body], offset) for offset, body in watcher.served.items()
                 if body in at and at[body] != offset]
    survivors = [p for p in group.brokers if p is not old]
    lost = check_no_loss(group, load, survivors=survivors)
    print(f"{controller}, kill -9 and immediate restart of the master: acked={len(load.acked)} "
          f"(before the kill {acked_before}) lost={lost} restarted_s={restarted_s:.2f} "
          f"failover_s={failover_s:.2f} new master {new.name} (epoch {role_of(new)}) "
          f"refused={load.refused} unknown={load.unknown} consumer pulls={watcher.pulls} "
          f"offsets served={len(watcher.served)} violations={len(watcher.violations)}")
    assert watcher.violations == [], watcher.violations
    assert misplaced == [], misplaced[:10]
    assert not set(load.acked) - set(watcher.served.values())  # the consumer saw every ack
    assert lost == 0
    assert len(set(load.offsets)) == len(load.offsets)
    expected = commitlog(new)
    for process in survivors:
        assert commitlog(process) == expected, f"{process.name}'s commitlog differs"
