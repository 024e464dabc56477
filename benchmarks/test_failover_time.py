"""Controller-mode groups side by side: a pyrmq group under pyrmq's embedded controller against
three Java brokers (Apache RocketMQ NEWEST, 5.5.0) under the Java controller, in one run.

Both groups: three brokers of `broker-a`, enableControllerMode, allAckInSyncStateSet=true and the
same broker settings (`BROKER_CONF` of tests/interop/controller_group.py, 64 MiB commitlog
files), every address 127.0.0.1, every port bound to 0 first. Two sets of timings:
- TUNED: brokers heartbeat every 300 ms with a controller heartbeat timeout of 1.5 s, each
  controller scans every second;
- DEFAULT: RocketMQ's defaults, heartbeat every 1 s, timeout 10 s, scans every 5 s.

What is measured (printed, never asserted: single-digit samples on a shared 2-core machine):
- failover time, from the fault to the first SUCCESS of a probe send (1 s timeout, one on each
  surviving broker every 20 ms) on the new master; min/median/max and the ratio pyrmq/Java of
  the medians (goal <= 1.0):
  - SIGSTOP of the master (a hang, no connection closes), tuned and default timings: probes
    are queued on the stopped master's socket, then it gets SIGCONT and as many probes again;
    what it answers is printed. A pyrmq master's lease (M17) has run out by then: it must
    answer no SUCCESS (asserted, a correctness check). A Java master's SUCCESS, if any, is
    checked against the new master's queue (another body at that offset: acknowledged and
    lost). The resumed broker must rejoin as a slave by itself; one that does not within
    REJOIN_TIMEOUT_S is restarted (printed);
  - kill -9 of the master (tuned timings): the killed broker restarts on its store and port
    for the next trial.
  Every trial reuses the group: the next waits until the controller's SyncStateSet holds all
  three again and the master answers a send (a member still out of the set after HEAL_AFTER_S
  is restarted on its store, printed). Trials of each fault: pyrmq 10 (TRIALS, the issue's
  figure; PYRMQ_FAILOVER_TRIALS sets it), Java 3 (PEER_TRIALS; PYRMQ_FAILOVER_PEER_TRIALS):
  a Java trial costs CI 10-60 s against pyrmq's 0.5-3 s (its boot after each kill, and a
  resumed Java master that does not rejoin by itself), and ten of each would put CI some eight
  minutes over its 30-minute budget.
- replicated produce on the fresh default-timing group (SyncStateSet of three): the Java
  LoadGen of benchmarks/test_broker_throughput.py (16 threads sharing one producer, sync sends of
  1 KiB, 8 queues) against the master: msgs/s and p99, ratio pyrmq/Java (goal >= 1.0). Those
  Java brokers run G1 and C2 with a 1 GiB heap, as in that benchmark (the tuned group's, the
  harness's quick-start JVM). Default timings, not tuned ones: a pyrmq master's lease is half
  the heartbeat timeout (750 ms tuned), and on a host at load average 25-35 a tuned master
  refused 200 of 532 sends with "master lease expired" as its heartbeats came back late (M17
  doing what it should; not a throughput figure).

Order. Tuned timings: the pyrmq group alone (SIGSTOP trials, then kill -9 trials: the restarts
of Java brokers cost most), stopped, then the Java group alone; per-trial lines are printed as
they come. Default timings: the Java group produces alone, then the pyrmq group (the Java group
idle beside it: a handicap for pyrmq, if any), then the SIGSTOP trials run at the same time,
each group on its own thread: the Java group's, and pyrmq's in two groups (the first five
trials in the produce group, the other five in a second group of the same settings, started
then). A default-timing failover is the 10 s heartbeat timeout plus up to a 5 s scan period:
milliseconds of CPU contention are lost in that, while ten sequential trials of each group
would cost CI some six minutes more, and pyrmq's ten in one group some 75 s more (its trials,
about 15 s each, were the longest thread).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from benchmarks.conftest import record
from benchmarks.peers import create_topic, route_ready
from benchmarks.test_broker_throughput import (
    BROKER_HEAP_MB,
    BROKER_JVM_ARGS,
    QUEUES,
    Run,
    run_java_loadgen,
)
from broker.quickstart import replicas_info
from pyrmq_client import BrokerClient, Message
from pyrmq_client.broker_client import PullStatus, SendResult
from pyrmq_client.errors import BrokerClientError
from remoting.codes import ResponseCode
from remoting.errors import RemotingError
from tests.interop.build import NEWEST
from tests.interop.controller_group import BROKER_CONF, CONTROLLER_MAIN, TOPIC
from tests.interop.harness import JavaEnv, _write_properties
from tests.interop.network import free_port, port_accepts
from tests.interop.pyrmq_env import PyrmqEnv

TRIALS: Final = int(os.environ.get("PYRMQ_FAILOVER_TRIALS", "10"))
# Draws the moments of the SIGSTOPs (printed; PYRMQ_SEED replays them).
SEED: Final = int(os.environ.get("PYRMQ_SEED", random.randrange(2**32)))
PEER_TRIALS: Final = int(os.environ.get("PYRMQ_FAILOVER_PEER_TRIALS", "3"))
SETTLE_TIMEOUT_S: Final = 120.0
# pyrmq settles within seconds (see settled_master); a Java member that heals by itself does
# within 1.2-6.1 s (REJOIN_TIMEOUT_S), and one that did not in 30 s was the default-timing run's
# longest thread (2026-12-02): 15 s, then a restart.
HEAL_AFTER_S: Final = 15.0
# pyrmq rejoins in 0.1-1 s; a resumed Java 5.5.0 master in 1.3-6 s when it does (often not).
REJOIN_TIMEOUT_S: Final = 10.0
PROBE_INTERVAL_S: Final = 0.02
PROBE_TIMEOUT_MS: Final = 1000
RESUMED_PROBES: Final = 10  # queued on the stopped master's socket, then as many after SIGCONT
RESUMED_TIMEOUT_MS: Final = 10_000
PRODUCE_TOPIC: Final = "ReplicatedProduce"
PRODUCE_WARMUP_S: Final = 5
PRODUCE_WINDOW_S: Final = 10
COMMITLOG_FILE_BYTES: Final = 64 * 1024 * 1024  # the Java harness's default, for both groups

# The module fixture runs both tuned groups inside the first test; Java broker restarts took
# 45-75 s each on the shared machine (load average 15-22). A safety net, not a measurement.
pytestmark = [pytest.mark.interop, pytest.mark.timeout(900 + 20 * TRIALS + 120 * PEER_TRIALS)]


@dataclass(frozen=True)
class Timings:
    name: str
    broker: Mapping[str, int]
    controller: Mapping[str, int]


TUNED: Final = Timings(
    "tuned: heartbeat 300 ms, timeout 1.5 s, controller scans every 1 s",
    {"brokerHeartbeatInterval": 300, "controllerHeartBeatTimeoutMills": 1500},
    {"scanNotActiveBrokerInterval": 1000, "scanInactiveMasterInterval": 1000})
DEFAULT: Final = Timings(
    "default timings: heartbeat 1 s, timeout 10 s, controller scans every 5 s",
    {"brokerHeartbeatInterval": 1000, "controllerHeartBeatTimeoutMills": 10_000},
    {"scanNotActiveBrokerInterval": 5000, "scanInactiveMasterInterval": 5000})


@dataclass
class Member:
    """One broker of a group, whichever implementation: its pid, kill it, start it again."""

    addr: str
    pid: int
    alive: Callable[[], bool]
    kill: Callable[[], None]
    restart: Callable[[], Member]


@dataclass
class Group:
    controller: str
    namesrv: str
    members: list[Member]
    timings: Timings


@dataclass
class Resumed:
    """What a stopped master answered once resumed, over all trials."""

    answers: Counter[str] = field(default_factory=Counter)
    lost: int = 0  # SUCCESS answers whose message the new master does not hold
    rejoined_s: list[float] = field(default_factory=list)  # its answers to back in the set
    restarted: int = 0  # did not rejoin within REJOIN_TIMEOUT_S: restarted

    def merged(self, other: Resumed) -> Resumed:
        return Resumed(self.answers + other.answers, self.lost + other.lost,
                       self.rejoined_s + other.rejoined_s, self.restarted + other.restarted)

    def describe(self) -> str:
        answers = ", ".join(f"{name} x{count}" for name, count in sorted(self.answers.items()))
        parts = [f"resumed master answered {answers}", f"acknowledged and lost {self.lost}"]
        if self.rejoined_s:
            parts.append(f"{len(self.rejoined_s)} rejoined the SyncStateSet by itself "
                         f"{min(self.rejoined_s):.1f}-{max(self.rejoined_s):.1f} s after "
                         "its answers")
        if self.restarted:
            parts.append(f"{self.restarted} did not within {REJOIN_TIMEOUT_S:.0f} s: restarted")
        return "; ".join(parts)


async def send_ok(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    try:
        async with await BrokerClient.connect(host, int(port)) as client:
            result = await client.send(Message(TOPIC, b"failover-probe"), producer_group="fo",
                                       queue_id=0, timeout_ms=PROBE_TIMEOUT_MS)
    except (BrokerClientError, RemotingError, OSError):
        return False
    return result.code == ResponseCode.SUCCESS


async def settled(group: Group, timeout_s: float = SETTLE_TIMEOUT_S) -> Member | None:
    """Wait until the controller's SyncStateSet holds all three and its master answers a send;
    the master, or None when `timeout_s` passed first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = await replicas_info(group.controller)
        if info is not None and len(info.in_sync_replicas) == len(group.members):
            master = next((m for m in group.members if m.addr == info.master_address), None)
            if master is not None and await send_ok(master.addr):
                return master
        await asyncio.sleep(0.1)
    return None


