"""Tail latency under a steady open-loop load: pyrmq against Apache RocketMQ 5.5.0, in one run.

The shape of the OpenMessaging Benchmark's standard RocketMQ workload (issue 16): one topic of
16 queues, 1 KiB messages, one producer sending at a fixed rate with the client's autoBatch on
(asynchronous sends, as that driver does), one push consumer; standalone brokers with
ASYNC_FLUSH, 1 GiB commitlog files. The load generator is tests/interop/java/.../LatencyBench.java
on the stock RocketMQ 5.5.0 Java client, the same for both brokers, at a lower CPU weight than
theirs (LOAD_GENERATOR_NICE): open loop (message i is due at i / rate seconds, whatever the
broker does), latencies in HdrHistograms:
- publish: the send call to its callback (the broker's acknowledgement);
- end-to-end: the send call to the push consumer's listener (same JVM, same clock).

Each broker is measured at each rate of RATES: WARMUP_S of warm-up (its first RAMP_S a linear
ramp from a tenth of the rate up to it, so that a cold client JVM does not start behind), then
WINDOW_S measured at the full rate (DRAIN_S more for the consumer to receive what the window
sent); the broker not measured (and its name server) is paused meanwhile. Before the first rate
each broker has one unmeasured warm-up run (PRIMING), as the OpenMessaging Benchmark's brokers
are long-running ones: a Java broker's first load ever (its JIT cold, its commitlog file new)
fell behind at 20,000 msg/s on a slow host until every send timed out, then held 30,000 and
45,000 (2026-12-02). Printed per rate:
p50, p99, p99.9 and max of both latencies for each broker and their ratios pyrmq/Java (below 1:
pyrmq is faster), the CPU each broker used, what the whole machine used (and its busiest
processes), and pyrmq's event-loop stalls over 10 ms during its window, with their causes, from
its loop monitor's log (broker/loop_monitor.py). The host at times stops the whole VM, or one
vCPU, without counting it as steal: probes on every CPU measure that through both windows
(benchmarks/host_pauses.py), each window's pauses are printed, and each stall says how much of
it the VM was paused and how long the CPU its line names (the loop thread's at the stall's end)
was stopped (the stall's length less the larger is what the machine, not the host, took).
The goal's count of stalls (README, "How the stall goals are judged") takes from each the largest
of those, the loop thread's waits for a CPU (its line's `runqueue_wait_ms`; the load generator
shares this machine's two CPUs with the broker, which the OpenMessaging Benchmark's does not)
and, in a `blocked` stall, the stops of the CPUs of the threads that were runnable while the
loop waited for the GIL (its line's `runnable_while_loop_waited`), up to the loop's time off
its CPU. The same probes time a fixed piece of work: each window and each stall also says how
fast the host ran the VM's CPUs meanwhile (at times one runs at half speed for seconds).
No time is asserted; a run must only measure something (a broker that did not keep up is
printed as NOT MEASURED, with its counts; one whose window has not closed a minute after it was
due is printed as DID NOT HOLD the rate, with the broker CPU it used meanwhile): at its lowest
rate at least one broker must have had sends acknowledged and consumed, and a higher rate that
neither broker held after that is printed as NEITHER HELD, this machine's limit.
Cost: about 2 x (WARMUP_S + WINDOW_S + ~10 s) per rate plus start-up and the two warm-up runs,
~5 minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from benchmarks.conftest import record
from benchmarks.cpu_intervals import CpuSample, CpuSampler, CpuShares, shares_between
from benchmarks.host_pauses import (
    SLOW_SPEED,
    HostPauseProbes,
    HostRecords,
    Pause,
    Speed,
    paused_within,
    speed_text,
    summary,
)
from benchmarks.peers import (
    busiest,
    cpu_seconds_by_process,
    create_topic,
    last_json_line,
    machine_busy_seconds,
    paused,
    process_cpu_seconds,
    route_ready,
    steal_seconds,
)
from tests.interop.harness import (
    CLIENT_SYSPROPS,
    NEWEST,
    InteropError,
    InteropSetupError,
    JavaEnv,
    JavaServer,
)
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

# PYRMQ_LATENCY_RATES="20000,50000" measures other rates. CI runs 20,000 (the lower rate)
# and 45,000: the 50,000 "or the highest rate Java holds here". Measured on the project's
# 2-core machine (2026-11-27, quiet, the warm-up ramp in place): RocketMQ 5.5.0 held 35,000 and
# 45,000 (every message acknowledged and consumed, the load generator at most 20 ms behind its
# schedule); at 50,000 its load generator fell 22 s behind within the warm-up and collapsed into
# send timeouts (its JVM at 184 % CPU, the Java broker at 11 %), while pyrmq held 50,000.
RATES: Final = tuple(
    int(rate) for rate in os.environ.get("PYRMQ_LATENCY_RATES", "20000,45000").split(",")
)
QUEUES: Final = 16
BODY_BYTES: Final = 1024
# The OpenMessaging Benchmark warms up for a minute; CI's budget allows less. With 10 s (5 s at
# the full rate; a fresh client JVM per window), the 5 s just before the window still had publish
# p99 2-6 times the window's (Java's in 8 of 8 windows, pyrmq's in 5 of 8; 2026-11-29, 4 runs),
# and in 3 of the 16 windows that spilled into their first 5 s (maxima of 67-73 ms against
# 22-43 in the rest of the window).
WARMUP_S: Final = 15
RAMP_S: Final = 5
WINDOW_S: Final = 30
DRAIN_S: Final = 5
REPORT_S: Final = 5
# Each broker's warm-up run (on a topic of its own so that no measured consumer reads its
# messages): its figures are printed, never judged. Its rate is the lowest measured, at most
# 20,000 msg/s: a cold Java broker's first load at 30,000 or 45,000 collapsed into send
# timeouts in the warm-up run itself and again in the window after it; at 20,000 it held.
# One warm-up run is not always enough: started at 45,000 (`PYRMQ_LATENCY_RATES=45000`), the
# Java broker acked every warm-up send and still collapsed in its window (2026-12-02); after
# CI's measured 20,000 run it held 45,000 in 5 of 5 runs that day.
PRIMING: Final[dict[str, int | str]] = {"warmup-s": 10, "ramp-s": 5, "duration-s": 5,
                                        "drain-s": 1}
PRIMING_RATE: Final = min(20_000, *RATES)
PRIMING_TOPIC: Final = "LatencyWarmUp"
RUN_EXTRA_S: Final = 60.0  # JVM start-up and shut-down beyond the windows
STALL_THRESHOLD_MS: Final = 10
# The rates of this run at which at least one broker had sends acknowledged and consumed.
MEASURED_RATES: Final[set[int]] = set()
STALLS_SHOWN: Final = 5  # the figures of the first few stalls in the window, one line each
COMMITLOG_FILE_BYTES: Final = 1024 * 1024 * 1024
LATENCY_MAIN: Final = "pyrmq.interop.LatencyBench"
# runbroker.sh's G1 and full JIT over the harness's quick-start flags (as the throughput bench).
JAVA_BROKER_HEAP_MB: Final = 1024
JVM_ARGS: Final = ("-XX:-UseSerialGC", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=4")
# Room for the client to hold a backlog when a broker falls behind (512 MiB ran out).
CLIENT_HEAP_MB: Final = 1024
# The load generator is the harness, not the system measured, yet on this 2-core machine it
# shares the CPUs with the broker (the OpenMessaging Benchmark runs its workers on hosts of their
# own). At the same CPU weight the broker's event loop waited behind its JIT compiler and Netty
# threads (the loop's stalls over 10 ms, all `not_scheduled`): at nice 10 (its session's too),
# for both brokers alike, it gives way to the broker. See docs/benchmark-history.md, the
# thirteenth session.
LOAD_GENERATOR_NICE: Final = 10
JAVA_BROKER_CONF: Final[dict[str, str | int | bool]] = {
    "mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES,
    "flushDiskType": "ASYNC_FLUSH",
    "brokerRole": "ASYNC_MASTER",
}
PYRMQ_BROKER_CONF: Final[dict[str, str | int | bool]] = {
    **JAVA_BROKER_CONF,
    "mappedFileSizeConsumeQueue": 300_000 * 20,
    "eventLoopStallThresholdMs": STALL_THRESHOLD_MS,
}
_STALL: Final = re.compile(
    r"event loop stall lag_ms=([\d.]+) cause=(\w+) (.*?) end_unix_s=([\d.]+) samples=\d+ "
    r"running=(.*)$")
_CPU: Final = re.compile(r"\bcpu=(\d+)\b")  # in the stall's figures: the loop thread's CPU
_RUNQUEUE_WAIT: Final = re.compile(r"\brunqueue_wait_ms=([\d.]+)")  # its waits for a CPU
_ON_CPU: Final = re.compile(r"\bon_cpu_ms=([\d.]+)")
# The threads runnable while the loop waited in futex_do_wait (for the GIL or a lock), each
# with the CPU it was on: `name@cpu/rounds,...` (the monitor's kernel sampler).
_RUNNABLE: Final = re.compile(r"\brunnable_while_loop_waited=(\S+)")
_RUNNABLE_CPU: Final = re.compile(r"@(\d+)/\d+")


def topic_of(rate: int) -> str:
    return f"Latency{rate}"


@dataclass(frozen=True, slots=True)
class Brokers:
    java_env: JavaEnv
    java_namesrv: JavaServer
    java_broker: JavaServer
    pyrmq_namesrv: PyrmqProcess
    pyrmq_broker: PyrmqProcess
    host_pauses: HostPauseProbes


@dataclass(frozen=True, slots=True)
class Latencies:
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    @classmethod
    def of(cls, value: object) -> Latencies | None:
        """The four figures, or None when nothing was measured (no acknowledgement, nothing
        consumed: the broker or this machine did not keep up)."""
        if not isinstance(value, dict):
            return None
        return cls(*(float(value[key]) for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms")))

    @staticmethod
    def text(latencies: Latencies | None) -> str:
        if latencies is None:
            return "NOT MEASURED"
        return (f"{latencies.p50_ms:.1f} / {latencies.p99_ms:.1f} / {latencies.p999_ms:.1f} / "
                f"{latencies.max_ms:.1f}")

    @staticmethod
    def ratio_text(ours: Latencies | None, peer: Latencies | None) -> str:
        return "-" if ours is None or peer is None else ours.ratios(peer)

    def ratios(self, peer: Latencies) -> str:
        pairs = zip(
            (self.p50_ms, self.p99_ms, self.p999_ms, self.max_ms),
            (peer.p50_ms, peer.p99_ms, peer.p999_ms, peer.max_ms), strict=True,
        )
        return " / ".join(f"{ours / max(theirs, 1e-3):.2f}" for ours, theirs in pairs)


@dataclass(frozen=True, slots=True)
class Run:
    result: dict[str, object]
    broker_cpu_pct: float
    intervals: list[str]
    # The broker's log written during the measured window (pyrmq: its stall reports).
    window_log: str
    # What the whole machine did over the window: busy % of all cores and the busiest
    # processes (a run that measured nothing says whether something else took the CPU).
    machine: str = ""
    # False: the window had not closed by its deadline (the broker, or the load generator
    # with it, fell behind the rate); the run is reported as not holding the rate.
    held: bool = True
    # The window in wall-clock time (to line it up with the host's pauses).
    window_unix_s: tuple[float, float] = (0.0, 0.0)
    # The CPU samples taken through the run, and the monotonic time of the load generator's
    # time 0 (its INTERVAL lines count from it): the window opened WARMUP_S after it.
    cpu_samples: tuple[CpuSample, ...] = ()
    clock_start_s: float = 0.0

    @property
    def publish(self) -> Latencies | None:
        return Latencies.of(self.result.get("publish"))

    @property
    def e2e(self) -> Latencies | None:
        return Latencies.of(self.result.get("e2e"))

    def interval_shares(self, line: str) -> CpuShares | None:
        """Where the CPU went in the REPORT_S seconds an INTERVAL line covers."""
        end_s = self.clock_start_s + float(line.split()[1])
        return shares_between(self.cpu_samples, end_s - REPORT_S, end_s)

    def window_intervals(self) -> list[tuple[float, float, CpuShares | None]]:
        """The measured window's intervals: (their end in s from the load generator's time 0,
        publish p99 ms, the CPU shares)."""
        out = []
        for line in self.intervals:
            fields = line.split()
            end_s, publish_p99_ms = float(fields[1]), float(fields[2])
            if WARMUP_S < end_s <= WARMUP_S + WINDOW_S:
                out.append((end_s, publish_p99_ms, self.interval_shares(line)))
        return out

    def cpu_text(self) -> str:
        """The window's slowest interval (highest publish p99) with its CPU shares, and the
        range of the loop thread's time on a CPU over the window's intervals."""
        intervals = self.window_intervals()
        if not intervals:
            return "no interval measured"
        end_s, p99_ms, shares = max(intervals, key=lambda interval: interval[1])
        text = (f"its slowest {REPORT_S} s interval (to t={end_s:.0f} s, publish p99 "
                f"{p99_ms:.1f} ms): {'not sampled' if shares is None else shares.text()}")
        loop = [shares.loop_on_cpu for _, _, shares in intervals
                if shares is not None and shares.loop_on_cpu is not None]
        if loop:
            text += (f"; the loop on a CPU {100 * min(loop):.0f}-{100 * max(loop):.0f} % "
                     "in its intervals")
        return text

    def counts(self) -> str:
        if not self.held:
            return (f"DID NOT HOLD the rate: its {WINDOW_S} s window had not closed "
                    f"{RUN_EXTRA_S:.0f} s after it was due; {self.machine}")
        r = self.result
        return (f"sent {r['sent']:,}, acked {r['acked']:,}, received {r['received']:,}, "
                f"errors {r['send_errors']}, missing {r['missing']}, client behind schedule "
                f"at most {float(r['behind_max_ms']):.0f} ms, "  # type: ignore[arg-type]
                # The load generator shares the 2 cores: its CPU says when the machine, not
                # the broker, is the limit.
                f"load generator CPU {float(r['client_cpu_pct']):.0f} %; "  # type: ignore[arg-type]
                f"{self.machine}")


def _remove_stored_data(base: Path) -> None:
    for pattern in ("pyrmq/*/store", "java/*/store"):
        for path in base.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)


async def _create_topics(broker: str, namesrv: str) -> None:
    topics = [PRIMING_TOPIC, *(topic_of(rate) for rate in RATES)]
    for topic in topics:
        await create_topic(broker, topic, queues=QUEUES)
    async with asyncio.timeout(30):
        for topic in topics:
            while not await route_ready(namesrv, topic):  # noqa: ASYNC110
                await asyncio.sleep(0.05)


def _prime(brokers: Brokers) -> str:
    """One unmeasured run per broker at PRIMING_RATE, the other broker paused: what each
    acknowledged of what it was sent."""
    rate = PRIMING_RATE
    runs = []
    for name, namesrv, pid, others in (
        ("pyrmq", brokers.pyrmq_namesrv.addr, brokers.pyrmq_broker.pid,
         (brokers.java_namesrv.process.pid, brokers.java_broker.process.pid)),
        ("java", brokers.java_namesrv.addr, brokers.java_broker.process.pid,
         (brokers.pyrmq_namesrv.pid, brokers.pyrmq_broker.pid)),
    ):
        with paused(others):
            run = run_latency_bench(brokers.java_env, namesrv, pid, PRIMING_TOPIC, rate,
                                    f"{name}-warm-up", options=PRIMING)
        counts = (f"acked {run.result.get('acked', 0):,} of {run.result.get('sent', 0):,} "
                  f"sent" if run.held else "did not hold the rate")
        runs.append(f"{name} {counts} (broker CPU {run.broker_cpu_pct:.0f} %)")
    return f"warm-up runs at {rate:,} msg/s, not measured: " + "; ".join(runs)


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    base = tmp_path_factory.mktemp("latency-bench")
    with contextlib.ExitStack() as stack:
        stack.callback(_remove_stored_data, base)
        host_pauses = stack.enter_context(HostPauseProbes(base))
        pyrmq_env = stack.enter_context(PyrmqEnv(base / "pyrmq"))
        pyrmq_namesrv = pyrmq_env.start_namesrv()
        pyrmq_broker = pyrmq_env.start_broker(pyrmq_namesrv, extra_conf=PYRMQ_BROKER_CONF)
        try:
            env = stack.enter_context(JavaEnv.of_version(NEWEST, base / "java"))
        except InteropSetupError as err:
            pytest.fail(f"interop set-up: {err}", pytrace=False)
        java_namesrv = env.start_java_namesrv()
        java_broker = env.start_java_broker(java_namesrv, extra_conf=JAVA_BROKER_CONF,
                                            heap_mb=JAVA_BROKER_HEAP_MB, jvm_args=JVM_ARGS)
        asyncio.run(_create_topics(pyrmq_broker.addr, pyrmq_namesrv.addr))
        asyncio.run(_create_topics(java_broker.addr, java_namesrv.addr))
        record(f"Latency under a fixed open-loop rate (1 topic x {QUEUES} queues, "
               f"{BODY_BYTES} B, Java client {NEWEST} with autoBatch at nice "
               f"{LOAD_GENERATOR_NICE}, 1 push consumer; "
               f"{WARMUP_S} s warm-up + {WINDOW_S} s measured per broker and rate; the other "
               "broker paused). p50 / p99 / p99.9 / max in ms; ratios pyrmq/Java (< 1: pyrmq "
               "lower)")
        brokers = Brokers(env, java_namesrv, java_broker, pyrmq_namesrv, pyrmq_broker,
                          host_pauses)
        record(f"    {_prime(brokers)}")
        yield brokers


def run_latency_bench(env: JavaEnv, namesrv: str, broker_pid: int, topic: str, rate: int,
                      name: str, broker_log: Callable[[], str] = str,
                      options: Mapping[str, int | str] | None = None, *,
                      loop_tid: int | None = None) -> Run:
    """LatencyBench to its end; raises (with its output) if it fails or outlives its windows
    without a result (one printed but not followed by an exit is used, the process killed).
    `broker_log` reads the broker's log: what it wrote during the window is kept. `loop_tid`:
    the broker's event-loop thread, whose CPU each interval reports (pyrmq's main thread)."""
    opts: dict[str, int | str] = {
        "rate": rate, "body-bytes": BODY_BYTES, "warmup-s": WARMUP_S, "ramp-s": RAMP_S,
        "duration-s": WINDOW_S,
        "drain-s": DRAIN_S, "report-s": REPORT_S, "queues": QUEUES, "group": f"latency_{name}",
        **(options or {}),
    }
    timeout_s = float(opts["warmup-s"]) + float(opts["duration-s"]) + float(opts["drain-s"]) \
        + RUN_EXTRA_S
    opts["timeout-s"] = int(timeout_s)
    process = env.start_java(
        LATENCY_MAIN, [namesrv, topic, *(f"--{key}={value}" for key, value in opts.items())],
        name=name, heap_mb=CLIENT_HEAP_MB, sysprops=CLIENT_SYSPROPS, jvm_args=JVM_ARGS,
        nice=LOAD_GENERATOR_NICE,
    )
    sampler = CpuSampler(broker_pid, process.pid, loop_tid=loop_tid).start()
    try:
        deadline = time.monotonic() + timeout_s
        process.wait_for_stdout("(?m)^WINDOW_OPEN$", timeout_s=timeout_s)
        opened = (process_cpu_seconds(broker_pid), time.monotonic())
        opened_unix_s = time.time()
        machine_opened = (machine_busy_seconds(), cpu_seconds_by_process(), steal_seconds())
        log_from = len(broker_log())
        held = True
        try:
            process.wait_for_stdout("(?m)^WINDOW_CLOSED$",
                                    timeout_s=max(deadline - time.monotonic(), 1.0))
        except InteropError:
            if not process.alive():
                raise
            held = False  # still sending the window's messages: behind the rate
        closed = (process_cpu_seconds(broker_pid), time.monotonic())
        window_unix_s = (opened_unix_s, time.time())
        machine_closed = (machine_busy_seconds(), cpu_seconds_by_process(), steal_seconds())
        window_log = broker_log()[log_from:]
        exited = True
        try:
            code = process.wait(max(deadline - time.monotonic(), 1.0)) if held else 0
        except InteropError:
            if not process.alive():
                raise
            # Its window closed but it did not exit: a client that fell far behind (the Java
            # broker's at 45,000 msg/s in a busy hour, out of heap). What it printed is used.
            exited, code = False, 0
    finally:
        cpu_samples = sampler.stop()
        process.kill()
    assert code == 0, process.diagnostics()
    if not exited:
        print(f"\n{name} did not exit after its window:\n{process.diagnostics()}")
    out = process.stdout()
    seconds = max(closed[1] - opened[1], 1e-9)
    cpu_pct = 100 * (closed[0] - opened[0]) / seconds
    machine = (f"machine busy {100 * (machine_closed[0] - machine_opened[0]) / seconds:.0f} % of "
               f"{100 * (os.cpu_count() or 1)} %, the most: "
               f"{busiest(machine_opened[1], machine_closed[1], seconds)}; the host took "
               f"{1000 * (machine_closed[2] - machine_opened[2]):.0f} ms of CPU time")
    intervals = [line for line in out.splitlines() if line.startswith("INTERVAL")]
    clock_start_s = opened[1] - float(opts["warmup-s"])
    if not held:
        print(f"\n{name} did not hold {rate} msg/s:\n{process.diagnostics()}")
        return Run({}, cpu_pct, intervals, window_log, machine, held=False,
                   window_unix_s=window_unix_s, cpu_samples=cpu_samples,
                   clock_start_s=clock_start_s)
    result = last_json_line(out, what=name)
    if not result["acked"] or not result["received"]:
        print(f"\n{name} measured nothing (see its counts):\n{process.diagnostics()}")
    return Run(result, cpu_pct, intervals, window_log, machine, window_unix_s=window_unix_s,
               cpu_samples=cpu_samples, clock_start_s=clock_start_s)


@dataclass(frozen=True, slots=True)
class Stall:
    """One stall the pyrmq broker logged, how much of it the host had the VM paused or the
    loop's CPU stopped (the CPU the stall line names), and how fast the host ran the VM's CPUs
    meanwhile."""

    lag_ms: float
    cause: str
    figures: str  # the loop monitor's
    running: str
    end_unix_s: float
    host_paused_ms: float = 0.0
    speed: Speed | None = None
    cpu: int | None = None
    cpu_stopped_ms: float = 0.0
    # How long the loop thread waited for a CPU in it (the monitor's run-queue wait).
    runqueue_wait_ms: float = 0.0
    # The longest the host stopped any other CPU in it: printed, never judged.
    other_cpus_stopped_ms: float = 0.0
    # In a `blocked` stall: the longest the host stopped a CPU that a thread runnable while the
    # loop waited for the GIL (or a lock) was on, at most the loop's time off its CPU. That
    # thread, or one it handed the GIL to, kept the loop waiting as long.
    holder_cpus_stopped_ms: float = 0.0

    @property
    def less_host_ms(self) -> float:
        # A pause of the VM stops the loop's CPU too: the larger of the two is the host's.
        return self.lag_ms - max(self.host_paused_ms, self.cpu_stopped_ms)

    @property
    def judged_ms(self) -> float:
        """The stall as the goal counts it (README, "How the stall goals are judged"): less the
        largest of the loop's waits for a CPU and the host's stops (of the VM, of the loop's
        CPU, of the GIL holders' CPUs). Only the largest, since a stop while the thread waited
        in the run queue is counted in more than one. Never below zero (the wait is counted
        over the tick's window, which starts before the tick was due)."""
        return max(0.0, self.lag_ms - max(self.runqueue_wait_ms, self.host_paused_ms,
                                          self.cpu_stopped_ms, self.holder_cpus_stopped_ms))


def stalls_in(log: str, pauses: Sequence[Pause] = (),
              host: HostRecords | None = None) -> list[Stall]:
    """Every stall the pyrmq broker logged in `log`, with the VM's `pauses` inside each and,
    from the probes' `host` records, the CPUs' speed over it and how long the loop's CPU, the
    CPUs of the threads runnable while a `blocked` loop waited for the GIL, and (printed only)
    another CPU were stopped in it."""
    found = []
    probed = set() if host is None else {late.cpu for late in host.lates}
    for line in log.splitlines():
        match = _STALL.search(line)
        if match is None:
            continue
        lag_ms, cause, end = float(match.group(1)), match.group(2), float(match.group(4))
        start = end - lag_ms / 1000
        figures = match.group(3)
        named = _CPU.search(figures)
        cpu = None if named is None else int(named.group(1))
        waited = _RUNQUEUE_WAIT.search(figures)
        waited_ms = 0.0 if waited is None else float(waited.group(1))
        stopped_ms = 0.0 if cpu is None or host is None else \
            1000 * host.stopped(cpu, start, end)
        others_ms = 0.0 if cpu is None or host is None else max(
            (1000 * host.stopped(other, start, end) for other in probed - {cpu}), default=0.0)
        holders_ms = 0.0
        runnable = _RUNNABLE.search(figures)
        on_cpu = _ON_CPU.search(figures)
        if cause == "blocked" and host is not None and runnable is not None and \
                on_cpu is not None:
            holder_cpus = {int(found_cpu) for found_cpu in _RUNNABLE_CPU.findall(runnable[1])}
            off_cpu_ms = max(0.0, lag_ms - float(on_cpu[1]) - waited_ms)
            holders_ms = min(off_cpu_ms, max(
                (1000 * host.stopped(holder, start, end) for holder in holder_cpus),
                default=0.0))
        found.append(Stall(lag_ms, cause, figures, match.group(5), end,
                           1000 * paused_within(start, end, pauses),
                           None if host is None else host.speed(start, end), cpu,
                           stopped_ms, waited_ms, others_ms, holders_ms))
    return found


def describe_stalls(stalls: Sequence[Stall]) -> str:
    if not stalls:
        return f"no event-loop stall over {STALL_THRESHOLD_MS} ms"
    causes = Counter(stall.cause for stall in stalls)
    worst = max(stalls, key=lambda stall: stall.lag_ms)
    over = [stall for stall in stalls if stall.less_host_ms > STALL_THRESHOLD_MS]
    slowed = sum(1 for stall in over
                 if stall.speed is not None and stall.speed.slowest < SLOW_SPEED)
    judged = sum(1 for stall in stalls if stall.judged_ms > STALL_THRESHOLD_MS)
    return (f"{len(stalls)} event-loop stalls over {STALL_THRESHOLD_MS} ms (causes: "
            + ", ".join(f"{cause} {count}" for cause, count in causes.most_common())
            + f"), {judged} of them as the goal counts them (less the loop's waits for a CPU "
            f"or the host's stops, the largest), {len(over)} over {STALL_THRESHOLD_MS} ms "
            "less the host's stops of the VM or of the loop's CPU alone, "
            f"{slowed} of those while the host ran a CPU below {SLOW_SPEED} of full speed; "
            f"the longest {worst.lag_ms:.0f} ms, {worst.cause}, running {worst.running[:160]}")


@pytest.mark.parametrize("rate", RATES, ids=[f"{rate // 1000}k" for rate in RATES])
def test_latency_at_a_fixed_rate(brokers: Brokers, rate: int) -> None:
    topic = topic_of(rate)
    with paused((brokers.java_namesrv.process.pid, brokers.java_broker.process.pid)):
        ours = run_latency_bench(brokers.java_env, brokers.pyrmq_namesrv.addr,
                                 brokers.pyrmq_broker.pid, topic, rate, f"pyrmq-{rate}",
                                 broker_log=brokers.pyrmq_broker.log,
                                 loop_tid=brokers.pyrmq_broker.pid)
    # Stalls inside the window only: resuming from a pause (while the peer ran) reads as one.
    host = brokers.host_pauses.records()
    our_pauses = host.pauses(*ours.window_unix_s)
    stalls = stalls_in(ours.window_log, our_pauses, host)
    with paused((brokers.pyrmq_namesrv.pid, brokers.pyrmq_broker.pid)):
        theirs = run_latency_bench(brokers.java_env, brokers.java_namesrv.addr,
                                   brokers.java_broker.process.pid, topic, rate, f"java-{rate}")
    peer = f"RocketMQ-{NEWEST}"
    record(f"{rate:,} msg/s:")
    for what, mine, their in (("publish   ", ours.publish, theirs.publish),
                              ("end-to-end", ours.e2e, theirs.e2e)):
        record(f"    {what}  pyrmq {Latencies.text(mine)}, {peer} {Latencies.text(their)}, "
               f"ratio {Latencies.ratio_text(mine, their)}")
    record(f"    broker CPU over the window: pyrmq {ours.broker_cpu_pct:.0f} %, {peer} "
           f"{theirs.broker_cpu_pct:.0f} % of one core; pyrmq: {describe_stalls(stalls)}")
    for stall in stalls[:STALLS_SHOWN]:
        # What the broker's loop monitor saw in each (README, "Event-loop lag monitor").
        record(f"      stall {stall.lag_ms:.1f} ms {stall.cause} ({stall.judged_ms:.1f} as the "
               f"goal counts it; the VM paused "
               f"{stall.host_paused_ms:.1f} ms of it, its CPU stopped "
               f"{stall.cpu_stopped_ms:.1f} ms, the CPUs of the threads runnable while it "
               f"waited for the GIL {stall.holder_cpus_stopped_ms:.1f}, another at most "
               f"{stall.other_cpus_stopped_ms:.1f}; {speed_text(stall.speed)}): {stall.figures}")
    host = brokers.host_pauses.records()
    their_pauses = host.pauses(*theirs.window_unix_s)
    our_speed = speed_text(host.speed(*ours.window_unix_s))
    their_speed = speed_text(host.speed(*theirs.window_unix_s))
    record(f"    the host (probes on every CPU): in pyrmq's window {summary(our_pauses)}, "
           f"{our_speed}; in {peer}'s {summary(their_pauses)}, {their_speed}")
    record(f"    pyrmq: {ours.counts()}; {peer}: {theirs.counts()}")
    # Where the CPU went when the tail rose (issue 16: show where one core's budget limits).
    record(f"    CPU: pyrmq {ours.cpu_text()}; {peer} {theirs.cpu_text()}")
    print(f"    {REPORT_S} s intervals (t, publish p99, max, e2e p99, max ms, sent, received, "
          "pulls, those that found messages, messages a found pull, pulls sure to find some, "
          "their round trip p50 and p99 ms, the p99 of a message's dwell in the client from its "
          "pull's answer to the listener, a queue's gap from an answer to its next pull p50 and "
          "p99 ms; "
          "the CPU used in them, of one core):")
    for name, run in (("pyrmq", ours), (peer, theirs)):
        for line in run.intervals:
            shares = run.interval_shares(line)
            print(f"      {name} {line.removeprefix('INTERVAL ')}"
                  + ("" if shares is None else f"; {shares.text()}"))
    # A run must measure something: at some rate at least one broker kept up enough to have
    # sends acknowledged and consumed (else the benchmark itself, or this machine, is broken).
    # A higher rate that neither holds, once a lower one has measured, is this machine's limit
    # (on a host running the VM several times slower than usual neither held 45,000 msg/s):
    # printed as such, not a failure, since no speed is asserted.
    if any(run.result.get("acked") and run.result.get("received") for run in (ours, theirs)):
        MEASURED_RATES.add(rate)
        return
    neither = (f"neither broker had a send acknowledged and consumed at {rate:,} msg/s "
               f"(pyrmq's window: {ours.machine}; Java's: {theirs.machine})")
    assert any(lower < rate for lower in MEASURED_RATES), neither
    record(f"    NEITHER HELD the rate on this machine: {neither}; measured at "
           f"{', '.join(f'{lower:,}' for lower in sorted(MEASURED_RATES))} msg/s")
