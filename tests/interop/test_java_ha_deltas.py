"""The HA differences between the Java releases (docs/README.md "Version differences 5.3.3 ->
5.5.0", rows 1-3), each provoked on a real Java broker of each release with pyrmq as its peer.

`test_java_ha_deltas` runs one controller-mode group per release: pyrmq's embedded controller
(also the name server; no extra JVM), one Java broker, one pyrmq broker, 1 MiB commitlog files,
`allAckInSyncStateSet=true`. The controller scans every 0.5 s and brokers give up on a silent
controller after 6 s, so a paused broker loses its master role within seconds;
`haHousekeepingInterval` is 20 s (Java's default), so a paused peer keeps its HA connection.
Unclean election is on (row 2 needs it; row 1 pauses the pyrmq broker first). Two Java
starts per release; pauses (SIGSTOP) instead of restarts wherever they do.
In order:

1. Row 1, Java master, pyrmq slave: the Java master gets a new epoch while it stays master (the
   pyrmq slave paused until the controller sees it gone, then the master until the controller
   clears it; the Java broker, resumed, asks to be elected and is:
   `ReplicasManager.changeToMaster` -> `changeToMasterWhenLastRoleIsMaster`), its HA
   connection to the pyrmq slave kept throughout. A 5.5.0 master relabels on that connection
   and the pyrmq slave records the entry from the TRANSFER label (docs/ha-protocol.md §5.4);
   a 5.3.3 master keeps the old label, and the pyrmq slave, restarted, cuts back to the new
   epoch's start and re-fetches (§7.3 there). Either way it ends byte-identical, with the
   master's epoch file.
2. Row 3, Java master: with the controller paused, the pyrmq slave is killed. A 5.5.0 master
   drops it from its SyncStateSet at once (the next allAck send succeeds); a 5.3.3 master waits
   for the controller (FLUSH_SLAVE_TIMEOUT). The pyrmq slave comes back and is re-added (expand).
3. Row 2, pyrmq master, Java slave: the Java master, alone in the set, leads one more epoch in
   which it writes nothing; paused, it loses the master role to pyrmq at the same offset under a
   higher epoch. The Java broker, resumed as pyrmq's slave, cuts there: 5.5.0 keeps its stale
   entry (and refuses pyrmq's label), 5.3.3 replaces it. At its next connection (step 4 kills
   and restarts it) a 5.5.0 slave cuts back again (its first ACK, logged by the pyrmq master,
   is that offset, not its end) and re-fetches; the pyrmq master ships from there.
4. Row 3, pyrmq master (between the Java slave's two connections of step 3): with the
   controller paused, the Java slave is killed; pyrmq keeps the 5.3.3 rule, so an allAck send
   fails (FLUSH_SLAVE_TIMEOUT) until the controller has applied the shrink, then succeeds.
5. Row 2, pyrmq as slave: pyrmq, master again, leads an epoch in which it writes nothing and
   loses the master role to the Java broker at the same offset; at its handshake pyrmq keeps
   the 5.3.3 rule (drops its entries at or after the cut) and ends with the Java master's epoch
   file (a 5.5.0-style slave would keep them and refuse the master's labels).

Every step ends byte-identical; every acknowledged message is in the pyrmq store at the end.
Prints its cost (a noisy single sample on a shared machine, never asserted).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controller_client.client import ReplicaInfo
from pyrmq_client import BrokerClient, Message
from remoting.codes import ResponseCode
from store.epoch_file import EPOCH_FILE_NAME, parse_epoch_file
from store.errors import CorruptFileError
from tests.interop.controller_group import (
    BROKER_CONF,
    TOPIC,
    bodies_in,
    commitlog,
    wait_identical,
    wait_replica_info,
    written,
)
from tests.interop.harness import JavaEnv, JavaServer
from tests.interop.network import free_port
from tests.interop.pyrmq_env import COMMITLOG_FILE_BYTES, PyrmqEnv, PyrmqProcess

# One test runs a whole group through every row: above the suite's 300 s on a loaded machine.
pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

BROKER = "broker-a"
START_TIMEOUT_S = 120.0  # a JVM start took over 60 s on the shared 2-core machine
WAIT_S = 60.0
MESSAGES = 8  # per step: a few records are all any rule here needs
NEWEST = "5.5.0"
CONTROLLER_CONF: dict[str, str | int | bool] = {
    "scanNotActiveBrokerInterval": 500,
    "scanInactiveMasterInterval": 500,
    "inactiveMasterScanDelay": 1000,
    "enableElectUncleanMaster": True,  # row 2: pyrmq elected while out of the set
}
GROUP_CONF: dict[str, str | int | bool] = {
    **BROKER_CONF,
    "brokerIP1": "127.0.0.1",
    "brokerIP2": "127.0.0.1",
    "mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES,
    "controllerHeartBeatTimeoutMills": 6000,  # a controller paused for ~1.5 s loses nobody
    "haHousekeepingInterval": 20_000,  # a paused peer keeps its HA connection
    "slaveTimeout": 1000,  # an allAck send that waits for a dead slave fails after 1 s
}
PYRMQ_CONF: dict[str, str | int | bool] = {
    # Java's default: a Java master's records carry no __CRC32# property.
    "forceVerifyPropCRC": False,
}
FLUSH_SLAVE_TIMEOUT = 12
TRUNCATED = r"slave truncated old_max_phy_offset=(\d+) new_max_phy_offset=(\d+)"


# -- the group ----------------------------------------------------------------------------------


@pytest.fixture
def env(tmp_path: Path) -> Iterator[PyrmqEnv]:
    with PyrmqEnv(tmp_path / "pyrmq") as made:
        yield made


def start_java(java_env: JavaEnv, controller: PyrmqProcess, name: str, *,
               again: JavaServer | None = None) -> JavaServer:
    """A Java broker of the group; `again`: restart that one on its store and address."""
    return java_env.start_java_broker(
        controller.addr, name=name, timeout_s=START_TIMEOUT_S,
        listen_port=None if again is None else int(again.addr.rsplit(":", 1)[1]),
        store_dir=None if again is None else again.store_dir,
        extra_conf={**GROUP_CONF, "controllerAddr": controller.addr})


def start_pyrmq(env: PyrmqEnv, controller: PyrmqProcess, name: str, *,
                again: PyrmqProcess | None = None, async_learner: bool = False) -> PyrmqProcess:
    """A pyrmq broker of the group; `again`: restart that one on its store and address."""
    return env.start_broker(
        controller, name=name, timeout_s=START_TIMEOUT_S,
        listen_port=None if again is None else again.port,
        store_dir=None if again is None else again.store_dir,
        extra_conf={**GROUP_CONF, **PYRMQ_CONF, "controllerAddr": controller.addr,
                    "haListenPort": free_port(), "asyncLearner": async_learner})


@contextlib.contextmanager
def paused(pid: int, *, group: bool = False) -> Iterator[None]:
    """SIGSTOP a process (a JVM: its process group) for the block; SIGCONT after, always (a
    process killed meanwhile is skipped)."""
    send: Callable[[int, int], None] = os.killpg if group else os.kill
    send(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            send(pid, signal.SIGCONT)


def pause(broker: JavaServer | PyrmqProcess) -> contextlib.AbstractContextManager[None]:
    if isinstance(broker, JavaServer):
        return paused(broker.process.pid, group=True)
    return paused(broker.pid)


async def wait_for(check: Callable[[], object], *, what: str, timeout_s: float = WAIT_S,
                   diagnostics: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{diagnostics()}")
        await asyncio.sleep(0.1)


async def replica_info(controller: PyrmqProcess, done: Callable[[ReplicaInfo], bool], *,
                       what: str, timeout_s: float = WAIT_S) -> ReplicaInfo:
    """Poll the controller's GET_REPLICA_INFO until `done`."""
    return await wait_replica_info(controller.addr, done, what=what, timeout_s=timeout_s)