async def settled_master(group: Group, name: str) -> Member:
    """The master of the settled group. A group still unsettled after HEAL_AFTER_S has each
    member that is out of the SyncStateSet restarted on its store (printed: it did not heal by
    itself; a resumed Java 5.5.0 master once stayed out for minutes), then SETTLE_TIMEOUT_S more."""
    master = await settled(group, HEAL_AFTER_S)
    if master is None:
        info = await replicas_info(group.controller)
        in_sync = {r.broker_address for r in info.in_sync_replicas} if info is not None else set()
        for member in [m for m in group.members if m.addr not in in_sync]:
            print(f"{name}: {member.addr} still out of the SyncStateSet after {HEAL_AFTER_S:.0f} s:"
                  " restarted", flush=True)
            member.kill()
            group.members[group.members.index(member)] = member.restart()
        master = await settled(group)
    if master is None:
        raise AssertionError(f"the group did not settle: {await replicas_info(group.controller)}")
    return master


async def first_success_s(others: Sequence[Member], fault_at: float) -> float:
    """Probe every surviving broker until one answers SUCCESS; seconds since `fault_at`."""
    deadline = fault_at + SETTLE_TIMEOUT_S
    while not any([await send_ok(m.addr) for m in others if m.alive()]):
        assert time.monotonic() < deadline, "no new master answered a send"
        await asyncio.sleep(PROBE_INTERVAL_S)
    return time.monotonic() - fault_at


