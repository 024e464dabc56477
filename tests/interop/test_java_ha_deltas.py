"""The HA differences between the Java releases (docs/README.md "Version differences 5.3.3 ->
5.5.0", rows 1-3), each provoked on a real Java broker of each release, with pyrmq as the peer.

One controller-mode group per test and release: pyrmq's embedded controller (also the name
server; no extra JVM), one Java broker, one pyrmq broker, 1 MiB commitlog files,
`allAckInSyncStateSet=true`. The controller scans every 0.5 s and brokers give up on a silent
controller after 6 s, so a paused broker loses its master role within seconds;
`haHousekeepingInterval` is 20 s (Java's default), so a paused peer keeps its HA connection.

- `test_java_master_new_epoch_and_disconnect` (Java master, pyrmq slave):
  - row 1: the Java master gets a new epoch while it stays master (paused until the controller
    clears the master, then re-elected by its own CONTROLLER_ELECT_MASTER:
    `ReplicasManager.changeToMaster` -> `changeToMasterWhenLastRoleIsMaster`), with its pyrmq
    slave (an async learner, so that the controller cannot elect it) connected throughout. A
    5.5.0 master relabels on the same connection: the pyrmq slave records the new entry from the
    TRANSFER label (ha-protocol §5.4). A 5.3.3 master keeps the old label: the pyrmq slave holds
    the right bytes without the entry, and at its next handshake cuts back to the new epoch's
    start and re-fetches (§7.3). Either way it ends byte-identical with the master's epoch file.
  - row 3: with the controller paused, the pyrmq slave is killed: a 5.5.0 master drops it from
    its SyncStateSet at once (the next allAck send succeeds), a 5.3.3 master waits for the
    controller (FLUSH_SLAVE_TIMEOUT). The pyrmq slave comes back, is re-added (expand) and sends
    that need its ack succeed again; nothing acknowledged is lost.
- `test_pyrmq_master_java_slave_stale_epoch` (pyrmq master, Java slave):
  - row 2: the Java broker leads an epoch in which it writes nothing and is then killed; pyrmq is
    elected (unclean election on: the Java broker was the only SyncStateSet member) at the same
    offset. The Java broker, restarted as pyrmq's slave, cuts at that offset: 5.5.0 keeps its
    stale epoch entry (and so refuses pyrmq's label), 5.3.3 replaces it. At its next reconnect a
    5.5.0 slave cuts back to that offset again (its first ACK, logged by the pyrmq master, is the
    offset, not its end) and re-fetches; the pyrmq master ships from there and the group ends
    byte-identical with nothing acknowledged lost.
  - row 3, pyrmq as master: with the controller paused, the Java slave is killed; pyrmq keeps the
    5.3.3 rule, so an allAck send fails (FLUSH_SLAVE_TIMEOUT) until the controller has applied
    the shrink, then succeeds.

Each prints its cost (noisy single samples on a shared machine, never asserted).
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

from controller_client.client import ControllerClient, ReplicaInfo
from pyrmq_client import BrokerClient, Message
from remoting.codes import ResponseCode
from store.epoch_file import EPOCH_FILE_NAME, parse_epoch_file
from tests.interop.harness import JavaEnv, JavaServer
from tests.interop.network import free_port
from tests.interop.pyrmq_env import COMMITLOG_FILE_BYTES, PyrmqEnv, PyrmqProcess
from tests.interop.test_controller_mode import BROKER_CONF, TOPIC, bodies_in

pytestmark = pytest.mark.interop

BROKER = "broker-a"
START_TIMEOUT_S = 60.0
WAIT_S = 60.0
MESSAGES = 8  # per step: a few records are all any rule here needs
NEWEST = "5.5.0"
CONTROLLER_CONF: dict[str, str | int | bool] = {
    "scanNotActiveBrokerInterval": 500,
    "scanInactiveMasterInterval": 500,
    "inactiveMasterScanDelay": 1000,
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
    """SIGSTOP a process (a JVM: its process group) for the block; SIGCONT after, always."""
    send: Callable[[int, int], None] = os.killpg if group else os.kill
    send(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        send(pid, signal.SIGCONT)


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
    client = ControllerClient((controller.addr,))
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


def master_is(address: str) -> Callable[[ReplicaInfo], bool]:
    return lambda info: info.header.master_address == address


def members_are(*ids: int) -> Callable[[ReplicaInfo], bool]:
    return lambda info: info.sync_state_set.sync_state_set == set(ids)


# -- stores -------------------------------------------------------------------------------------


def store_of(server: JavaServer | PyrmqProcess) -> Path:
    assert server.store_dir is not None
    return server.store_dir


def commitlog(server: JavaServer | PyrmqProcess) -> bytes:
    directory = store_of(server) / "commitlog"
    return b"".join(path.read_bytes() for path in sorted(directory.iterdir()))


def written(log: bytes) -> int:
    """The end of the written range (preallocation is zeros; a record never ends in 0)."""
    return len(log.rstrip(b"\0"))


def epochs(server: JavaServer | PyrmqProcess) -> list[tuple[int, int]]:
    """The (epoch, startOffset) entries of the broker's epoch file."""
    path = store_of(server) / EPOCH_FILE_NAME
    return [(e.epoch, e.start_offset) for e in parse_epoch_file(path.read_bytes(), path=path)]