def master_is(address: str) -> Callable[[ReplicaInfo], bool]:
    return lambda info: info.header.master_address == address


def members_are(*ids: int) -> Callable[[ReplicaInfo], bool]:
    return lambda info: info.sync_state_set.sync_state_set == set(ids)


# -- stores -------------------------------------------------------------------------------------


def store_of(server: JavaServer | PyrmqProcess) -> Path:
    assert server.store_dir is not None
    return server.store_dir


def epochs(server: JavaServer | PyrmqProcess) -> list[tuple[int, int]]:
    """The (epoch, startOffset) entries of the broker's epoch file. Java rewrites the file in
    place, so a read can catch it half written: read again until it checks (CRC, count)."""
    path = store_of(server) / EPOCH_FILE_NAME
    if not path.exists():
        return []  # no entry recorded yet
    deadline = time.monotonic() + 5.0
    while True:
        try:
            entries = parse_epoch_file(path.read_bytes(), path=path)
        except CorruptFileError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
            continue
        return [(e.epoch, e.start_offset) for e in entries]


async def identical(master: JavaServer | PyrmqProcess, slave: JavaServer | PyrmqProcess, *,
                    what: str) -> int:
    """Wait until the slave holds the master's written commitlog byte for byte; its end."""
    return await wait_identical(lambda: commitlog(master), lambda: commitlog(slave), what=what,
                                at_least=0)