async def kill_trials(group: Group, count: int, name: str) -> list[float]:
    """The last trial's broker stays dead (nothing follows: one restart less)."""
    times: list[float] = []
    for trial in range(count):
        master = await settled_master(group, name)
        others = [m for m in group.members if m is not master]
        killed_at = time.monotonic()
        master.kill()
        times.append(await first_success_s(others, killed_at))
        print(f"{name}: kill -9 trial {trial + 1}: {times[-1]:.3f} s", flush=True)
        if trial + 1 < count:
            restarted = master.restart()  # on this thread: a child dies with its starter
            group.members[group.members.index(master)] = restarted
    return times


def code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


def answer_name(result: object) -> str:
    """SUCCESS, a stored-but-unconfirmed code, a refusal's code, or the client's error."""
    if isinstance(result, SendResult):
        return code_name(result.code)
    if isinstance(result, BrokerClientError):
        return code_name(result.code)
    return type(result).__name__


async def holds(addr: str, queue_offset: int, body: bytes) -> bool:
    """Whether the broker at `addr` serves `body` at `queue_offset` of TOPIC queue 0."""
    host, port = addr.rsplit(":", 1)
    async with await BrokerClient.connect(host, int(port)) as client:
        pulled = await client.pull("failover-check", TOPIC, 0, queue_offset, max_nums=1)
    return pulled.status is PullStatus.FOUND and any(m.body == body for m in pulled.messages)