async def identical(master: JavaServer | PyrmqProcess, slave: JavaServer | PyrmqProcess, *,
                    what: str) -> int:
    """Wait until the slave holds the master's written commitlog byte for byte; its end."""
    deadline = time.monotonic() + WAIT_S
    while True:
        expected, got = commitlog(master), commitlog(slave)
        end = written(expected)
        if got[:end] == expected[:end] and written(got) == end:
            return end
        if time.monotonic() > deadline:
            first = next((i for i in range(min(end, len(got))) if got[i] != expected[i]), None)
            raise AssertionError(f"{what}: master written={end}, slave written={written(got)}, "
                                 f"first differing byte at {first}")
        await asyncio.sleep(0.2)


# -- sends --------------------------------------------------------------------------------------


class Sends:
    """Sync sends to one broker address at a time; `acked` holds every body answered SUCCESS."""

    def __init__(self) -> None:
        self.acked: list[bytes] = []
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
        """`count` sends, each of which must succeed."""
        for _ in range(count):
            code = await self.one(address)
            assert code == ResponseCode.SUCCESS, f"send to {address}: code {code}"


def log_count(process: PyrmqProcess, pattern: str) -> int:
    return len(re.findall(pattern, process.log()))


# -- row 1 and row 3: a Java master, a pyrmq slave ------------------------------------------------