# -- sends --------------------------------------------------------------------------------------


class Sends:
    """Sync sends to one broker address at a time; `acked` holds every body answered SUCCESS."""

    def __init__(self) -> None:
        self.acked: list[bytes] = []
        self.slave_timeouts = 0  # FLUSH_SLAVE_TIMEOUT answers in `acked_batch`
        self._next = 0

    async def one(self, address: str, *, timeout_ms: int = 5000) -> int:
        """One send; its response code (a SUCCESS is recorded as acknowledged)."""
        self._next += 1
        body = f"delta-{self._next}-".encode() * 8
        host, port = address.rsplit(":", 1)
        async with await BrokerClient.connect(host, int(port)) as client:
            result = await client.send(Message(TOPIC, body), producer_group="deltas",
                                       queue_id=0, timeout_ms=timeout_ms)
        if result.code == ResponseCode.SUCCESS:
            self.acked.append(body)
        return result.code

    async def acked_batch(self, address: str, count: int = MESSAGES) -> None:
        """Send until `count` more are acknowledged. On a loaded machine a slave can miss the 1 s
        `slaveTimeout` (FLUSH_SLAVE_TIMEOUT: stored, not acknowledged; counted); any other code
        fails, and so do more than `count` such misses."""
        goal = len(self.acked) + count
        misses = 0
        while len(self.acked) < goal:
            code = await self.one(address)
            if code == FLUSH_SLAVE_TIMEOUT:
                misses += 1
                self.slave_timeouts += 1
                assert misses <= count, f"send to {address}: {misses} FLUSH_SLAVE_TIMEOUT"
                continue
            assert code == ResponseCode.SUCCESS, f"send to {address}: code {code}"


def log_count(process: PyrmqProcess, pattern: str) -> int:
    return len(re.findall(pattern, process.log()))


# -- the scenario -------------------------------------------------------------------------------