async def probe(client: BrokerClient, body: bytes, acked: list[tuple[bytes, int]]) -> object:
    """One send to a resumed master: its result or error; a SUCCESS is added to `acked`."""
    try:
        result = await client.send(Message(TOPIC, body), producer_group="fo", queue_id=0,
                                   timeout_ms=RESUMED_TIMEOUT_MS)
    except (BrokerClientError, RemotingError, OSError) as err:
        return err
    if result.code == ResponseCode.SUCCESS:
        acked.append((body, result.queue_offset))
    return result


async def resume(master: Member, acked: list[tuple[bytes, int]]) -> list[object]:
    """RESUMED_PROBES sends queued on the stopped master's socket, SIGCONT, as many again."""
    host, port = master.addr.rsplit(":", 1)
    bodies = iter(f"resumed-{master.pid}-{time.monotonic_ns()}-{i}".encode()
                  for i in range(2 * RESUMED_PROBES))
    async with await BrokerClient.connect(host, int(port)) as client:
        queued = [asyncio.create_task(probe(client, next(bodies), acked))
                  for _ in range(RESUMED_PROBES)]
        await asyncio.sleep(0.05)
        os.kill(master.pid, signal.SIGCONT)
        answers = list(await asyncio.gather(*queued))
        answers += await asyncio.gather(*(probe(client, body, acked) for body in bodies))
    return answers


def scan_phases(timings: Timings, first: int, count: int) -> list[float]:
    """Trials `first` to `first + count - 1` of SEED's draws: when in the controller's scan
    period each stop comes (the same draws for every group)."""
    scan_s = timings.controller["scanNotActiveBrokerInterval"] / 1000
    draws = random.Random(SEED)
    return [draws.uniform(0, scan_s) for _ in range(first + count)][first:]