async def test_java_master_new_epoch_and_disconnect(
    java_env: JavaEnv, env: PyrmqEnv,
) -> None:
    started = time.monotonic()
    newest = java_env.version == NEWEST
    controller = env.start_namesrv(name="controller", extra_conf=CONTROLLER_CONF)
    java = start_java(java_env, controller, "java-master")
    info = await replica_info(controller, master_is(java.addr), what="the Java broker master")
    java_id, first_epoch = info.header.master_broker_id, info.header.master_epoch
    assert java_id is not None
    assert first_epoch is not None
    ours = start_pyrmq(env, controller, "pyrmq-learner", async_learner=True)
    sends = Sends()
    await sends.acked_batch(java.addr)
    boundary = await identical(java, ours, what="Java master -> pyrmq slave")
    assert epochs(ours) == epochs(java) == [(first_epoch, 0)]
    disconnects = log_count(ours, "HA client disconnected")

    # Row 1: "still master, new epoch". Paused, the Java master loses its controller lease; the
    # controller clears the master (no other SyncStateSet member); resumed, the broker asks to
    # be elected and is, at a new epoch, without closing its HA connections.
    with paused(java.process.pid, group=True):
        await replica_info(controller, lambda i: i.header.master_address is None,
                           what="the controller clears the paused Java master")
    info = await replica_info(controller, master_is(java.addr), what="the Java broker re-elected")
    new_epoch = info.header.master_epoch
    assert new_epoch is not None
    assert new_epoch > first_epoch
    await wait_for(lambda: epochs(java) == [(first_epoch, 0), (new_epoch, boundary)],
                   what=f"the Java master's entry ({new_epoch}, {boundary})",
                   diagnostics=lambda: f"epoch file {epochs(java)}")
    await sends.acked_batch(java.addr)
    await identical(java, ours, what="after the new epoch")
    assert log_count(ours, "HA client disconnected") == disconnects, "the connection dropped"
    if newest:
        # 5.5.0 relabels on the connection: the slave appends the entry from the label.
        assert epochs(ours) == epochs(java)
    else:
        # 5.3.3 keeps the old label until the slave reconnects.
        assert epochs(ours) == [(first_epoch, 0)]

    # The pyrmq broker restarted as a full member: its handshake settles the epoch file (5.3.3:
    # a cut back to the new epoch's start and a re-fetch), then it joins the SyncStateSet.
    cuts = log_count(ours, "slave truncated")
    assert ours.terminate() == 0
    end_before = written(commitlog(ours))
    ours = start_pyrmq(env, controller, "pyrmq-slave", again=ours)
    info = await replica_info(controller, lambda i: len(i.sync_state_set.sync_state_set) == 2,
                              what="the pyrmq slave in the SyncStateSet")
    (pyrmq_id,) = info.sync_state_set.sync_state_set - {java_id}
    await sends.acked_batch(java.addr)
    await identical(java, ours, what="after the pyrmq slave's reconnect")
    assert epochs(ours) == epochs(java)
    truncations = re.findall(r"slave truncated old_max_phy_offset=(\d+) new_max_phy_offset=(\d+)",
                             ours.log())
    if newest:
        assert all(int(old) == int(new) for old, new in truncations), truncations
    else:
        assert (str(end_before), str(boundary)) in truncations, (cuts, truncations)

    # Row 3: the controller paused, the pyrmq slave killed. 5.5.0 shrinks its local
    # SyncStateSet at once; 5.3.3 waits for the controller's answer.
    with paused(controller.pid):
        ours.kill()
        code = await sends.one(java.addr)
    assert code == (ResponseCode.SUCCESS if newest else FLUSH_SLAVE_TIMEOUT), code
    await replica_info(controller, members_are(java_id), what="the controller applies the shrink")
    ours = start_pyrmq(env, controller, "pyrmq-slave-again", again=ours)
    await replica_info(controller, members_are(java_id, pyrmq_id),
                       what="the pyrmq slave re-added (expand)")
    await sends.acked_batch(java.addr)
    replicated = await identical(java, ours, what="after the pyrmq slave came back")
    assert epochs(ours) == epochs(java)
    assert ours.terminate() == 0
    lost = set(sends.acked) - bodies_in(ours)
    print(f"rocketmq-{java_env.version} Java master, pyrmq slave: epochs {epochs(java)}, "
          f"{replicated} bytes identical, acked={len(sends.acked)} lost={len(lost)}; "
          f"total_s={time.monotonic() - started:.1f}")
    assert not lost


# -- row 2 and row 3: a pyrmq master, a Java slave ------------------------------------------------


