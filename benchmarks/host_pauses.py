"""Host pauses: stretches in which the host ran none of this VM's CPUs, measured from inside it.

Why: on this project's VMs the host at times stops every vCPU at once for milliseconds without
counting it as steal (/proc/stat). The guest's clocks run on through it, so whatever thread was
on a CPU then seems to have run (a `busy` stall in broker/loop_monitor.py), one that was waiting
for a CPU seems to have waited (`not_scheduled`), and one asleep seems to have slept past its
timer (`blocked`). A scheduler trace shows it as no event on any CPU while each CPU was running a
task: 8.6 ms of a 16.1 ms `busy` stall of the latency benchmark (seventeenth session's traces).

The probe: one process per CPU, pinned to it, sleeping PERIOD_S at a time. When it wakes later
than due by more than it then waited for its CPU (its /proc schedstat run delay), its CPU did
not deliver the timer on time: that CPU was not running. Where every CPU's probe saw that at the
same time, the whole VM was paused. A benchmark runs `HostPauseProbes` beside its load and
takes the pauses out of what it blames on its broker.

    python -m benchmarks.host_pauses probe --cpu 0 --out late-0.txt   # one per CPU

The same probe also times a fixed piece of work on each wake-up in its thread's CPU time: the
CPU's speed. On this project's VMs a vCPU at times runs at about half its speed for seconds on
end, with no steal counted and no pause (twentieth session, on an idle VM: stretches of 0.5-3 s
at 1.0 and 2.0 times the work's shortest time, alternating); a host thread sharing the physical
core would do that. A broker on a half-speed CPU takes twice the time for the same work, which
its loop monitor shows as a `busy` stall with fewer requests than usual. The probe writes the
median time of each SPEED_BUCKET_S of samples. A bucket's speed is the run's shortest median
over its own; a stretch's, the median of the speeds of the buckets it overlaps (every CPU's).

The intersection and the speeds are pure (tests/unit/test_host_pauses.py); the probe and
`HostPauseProbes` are the shell.

Invariants:
- A pause is reported only where every CPU's probe was late at once: one CPU's late timer can be
  a guest matter (interrupts held off), or steal, which /proc/stat already counts. One CPU's
  stops (`stopped_within`) are only counted against a stall of a thread on that CPU: whatever
  held that CPU's timer, the thread could not run then either.
- The probes cost what they measure a little: 1,000 wake-ups a second and some work on each.
  A replicated send's chain of wake-ups across four processes paid about 1 ms of p99 for them
  (twentieth session), so the allAck benchmark runs without them.
- A probe waiting for its CPU when a pause began does not see it (its lateness is then run
  delay): the figures are a lower bound. The probes run at the default priority all the same:
  a real-time probe would preempt the broker it is there to measure, 500 times a second.
  (Tried at SCHED_FIFO 1 in the eighteenth session: the broker stalled over 10 ms in 3 runs
  of 3, but in an hour when a run with the probes as they are had 38 such stalls: not shown
  either way.)
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Final

from broker.loop_monitor import SchedStat

PERIOD_S: Final = 0.002
# Free page reporting (virtio-balloon): the guest hands free 2 MiB blocks back to the host, which
# then has to fault them in again on their next use. This kernel counts what it has reported.
REPORTED_KIB: Final = Path("/sys/module/page_reporting/parameters/reported_kib")
# A probe records a wake-up whose timer was this late or more (the rest is scheduler noise).
RECORD_MIN_S: Final = 0.001
# The fixed work timed on each wake-up: some 10 us on this host's CPUs at full speed, so that
# the probes take about 0.6 % of each CPU. It is timed after a short untimed run of the same
# work: run cold, it took a fifth longer on a CPU shared with a process copying memory (the
# caches the broker's work emptied), warm it did not. A sample still varies (interrupts); a
# bucket's median does not.
SPEED_WORK: Final = 400
SPEED_WARM_UP: Final = 100
SPEED_BUCKET_S: Final = 0.05
SPEED_PREFIX: Final = "speed"
SLOW_SPEED: Final = 0.75  # a stretch below this share of full speed counts as slow


@dataclass(frozen=True, slots=True)
class Late:
    """One late wake-up of one CPU's probe: its timer was due at `due_unix_s` (wall clock) and
    fired `timer_late_s` after that; it then waited `run_delay_s` for the CPU."""

    cpu: int
    due_unix_s: float
    timer_late_s: float
    run_delay_s: float


@dataclass(frozen=True, slots=True)
class Pause:
    start_unix_s: float
    end_unix_s: float

    @property
    def seconds(self) -> float:
        return self.end_unix_s - self.start_unix_s


@dataclass(frozen=True, slots=True)
class SpeedBucket:
    """The median CPU time of the fixed work over one bucket of one CPU's wake-ups."""

    cpu: int
    start_unix_s: float
    end_unix_s: float
    median_ns: int