async def sigstop_trials(group: Group, count: int, resumed: Resumed, name: str,
                         first: int = 0) -> list[float]:
    """Trials `first` to `first + count - 1`: each stop comes at a random moment of the
    controller's scan period (`scan_phases`). A trial begins when the previous one has
    settled, at much the same point of a scan every time: ten default-timing trials of a
    controller that found expired heartbeats at its 5 s scan (pyrmq's, before it checked at
    each deadline) were 13.9-14.9 s but one, the scan's phase measured rather than the
    failover. The Java group's were 12.6-13.1 s with and without this."""
    times: list[float] = []
    for trial, phase in enumerate(scan_phases(group.timings, first, count), start=first):
        master = await settled_master(group, name)
        others = [m for m in group.members if m is not master]
        await asyncio.sleep(phase)
        os.kill(master.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        acked: list[tuple[bytes, int]] = []
        try:
            times.append(await first_success_s(others, stopped_at))
            answers = await resume(master, acked)
        finally:
            os.kill(master.pid, signal.SIGCONT)
        resumed_at = time.monotonic()
        resumed.answers.update(answer_name(a) for a in answers)
        if await settled(group, REJOIN_TIMEOUT_S) is None:
            resumed.restarted += 1
            master.kill()
            restarted = master.restart()  # on this thread: a child dies with its starter
            group.members[group.members.index(master)] = restarted
        else:
            resumed.rejoined_s.append(time.monotonic() - resumed_at)
        new_master = await settled_master(group, name)
        lost = [body for body, offset in acked if not await holds(new_master.addr, offset, body)]
        resumed.lost += len(lost)
        print(f"{name}: SIGSTOP trial {trial + 1}: {times[-1]:.3f} s, resumed master answered "
              f"{sorted(Counter(answer_name(a) for a in answers).items())}, acknowledged and "
              f"lost {len(lost)}", flush=True)
    return times


def pyrmq_group(env: PyrmqEnv, base: Path, timings: Timings) -> Group:
    controller = env.start_namesrv(name="controller", store_dir=base / "controller-store",
                                   extra_conf=dict(timings.controller))
    conf = {**BROKER_CONF, **timings.broker, "controllerAddr": controller.addr,
            "mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES,
            "mappedFileSizeConsumeQueue": 300_000 * 20}

    def start(name: str, store_dir: Path | None = None, port: int | None = None) -> Member:
        process = env.start_broker(controller, name=name, store_dir=store_dir, listen_port=port,
                                   timeout_s=SETTLE_TIMEOUT_S,
                                   extra_conf={**conf, "haListenPort": free_port()})
        return Member(process.addr, process.pid, process.alive, process.kill,
                      lambda: start(name, process.store_dir, process.port))

    return Group(controller.addr, controller.addr, [start(f"b{i}") for i in (1, 2, 3)], timings)


def java_controller(env: JavaEnv, work_dir: Path, timings: Timings) -> str:
    """One ControllerStartup node (DLedger, as tests/interop/controller_group.py starts it)
    scanning at `timings`; its remoting address."""
    port = free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    conf = _write_properties(work_dir / "controller.conf", {
        "controllerType": "DLedger",
        "controllerDLegerGroup": "pyrmq",
        "controllerDLegerPeers": f"n0-127.0.0.1:{port}",
        "controllerDLegerSelfId": "n0",
        "controllerStorePath": str(work_dir / "store"),
        **timings.controller,
    })
    process = env.start_java(CONTROLLER_MAIN, ["-c", str(conf)], name="controller",
                             jvm_args=("--add-opens", "java.base/java.lang=ALL-UNNAMED"))
    addr = f"127.0.0.1:{port}"
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not port_accepts(addr):
        if not process.alive() or time.monotonic() > deadline:
            raise AssertionError(f"controller did not listen on {addr}\n{process.diagnostics()}")
        time.sleep(0.2)
    return addr


def java_group(env: JavaEnv, base: Path, timings: Timings, *, tuned_jvm: bool) -> Group:
    controller = java_controller(env, base / "controller", timings)
    namesrv = env.start_java_namesrv()
    conf = {**BROKER_CONF, **timings.broker, "controllerAddr": controller,
            "brokerIP1": "127.0.0.1", "mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES}
    jvm: dict[str, object] = ({"heap_mb": BROKER_HEAP_MB, "jvm_args": BROKER_JVM_ARGS}
                              if tuned_jvm else {})

    def start(name: str, store_dir: Path | None = None, port: int | None = None) -> Member:
        server = env.start_java_broker(namesrv, listen_port=port, store_dir=store_dir,
                                       extra_conf=conf, name=name, timeout_s=SETTLE_TIMEOUT_S,
                                       **jvm)  # type: ignore[arg-type]
        port_now = int(server.addr.rsplit(":", 1)[1])
        return Member(server.addr, server.process.pid, server.process.alive,
                      server.process.kill, lambda: start(name, server.store_dir, port_now))

    return Group(controller, namesrv.addr, [start(f"b{i}") for i in (1, 2, 3)], timings)


def produce(java: JavaEnv, group: Group, name: str) -> Run:
    """The Java LoadGen's sync sends against the group's master (SyncStateSet of three)."""

    async def prepare() -> Member:
        master = await settled_master(group, name)
        await create_topic(master.addr, PRODUCE_TOPIC, queues=QUEUES)
        async with asyncio.timeout(SETTLE_TIMEOUT_S):
            while not await route_ready(group.namesrv, PRODUCE_TOPIC):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        return master

    master = asyncio.run(prepare())
    return run_java_loadgen(java, group.namesrv, master.pid, PRODUCE_TOPIC, "sync",
                            f"loadgen-{name}", {"warmup-s": PRODUCE_WARMUP_S,
                                                "duration-s": PRODUCE_WINDOW_S})


@dataclass
class Figures:
    """One group's figures; `seconds` is the wall time of its run, start to stop (default
    timings: of both groups' run together)."""

    kill: list[float]
    stop: list[float]
    resumed: Resumed
    produce: Run | None
    seconds: float


def measure(group: Group, name: str, *, kills: int, stops: int
            ) -> tuple[list[float], list[float], Resumed]:
    """SIGSTOP trials, then kill -9 trials (the restarts cost most)."""
    resumed = Resumed()
    stopped = asyncio.run(sigstop_trials(group, stops, resumed, name))
    killed = asyncio.run(kill_trials(group, kills, name))
    return killed, stopped, resumed


def run_tuned(base: Path) -> tuple[Figures, Figures]:
    """TUNED: the pyrmq group, stopped, then the Java group (the harness's quick-start JVM:
    serial GC, C1), each measured alone."""
    with JavaEnv.of_version(NEWEST, base / "java") as java:
        started = time.monotonic()
        with PyrmqEnv(base / "pyrmq") as env:
            group = pyrmq_group(env, base / "pyrmq", TUNED)
            ours = Figures(*measure(group, "pyrmq", kills=TRIALS, stops=TRIALS), produce=None,
                           seconds=0.0)
        ours.seconds = time.monotonic() - started
        started = time.monotonic()
        group = java_group(java, base / "java", TUNED, tuned_jvm=False)
        theirs = Figures(*measure(group, "java", kills=PEER_TRIALS, stops=PEER_TRIALS),
                         produce=None, seconds=0.0)
    theirs.seconds = time.monotonic() - started
    return ours, theirs


def sigstop_side_by_side(groups: Sequence[tuple[Group, str, int, int]]
                         ) -> list[tuple[list[float], Resumed]]:
    """The SIGSTOP trials of each (group, name, first trial, trials), each on a thread of its
    own, all at the same time. The threads live until every group is done: a broker restarted
    on one dies with it (PR_SET_PDEATHSIG)."""

    def trials_of(group: Group, name: str, first: int, count: int
                  ) -> tuple[list[float], Resumed]:
        resumed = Resumed()
        return asyncio.run(sigstop_trials(group, count, resumed, name, first)), resumed

    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        running = [pool.submit(trials_of, *group) for group in groups]
        return [future.result() for future in running]


def run_default(base: Path) -> tuple[Figures, Figures]:
    """DEFAULT: the Java group (G1 and C2 with a 1 GiB heap, as in
    benchmarks/test_broker_throughput.py) produces alone, then the pyrmq group beside the idle
    Java group; then the SIGSTOP trials side by side: the Java group's, and pyrmq's in two
    groups of the same settings (the produce group and a second one), half the trials each."""
    started = time.monotonic()
    with JavaEnv.of_version(NEWEST, base / "java") as java:
        java_side = java_group(java, base / "java", DEFAULT, tuned_jvm=True)
        theirs_produced = produce(java, java_side, "java")
        print(f"java: produce {theirs_produced.describe('java', 'master')}", flush=True)
        with PyrmqEnv(base / "pyrmq") as env, PyrmqEnv(base / "pyrmq-2") as env_2:
            our_side = pyrmq_group(env, base / "pyrmq", DEFAULT)
            ours_produced = produce(java, our_side, "pyrmq")
            print(f"pyrmq: produce {ours_produced.describe('pyrmq', 'master')}", flush=True)
            our_second = pyrmq_group(env_2, base / "pyrmq-2", DEFAULT)
            half = (TRIALS + 1) // 2
            (stops, resumed), (stops_2, resumed_2), (their_stops, their_resumed) = \
                sigstop_side_by_side([(our_side, "pyrmq", 0, half),
                                      (our_second, "pyrmq group 2", half, TRIALS - half),
                                      (java_side, "java", 0, PEER_TRIALS)])
    seconds = time.monotonic() - started
    return (Figures([], stops + stops_2, resumed.merged(resumed_2), ours_produced, seconds),
            Figures([], their_stops, their_resumed, theirs_produced, seconds))


def describe(times: list[float]) -> str:
    return (f"min {min(times):.3f} s, median {statistics.median(times):.3f} s, "
            f"max {max(times):.3f} s over {len(times)} trials")


def record_failover(what: str, ours: list[float], theirs: list[float]) -> None:
    ratio = statistics.median(ours) / statistics.median(theirs)
    record(f"failover after {what} (fault to the first SUCCESS on the new master), "
           "3 brokers, allAckInSyncStateSet:")
    record(f"    pyrmq group, embedded controller: {describe(ours)}")
    record(f"    RocketMQ {NEWEST} group, Java controller: {describe(theirs)}")
    record(f"    ratio pyrmq/Java of the medians: {ratio:.2f} (goal <= 1.0; noisy host)")


def record_sigstop(what: str, ours: Figures, theirs: Figures) -> None:
    record_failover(what, ours.stop, theirs.stop)
    record(f"    each stop at a random moment of the scan period, the same moments for both groups "
           f"(PYRMQ_SEED={SEED} replays them)")
    record(f"    pyrmq: {ours.resumed.describe()}")
    record(f"    RocketMQ {NEWEST}: {theirs.resumed.describe()}")
    # M17: the lease ran out while it was stopped; a definite refusal, never a SUCCESS.
    assert "SUCCESS" not in ours.resumed.answers, ours.resumed.describe()
    assert ours.resumed.lost == 0


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Figures, Figures]:
    """Both groups with TUNED timings: SIGSTOP trials, then kill -9 trials."""
    ours, theirs = run_tuned(tmp_path_factory.mktemp("failover-tuned"))
    record(f"controller-mode groups, {TUNED.name}, SIGSTOP and kill -9 trials: {TRIALS} each "
           f"in {ours.seconds:.0f} s for pyrmq, {PEER_TRIALS} each in {theirs.seconds:.0f} s "
           f"for RocketMQ {NEWEST}")
    return ours, theirs


@pytest.fixture(scope="module")
def default_timings(tmp_path_factory: pytest.TempPathFactory) -> tuple[Figures, Figures]:
    """Both groups with DEFAULT timings: replicated produce, then SIGSTOP trials side by side."""
    ours, theirs = run_default(tmp_path_factory.mktemp("failover-default"))
    record(f"controller-mode groups, {DEFAULT.name}: produce each, then SIGSTOP trials ({TRIALS} "
           f"pyrmq in two groups, {PEER_TRIALS} RocketMQ {NEWEST}) side by side, "
           f"{ours.seconds:.0f} s")
    return ours, theirs


def test_failover_time_after_kill_9_of_the_master(tuned: tuple[Figures, Figures]) -> None:
    ours, theirs = tuned
    record_failover(f"kill -9 of the master, {TUNED.name}", ours.kill, theirs.kill)


def test_failover_time_after_sigstop_of_the_master_tuned(tuned: tuple[Figures, Figures]
                                                         ) -> None:
    ours, theirs = tuned
    record_sigstop(f"SIGSTOP of the master, {TUNED.name}", ours, theirs)


def test_failover_time_after_sigstop_of_the_master_default_timings(
    default_timings: tuple[Figures, Figures],
) -> None:
    ours, theirs = default_timings
    record_sigstop(f"SIGSTOP of the master, {DEFAULT.name}", ours, theirs)


def p99_ms(run: Run) -> float:
    value = run.result["p99_ms"]
    return float("nan") if value is None else float(value)  # type: ignore[arg-type]


def test_replicated_produce(default_timings: tuple[Figures, Figures]) -> None:
    ours, theirs = (figures.produce for figures in default_timings)
    assert ours is not None
    assert theirs is not None
    record(f"replicated produce, allAckInSyncStateSet, 3 brokers ({DEFAULT.name}), Java "
           "LoadGen sync sends of 1 KiB to 8 queues, 16 threads sharing one producer:")
    record(f"    {ours.describe('pyrmq', 'master')}")
    record(f"    {theirs.describe(f'RocketMQ {NEWEST}', 'master')}")
    record(f"    ratio pyrmq/Java: {ours.msgs_per_s / theirs.msgs_per_s:.2f} of the msgs/s "
           f"(goal >= 1.0; noisy host), {p99_ms(ours) / p99_ms(theirs):.2f} of the p99")
    # Client-side send errors (a timeout on a loaded host) are printed in each line above, not
    # asserted: a sync send that timed out was not counted as acknowledged by anyone.
    for run in (ours, theirs):  # after the figures: a failed run still prints them
        assert run.result["messages"], "a run measured nothing"