async def test_java_ha_deltas(java_env: JavaEnv, env: PyrmqEnv) -> None:
    started = time.monotonic()
    steps: list[str] = []

    def step(name: str) -> None:
        steps.append(f"{name}={time.monotonic() - started:.0f}s")

    newest = java_env.version == NEWEST
    controller = env.start_namesrv(name="controller", extra_conf=CONTROLLER_CONF)
    java = start_java(java_env, controller, "java-b1")
    info = await replica_info(controller, master_is(java.addr), what="the Java broker master")
    java_id, first_epoch = info.header.master_broker_id, info.header.master_epoch
    assert java_id is not None
    assert first_epoch is not None
    ours = start_pyrmq(env, controller, "pyrmq-b2")
    info = await replica_info(controller, lambda i: len(i.sync_state_set.sync_state_set) == 2,
                              what="the pyrmq slave in the SyncStateSet")
    (pyrmq_id,) = info.sync_state_set.sync_state_set - {java_id}
    sends = Sends()
    await sends.acked_batch(java.addr)
    new_start = await identical(java, ours, what="Java master -> pyrmq slave")
    assert epochs(ours) == epochs(java) == [(first_epoch, 0)]

    step("group")
    # Row 1, "still master, new epoch", Java master: both paused (the slave first, so that the
    # controller finds no live member to elect), the controller clears the master; the Java
    # broker, resumed, asks to be elected and is, at a new epoch, keeping its HA connection.
    disconnects = log_count(ours, "HA client disconnected")
    seen = log_count(controller, expired(pyrmq_id))
    with pause(ours):
        await gone(controller, pyrmq_id, seen)
        new_epoch = await lead_new_epoch(controller, java, new_start, first_epoch)
    await sends.acked_batch(java.addr)
    await identical(java, ours, what="after the new epoch")
    assert log_count(ours, "HA client disconnected") == disconnects, "the connection dropped"
    # 5.5.0 relabels on the connection, and the slave appends the entry from the label; 5.3.3
    # keeps the old label until the slave reconnects.
    assert epochs(ours) == (epochs(java) if newest else [(first_epoch, 0)]), epochs(ours)

    step("row1")
    # The pyrmq slave restarted: its handshake settles the epoch file (5.3.3: a cut back to the
    # new epoch's start and a re-fetch).
    assert ours.terminate() == 0
    end_before = written(commitlog(ours))
    ours = start_pyrmq(env, controller, "pyrmq-b2-restarted", again=ours)
    await replica_info(controller, members_are(java_id, pyrmq_id),
                       what="the pyrmq slave back in the SyncStateSet")
    await sends.acked_batch(java.addr)
    await identical(java, ours, what="after the pyrmq slave's reconnect")
    assert epochs(ours) == epochs(java) == [(first_epoch, 0), (new_epoch, new_start)]
    cuts = re.findall(TRUNCATED, ours.log())
    assert [(int(old), int(new)) for old, new in cuts if old != new] == \
        ([] if newest else [(end_before, new_start)]), cuts

    step("row1_reconnect")
    # Row 3, Java master: the controller paused, the pyrmq slave killed. 5.5.0 drops it from
    # its local SyncStateSet at once (an allAck send succeeds); 5.3.3 waits for the controller.
    with paused(controller.pid):
        ours.kill()
        code = await sends.one(java.addr)
    assert code == (ResponseCode.SUCCESS if newest else FLUSH_SLAVE_TIMEOUT), code
    await replica_info(controller, members_are(java_id), what="the controller applies the shrink")
    ours = start_pyrmq(env, controller, "pyrmq-b2-back", again=ours)
    await replica_info(controller, members_are(java_id, pyrmq_id),
                       what="the pyrmq slave re-added (expand)")
    await sends.acked_batch(java.addr)
    cut = await identical(java, ours, what="after the pyrmq slave came back")
    assert epochs(ours) == epochs(java)

    step("row3_java")
    # Row 2: the Java master, alone in the set, leads one more epoch at `cut` and writes
    # nothing in it; paused again, it loses the master role to pyrmq (elected unclean: it was
    # not in the set) at the same offset, under a higher epoch.
    assert ours.terminate() == 0
    await replica_info(controller, members_are(java_id), what="the Java master alone in the set")
    java_epoch = await lead_new_epoch(controller, java, cut, new_epoch)
    with pause(java):
        ours = start_pyrmq(env, controller, "pyrmq-b2-master", again=ours)
        info = await replica_info(controller, master_is(ours.addr), what="pyrmq elected")
    our_epoch = info.header.master_epoch
    assert our_epoch is not None
    assert our_epoch > java_epoch
    history = [(first_epoch, 0), (new_epoch, new_start)]
    await wait_for(lambda: epochs(ours) == [*history, (our_epoch, cut)],
                   what=f"pyrmq's entry ({our_epoch}, {cut})",
                   diagnostics=lambda: f"epoch file {epochs(ours)}")
    await sends.acked_batch(ours.addr)

    step("pyrmq_elected")
    # The Java broker, resumed, becomes pyrmq's slave: its last entry is unknown to the master,
    # so it cuts at `cut` (nothing to cut). 5.5.0 keeps that stale entry (and so refuses
    # pyrmq's label at the same offset); 5.3.3 drops it and records pyrmq's.
    await replica_info(controller, members_are(pyrmq_id, java_id),
                       what="the Java slave in the SyncStateSet")
    await sends.acked_batch(ours.addr)
    await identical(ours, java, what="pyrmq master -> Java slave")
    stale = [*history, (java_epoch, cut)]
    assert epochs(java) == (stale if newest else epochs(ours)), epochs(java)

    step("row2_java_slave")
    # Row 3, pyrmq master: the controller paused, the Java slave killed. pyrmq keeps the 5.3.3
    # rule: an allAck send waits for the slave until the controller has applied the shrink.
    with paused(controller.pid):
        java.process.kill()
        code = await sends.one(ours.addr)
    assert code == FLUSH_SLAVE_TIMEOUT, code
    await replica_info(controller, members_are(pyrmq_id), what="the controller applies the shrink")
    assert await sends.one(ours.addr) == ResponseCode.SUCCESS
    end = written(commitlog(java))

    step("row3_pyrmq")
    # Row 2, the reconnect: a 5.5.0 slave cuts back to `cut` again (its first ACK) and
    # re-fetches; a 5.3.3 slave resumes at its end. The pyrmq master serves both.
    first_acks = rf"HA slave first ack slave_broker_id={java_id} offset=(\d+)"
    seen = log_count(ours, first_acks)
    java = start_java(java_env, controller, "java-b1-again", again=java)
    await replica_info(controller, members_are(pyrmq_id, java_id),
                       what="the Java slave back in the SyncStateSet")
    await wait_for(lambda: log_count(ours, first_acks) > seen, what="the Java slave's first ack")
    first_ack = int(re.findall(first_acks, ours.log())[seen])
    assert first_ack == (cut if newest else end), (first_ack, cut, end)
    await sends.acked_batch(ours.addr)
    replicated = await identical(ours, java, what="after the Java slave's reconnect")
    java_epochs, our_epochs = epochs(java), epochs(ours)
    assert java_epochs == (stale if newest else our_epochs), java_epochs

    # Row 2, pyrmq as slave: pyrmq leads an epoch in which it writes nothing, then loses the
    # master role to the Java broker at the same offset. At its handshake that entry (against
    # 5.5.0 also the one before, which the Java broker never recorded) is unknown to the Java
    # master; pyrmq keeps the 5.3.3 rule and drops the entries at or after the cut (kept, as a
    # 5.5.0 slave keeps them, they would refuse the master's labels), so it ends with the Java
    # master's epoch file.
    step("row2_reconnect")
    at = written(commitlog(ours))
    seen = log_count(controller, expired(java_id))
    with pause(java):
        await gone(controller, java_id, seen)
        our_last_epoch = await lead_new_epoch(controller, ours, at, our_epoch)
        os.kill(ours.pid, signal.SIGSTOP)  # killed below, once the Java broker leads
    info = await replica_info(controller, master_is(java.addr), what="the Java broker elected")
    java_last_epoch = info.header.master_epoch
    assert java_last_epoch is not None
    assert java_last_epoch > our_last_epoch
    await wait_for(lambda: epochs(java)[-1] == (java_last_epoch, at),
                   what=f"the Java master's entry ({java_last_epoch}, {at})",
                   diagnostics=lambda: f"epoch file {epochs(java)}")
    ours.kill()
    ours = start_pyrmq(env, controller, "pyrmq-b2-slave", again=ours)
    await replica_info(controller, members_are(java_id, pyrmq_id),
                       what="the pyrmq slave in the Java master's SyncStateSet")
    await identical(java, ours, what="Java master -> pyrmq slave, after pyrmq's own epoch")
    await sends.acked_batch(java.addr)
    replicated = await identical(java, ours, what="Java master -> pyrmq slave, at the end")
    java_epochs, our_epochs = epochs(java), epochs(ours)
    assert our_epochs == java_epochs, (our_epochs, java_epochs)
    assert (our_last_epoch, at) not in our_epochs
    # A 5.5.0 master announces its stale entry, unknown to pyrmq: pyrmq falls back to the
    # older consistent point, cuts and re-fetches; against 5.3.3 nothing is cut.
    cuts = re.findall(TRUNCATED, ours.log())
    assert [(int(old), int(new)) for old, new in cuts if old != new] == \
        ([(at, cut)] if newest else []), cuts

    assert ours.terminate() == 0
    lost = set(sends.acked) - bodies_in(ours)
    print(f"rocketmq-{java_env.version}: epochs {java_epochs}, first ack of the Java slave after "
          f"its reconnect {first_ack} (cut at {cut}, end {end}), {replicated} bytes identical, "
          f"acked={len(sends.acked)} lost={len(lost)} (slave timeouts: {sends.slave_timeouts}); "
          f"total_s={time.monotonic() - started:.1f} "
          f"({' '.join(steps)})")
    assert not lost