async def test_pyrmq_master_java_slave_stale_epoch(
    java_env: JavaEnv, env: PyrmqEnv,
) -> None:
    started = time.monotonic()
    newest = java_env.version == NEWEST
    controller = env.start_namesrv(name="controller", extra_conf={
        **CONTROLLER_CONF, "enableElectUncleanMaster": True})
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
    boundary = await identical(java, ours, what="Java master -> pyrmq slave")

    # The Java broker alone leads a new epoch at `boundary` and writes nothing in it.
    assert ours.terminate() == 0
    await replica_info(controller, members_are(java_id), what="the Java master alone in the set")
    with paused(java.process.pid, group=True):
        await replica_info(controller, lambda i: i.header.master_address is None,
                           what="the controller clears the paused Java master")
    info = await replica_info(controller, master_is(java.addr), what="the Java broker re-elected")
    java_epoch = info.header.master_epoch
    assert java_epoch is not None
    await wait_for(lambda: epochs(java) == [(first_epoch, 0), (java_epoch, boundary)],
                   what=f"the Java master's entry ({java_epoch}, {boundary})",
                   diagnostics=lambda: f"epoch file {epochs(java)}")

    # Killed; pyrmq elected (unclean) at the same offset, under a higher epoch.
    java.process.kill()
    ours = start_pyrmq(env, controller, "pyrmq-b2-master", again=ours)
    info = await replica_info(controller, master_is(ours.addr), what="pyrmq elected")
    our_epoch = info.header.master_epoch
    assert our_epoch is not None
    assert our_epoch > java_epoch
    await wait_for(lambda: epochs(ours) == [(first_epoch, 0), (our_epoch, boundary)],
                   what=f"pyrmq's entry ({our_epoch}, {boundary})",
                   diagnostics=lambda: f"epoch file {epochs(ours)}")
    await sends.acked_batch(ours.addr)

    # The Java broker back as pyrmq's slave: its epoch (java_epoch, boundary) is unknown to the
    # master, so it cuts at `boundary`. 5.5.0 keeps that entry (and so refuses pyrmq's label at
    # the same offset); 5.3.3 drops it and records pyrmq's.
    java = start_java(java_env, controller, "java-b1-slave", again=java)
    await replica_info(controller, members_are(pyrmq_id, java_id),
                       what="the Java slave in the SyncStateSet")
    await sends.acked_batch(ours.addr)
    await identical(ours, java, what="pyrmq master -> Java slave")
    stale = [(first_epoch, 0), (java_epoch, boundary)]
    assert epochs(java) == (stale if newest else epochs(ours)), epochs(java)

    # Row 3 on pyrmq's side: the controller paused, the Java slave killed. pyrmq keeps the 5.3.3
    # rule: an allAck send waits for the slave until the controller has applied the shrink.
    with paused(controller.pid):
        java.process.kill()
        code = await sends.one(ours.addr)
    assert code == FLUSH_SLAVE_TIMEOUT, code
    await replica_info(controller, members_are(pyrmq_id), what="the controller applies the shrink")
    assert await sends.one(ours.addr) == ResponseCode.SUCCESS
    end = written(commitlog(java))

    # The reconnect: a 5.5.0 slave cuts back to `boundary` again (its first ACK) and re-fetches;
    # a 5.3.3 slave resumes at its end. The pyrmq master serves both.
    first_acks = f"HA slave first ack slave_broker_id={java_id} offset=(\\d+)"
    seen = log_count(ours, first_acks)
    java = start_java(java_env, controller, "java-b1-again", again=java)
    await replica_info(controller, members_are(pyrmq_id, java_id),
                       what="the Java slave back in the SyncStateSet")
    await wait_for(lambda: log_count(ours, first_acks) > seen, what="the Java slave's first ack")
    first_ack = int(re.findall(first_acks, ours.log())[seen])
    assert first_ack == (boundary if newest else end), (first_ack, boundary, end)
    await sends.acked_batch(ours.addr)
    replicated = await identical(ours, java, what="after the Java slave's reconnect")
    assert epochs(java) == (stale if newest else epochs(ours)), epochs(java)
    assert ours.terminate() == 0
    lost = set(sends.acked) - bodies_in(ours)
    print(f"rocketmq-{java_env.version} pyrmq master, Java slave: Java epochs {epochs(java)}, "
          f"pyrmq epochs {epochs(ours)}, first ack after reconnect {first_ack} (cut at "
          f"{boundary}, end {end}), {replicated} bytes identical, acked={len(sends.acked)} "
          f"lost={len(lost)}; total_s={time.monotonic() - started:.1f}")
    assert not lost