@dataclass(frozen=True, slots=True)
class Speed:
    """How fast the CPUs ran over a stretch, as fractions of full speed (1.0): the median over
    the stretch's buckets, the slowest bucket, and the share of the stretch's buckets below
    SLOW_SPEED."""

    median: float
    slowest: float
    slow_share: float

    def __str__(self) -> str:
        return (f"the CPUs ran at {self.median:.2f} of full speed (median; the slowest 50 ms "
                f"{self.slowest:.2f}, below {SLOW_SPEED} in {100 * self.slow_share:.0f} % of "
                f"the time)")


def parse_line(line: str, cpu: int) -> Late | None:
    """A probe's record line (`due_unix_s timer_late_s run_delay_s`), or None if it is not one
    (a speed line, a line cut short by a stop)."""
    parts = line.split()
    if len(parts) != 3:
        return None
    try:
        due, late, delay = (float(part) for part in parts)
    except ValueError:
        return None
    return Late(cpu, due, late, delay)


def parse_speed_line(line: str, cpu: int) -> SpeedBucket | None:
    """A probe's speed line (`speed start_unix_s end_unix_s median_ns`), or None if it is not
    one."""
    parts = line.split()
    if len(parts) != 4 or parts[0] != SPEED_PREFIX:
        return None
    try:
        return SpeedBucket(cpu, float(parts[1]), float(parts[2]), int(parts[3]))
    except ValueError:
        return None


def speed_within(buckets: Sequence[SpeedBucket], start_unix_s: float, end_unix_s: float,
                 full_ns: int) -> Speed | None:
    """How fast the CPUs ran in [start, end], from the buckets that overlap it, with `full_ns`
    the work's time at full speed; None if no bucket overlaps."""
    speeds = sorted(min(1.0, full_ns / bucket.median_ns) for bucket in buckets
                    if bucket.end_unix_s > start_unix_s and bucket.start_unix_s < end_unix_s
                    and bucket.median_ns > 0)
    if not speeds:
        return None
    middle = len(speeds) // 2
    median = (speeds[middle] if len(speeds) % 2
              else (speeds[middle - 1] + speeds[middle]) / 2)
    return Speed(median, speeds[0], sum(1 for s in speeds if s < SLOW_SPEED) / len(speeds))


def speed_text(speed: Speed | None) -> str:
    return str(speed) if speed is not None else "the CPUs' speed not measured"


def vm_pauses(lates: Iterable[Late], cpus: int, *, min_s: float = RECORD_MIN_S) -> list[Pause]:
    """The stretches of at least `min_s` in which every one of `cpus` CPUs had a timer overdue,
    in time order."""
    # A sweep over the CPUs' overdue stretches: a pause is wherever all `cpus` overlap.
    edges: list[tuple[float, int, int]] = []
    for late in lates:
        if late.timer_late_s > 0:
            edges.append((late.due_unix_s, 1, late.cpu))
            edges.append((late.due_unix_s + late.timer_late_s, -1, late.cpu))
    # A start before an end at the same instant: a CPU late over two touching stretches was
    # late throughout, and a pause across them is one.
    edges.sort(key=lambda edge: (edge[0], -edge[1]))
    open_per_cpu: dict[int, int] = {}
    pauses: list[Pause] = []
    started: float | None = None
    for at, step, cpu in edges:
        open_per_cpu[cpu] = open_per_cpu.get(cpu, 0) + step
        covered = sum(1 for count in open_per_cpu.values() if count > 0)
        if started is None and covered == cpus:
            started = at
        elif started is not None and covered < cpus:
            if at - started >= min_s:
                pauses.append(Pause(started, at))
            started = None
    return pauses


def paused_within(start_unix_s: float, end_unix_s: float, pauses: Iterable[Pause]) -> float:
    """Seconds of `pauses` inside [start, end]."""
    return sum(max(0.0, min(end_unix_s, pause.end_unix_s) - max(start_unix_s, pause.start_unix_s))
               for pause in pauses)


def stopped_within(lates: Iterable[Late], cpu: int, start_unix_s: float,
                   end_unix_s: float) -> float:
    """Seconds of [start, end] in which `cpu`'s probe had its timer overdue (net of its own
    wait for the CPU): that CPU was not running, the whole VM paused or that vCPU alone. A
    thread on it then neither ran nor waited as the guest counts."""
    stretches = sorted((late.due_unix_s, late.due_unix_s + late.timer_late_s)
                       for late in lates if late.cpu == cpu and late.timer_late_s > 0)
    stopped = 0.0
    reached = start_unix_s  # stretches may overlap: count each instant once
    for late_from, late_to in stretches:
        begin, end = max(late_from, reached), min(late_to, end_unix_s)
        if end > begin:
            stopped += end - begin
            reached = end
    return stopped


def summary(pauses: Sequence[Pause]) -> str:
    if not pauses:
        return "the VM was not paused"
    return (f"the VM was paused {len(pauses)} times, {1000 * sum(p.seconds for p in pauses):.0f} "
            f"ms in all, the longest {1000 * max(p.seconds for p in pauses):.1f} ms")