async def lead_new_epoch(controller: PyrmqProcess, broker: JavaServer | PyrmqProcess, at: int,
                    previous: int) -> int:
    """Pause the master until the controller clears it (no live member to elect); resumed, it
    asks to be elected and is, at a new epoch starting at `at` (Java:
    `ReplicasManager.changeToMaster` -> `changeToMasterWhenLastRoleIsMaster`, its HA
    connections kept). The new epoch."""
    with pause(broker):
        await replica_info(controller, lambda i: i.header.master_address is None,
                           what=f"the controller clears the paused master {broker.addr}")
    info = await replica_info(controller, master_is(broker.addr),
                              what=f"{broker.addr} re-elected")
    epoch = info.header.master_epoch
    assert epoch is not None
    assert epoch > previous
    await wait_for(lambda: epochs(broker)[-1] == (epoch, at),
                   what=f"the entry ({epoch}, {at}) of {broker.addr}",
                   diagnostics=lambda: f"epoch file {epochs(broker)}")
    return epoch


async def gone(controller: PyrmqProcess, broker_id: int, since: int) -> None:
    """Wait until the controller has timed out `broker_id`'s heartbeat (after `since` such
    log lines)."""
    await wait_for(lambda: log_count(controller, expired(broker_id)) > since,
                   what=f"the controller sees broker {broker_id} gone")


def expired(broker_id: int) -> str:
    return rf"broker inactive reason=heartbeat timeout \S+ \S+ broker_id={broker_id} "