# ---------------------------------------------------------------------------------- the shell


def reported_free_kib() -> int | None:
    """KiB of free memory the guest has handed back to the host since boot, where the kernel
    counts it (None elsewhere)."""
    try:
        return int(REPORTED_KIB.read_text())
    except (OSError, ValueError):
        return None


def fixed_work(iterations: int = SPEED_WORK) -> int:
    """The work whose CPU time is the CPU's speed: Python bytecode on a few small integers, so
    that neither memory nor another CPU's load changes its time much."""
    total = 0
    for i in range(iterations):
        total += i * i
    return total


def probe(cpu: int, out: Path, period_s: float = PERIOD_S) -> None:
    """Until SIGTERM: sleep `period_s` at a time on `cpu`, appending a line to `out` for each
    wake-up whose timer was late by RECORD_MIN_S or more, and one for each SPEED_BUCKET_S with
    the median CPU time of `fixed_work` over its wake-ups."""
    os.sched_setaffinity(0, {cpu})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    schedstat = SchedStat()  # this thread's run delay, as the loop monitor reads the loop's
    samples: list[int] = []
    bucket_start = time.time()
    with out.open("a", buffering=1) as records:
        before = schedstat.read()
        while True:
            due = time.monotonic() + period_s
            time.sleep(period_s)
            woke = time.monotonic()
            now = schedstat.read()
            if before is not None and now is not None:
                delay = (now[1] - before[1]) / 1e9
                timer_late = woke - due - delay
                if timer_late >= RECORD_MIN_S:
                    due_unix = time.time() - (woke - due)
                    records.write(f"{due_unix:.6f} {timer_late:.6f} {delay:.6f}\n")
            # Timed warm, in CPU time: a wait for the CPU meanwhile does not count.
            fixed_work(SPEED_WARM_UP)
            started_ns = time.thread_time_ns()
            fixed_work()
            samples.append(time.thread_time_ns() - started_ns)
            wall = time.time()
            if wall - bucket_start >= SPEED_BUCKET_S:
                samples.sort()
                records.write(f"{SPEED_PREFIX} {bucket_start:.6f} {wall:.6f} "
                              f"{samples[len(samples) // 2]}\n")
                samples.clear()
                bucket_start = wall
            # Read after the work: a wait for the CPU during it is not the next timer's.
            before = schedstat.read()


class HostPauseProbes:
    """A probe per CPU for the block; `records()` reads what they saw so far."""

    def __init__(self, directory: Path) -> None:
        self._cpu_ids = sorted(os.sched_getaffinity(0))
        self.cpus = len(self._cpu_ids)
        self._files = [directory / f"host-pauses-cpu{cpu}.txt" for cpu in self._cpu_ids]
        self._processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> HostPauseProbes:
        for cpu, path in zip(self._cpu_ids, self._files, strict=True):
            path.unlink(missing_ok=True)
            self._processes.append(subprocess.Popen(
                [sys.executable, "-m", "benchmarks.host_pauses", "probe", "--cpu", str(cpu),
                 "--out", str(path)], cwd=Path(__file__).resolve().parent.parent))
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for process in self._processes:
            process.terminate()
        for process in self._processes:
            process.wait(10)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def records(self) -> HostRecords:
        """What the probes have written so far, read once."""
        lates: list[Late] = []
        buckets: list[SpeedBucket] = []
        for cpu, path in zip(self._cpu_ids, self._files, strict=True):
            if path.exists():
                for line in path.read_text().splitlines():
                    if late := parse_line(line, cpu):
                        lates.append(late)
                    elif bucket := parse_speed_line(line, cpu):
                        buckets.append(bucket)
        return HostRecords(self.cpus, lates, buckets)


@dataclass(frozen=True, slots=True)
class HostRecords:
    """The probes' records at one moment: the VM's pauses, one CPU's stops and the CPUs'
    speed over any stretch of them."""

    cpus: int
    lates: list[Late]
    buckets: list[SpeedBucket]
    # The work's time at full speed: the shortest median of the run (every run seen so far
    # had stretches at full speed). Derived once: `speed` is asked for every stall and tick.
    full_ns: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "full_ns",
                           min((bucket.median_ns for bucket in self.buckets), default=0))

    def pauses(self, start_unix_s: float, end_unix_s: float) -> list[Pause]:
        return [pause for pause in vm_pauses(self.lates, self.cpus)
                if pause.end_unix_s > start_unix_s and pause.start_unix_s < end_unix_s]

    def stopped(self, cpu: int, start_unix_s: float, end_unix_s: float) -> float:
        return stopped_within(self.lates, cpu, start_unix_s, end_unix_s)

    def speed(self, start_unix_s: float, end_unix_s: float) -> Speed | None:
        return speed_within(self.buckets, start_unix_s, end_unix_s, self.full_ns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.host_pauses")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("probe", help="one CPU's probe, until SIGTERM")
    run.add_argument("--cpu", type=int, required=True)
    run.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    probe(args.cpu, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
