"""Scheduler traces of a broker's event-loop thread: catch one around a stall, and read it.

Why: a `not_scheduled` stall (broker/loop_monitor.py) says the loop thread waited for a CPU, not
behind whom. A tracefs ring of the scheduler's switch / wakeup / migrate events, frozen right
after the broker logs the stall, shows which threads held the loop's CPU meanwhile, how the wait
began (preempted, or woken onto a busy CPU) and how long the other CPUs sat idle. The README's
"Latency under a steady load" (sixteenth and seventeenth sessions) rests on such traces.

    # root, tracefs (mounted: `mount -t tracefs nodev /sys/kernel/tracing` where it is not);
    # start it once the load runs (a broker's start-up logs stalls of its own),
    # e.g. when benchmarks/test_latency.py's generator prints WINDOW_OPEN
    python -m benchmarks.sched_trace record OUT \
        --log '/tmp/pytest-of-*/pytest-*/latency-bench0/pyrmq/broker-a/pyrmq.log'
    # the loop thread's id is the broker's pid (OUT/threads.txt lists every thread)
    python -m benchmarks.sched_trace analyse OUT/trace.txt --tid PID --min-ms 1

The parsing and the analysis are pure (tests/unit/test_sched_trace.py); `record` is the shell.
"""

from __future__ import annotations

import argparse
import bisect
import glob
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

TRACEFS: Final = Path("/sys/kernel/tracing")
EVENTS: Final = ("sched/sched_switch", "sched/sched_wakeup", "sched/sched_migrate_task")
# 48 MiB per CPU holds about 10 s of a 45,000 msg/s run's events.
BUFFER_KB: Final = 48 * 1024
POLL_S: Final = 0.02  # how often the broker's log is read: the ring outlasts it many times
IDLE_PREFIX: Final = "swapper/"

_HEAD: Final = r"\[(\d+)\] \S+ +([\d.]+): "
_SWITCH: Final = re.compile(
    _HEAD + r"sched_switch: prev_comm=(.*?) prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+)"
    r" ==> next_comm=(.*?) next_pid=(\d+) ")
_WAKEUP: Final = re.compile(_HEAD + r"sched_wakeup: comm=.*? pid=(\d+) prio=\d+ target_cpu=(\d+)")
_MIGRATE: Final = re.compile(
    _HEAD + r"sched_migrate_task: comm=.*? pid=(\d+) prio=\d+ orig_cpu=(\d+) dest_cpu=(\d+)")
_STALL: Final = re.compile(r"event loop stall lag_ms=([\d.]+) cause=(\w+) .*host_steal_ms=([\d.]+)")


@dataclass(frozen=True, slots=True)
class Switch:
    cpu: int
    at: float
    prev_comm: str
    prev_pid: int
    prev_state: str  # "R" / "R+": preempted, still runnable
    next_comm: str
    next_pid: int


@dataclass(frozen=True, slots=True)
class Wakeup:
    cpu: int  # where the waker ran
    at: float
    pid: int
    target_cpu: int


@dataclass(frozen=True, slots=True)
class Migrate:
    at: float
    pid: int
    orig_cpu: int
    dest_cpu: int


Event = Switch | Wakeup | Migrate


def parse(lines: Iterable[str]) -> Iterator[Event]:
    """The scheduler events of a tracefs `trace` dump, in its order; other lines are skipped."""
    for line in lines:
        if (m := _SWITCH.search(line)) is not None:
            yield Switch(int(m[1]), float(m[2]), m[3], int(m[4]), m[5], m[6], int(m[7]))
        elif (m := _WAKEUP.search(line)) is not None:
            yield Wakeup(int(m[1]), float(m[2]), int(m[3]), int(m[4]))
        elif (m := _MIGRATE.search(line)) is not None:
            yield Migrate(float(m[2]), int(m[3]), int(m[4]), int(m[5]))


@dataclass(frozen=True, slots=True)
class Run:
    """A thread on a CPU from one switch to the next (`comm` "swapper/N": the CPU idle)."""

    cpu: int
    start: float
    end: float
    comm: str


@dataclass(frozen=True, slots=True)
class Wait:
    """One stretch of the thread being runnable but not running."""

    start: float
    end: float
    queued_cpu: int  # where it waited (after any migration)
    ran_cpu: int
    began: str  # "preempted by <comm>", "woken from cpuN" (the waker's), ", moved from cpuM"

    @property
    def seconds(self) -> float:
        return self.end - self.start


def runs_and_waits(events: Iterable[Event], tid: int) -> tuple[list[Run], list[Wait]]:
    """Every CPU's runs, and the waits of thread `tid`, in one pass over `events`."""
    runs: list[Run] = []
    waits: list[Wait] = []
    current: dict[int, tuple[float, str]] = {}
    since: tuple[float, int, str] | None = None  # runnable since, queued on, how
    moved_from: int | None = None  # a wakeup's migration comes just before the wakeup itself
    for event in events:
        match event:
            case Switch(cpu=cpu, at=at):
                if cpu in current:
                    start, comm = current[cpu]
                    runs.append(Run(cpu, start, at, comm))
                current[cpu] = (at, event.next_comm)
                if event.prev_pid == tid and event.prev_state.startswith("R"):
                    since = (at, cpu, f"preempted by {event.next_comm}")
                if event.next_pid == tid:
                    if since is not None:
                        waits.append(Wait(since[0], at, since[1], cpu, since[2]))
                    since = moved_from = None
            case Wakeup(pid=pid) if pid == tid:
                moved = "" if moved_from is None else f", moved from cpu{moved_from}"
                since = (event.at, event.target_cpu, f"woken from cpu{event.cpu}{moved}")
                moved_from = None
            case Migrate(pid=pid) if pid == tid:
                if since is None:
                    moved_from = event.orig_cpu
                else:  # the load balancer moved it while it waited
                    moved = f", moved from cpu{event.orig_cpu}"
                    since = (since[0], event.dest_cpu, since[2] + moved)
            case _:
                pass
    return runs, waits


@dataclass(frozen=True, slots=True)
class WaitReport:
    wait: Wait
    on_queued_cpu: dict[str, float]  # thread name -> seconds it ran there during the wait
    idle_elsewhere_s: float  # the other CPUs' idle time during the wait


class RunIndex:
    """The runs of each CPU by start time, to find those overlapping an interval quickly."""

    def __init__(self, runs: Iterable[Run]) -> None:
        self._by_cpu: dict[int, list[Run]] = defaultdict(list)
        for run in sorted(runs, key=lambda r: r.start):
            self._by_cpu[run.cpu].append(run)
        self._starts = {cpu: [r.start for r in rs] for cpu, rs in self._by_cpu.items()}

    def overlapping(self, cpu: int, start: float, end: float) -> Iterator[tuple[Run, float]]:
        """(run, seconds of it inside [start, end)) for the runs of `cpu` that overlap it."""
        runs = self._by_cpu.get(cpu, [])
        i = max(0, bisect.bisect_right(self._starts.get(cpu, []), start) - 1)
        for run in runs[i:]:
            if run.start >= end:
                break
            overlap = min(run.end, end) - max(run.start, start)
            if overlap > 0:
                yield run, overlap

    @property
    def cpus(self) -> list[int]:
        return sorted(self._by_cpu)


def explain(wait: Wait, index: RunIndex) -> WaitReport:
    """Who held the CPU `wait` was queued on, and how idle the other CPUs were meanwhile."""
    held: dict[str, float] = defaultdict(float)
    for run, seconds in index.overlapping(wait.queued_cpu, wait.start, wait.end):
        held[run.comm] += seconds
    idle = sum(seconds
               for cpu in index.cpus if cpu != wait.queued_cpu
               for run, seconds in index.overlapping(cpu, wait.start, wait.end)
               if run.comm.startswith(IDLE_PREFIX))
    return WaitReport(wait, dict(held), idle)


def stall_triggers(line: str, *, min_lag_ms: float, cause: str) -> bool:
    """Whether a broker log line is a stall of at least `min_lag_ms` with `cause` (or any cause
    for "any") during which the host took no CPU time (a stolen CPU needs no trace)."""
    m = _STALL.search(line)
    return (m is not None and float(m[1]) >= min_lag_ms and cause in ("any", m[2])
            and float(m[3]) == 0.0)


def buffer_kb_to_restore(text: str) -> str:
    """What to write back to tracefs's buffer_size_kb, given what it read: before the ring's
    first resize it reads "7 (expanded: 1408)", which the file does not take back."""
    expanded = re.search(r"\(expanded: (\d+)\)", text)
    return expanded[1] if expanded is not None else text.strip()


def histogram(waits: Iterable[Wait]) -> dict[str, int]:
    bounds = ((0.0001, "<0.1"), (0.001, "<1"), (0.002, "<2"), (0.005, "<5"), (0.010, "<10"))
    counts = dict.fromkeys([label for _, label in bounds] + [">=10"], 0)
    for wait in waits:
        counts[next((label for bound, label in bounds if wait.seconds < bound), ">=10")] += 1
    return counts


# ---------------------------------------------------------------- the shell


def _write(name: str, value: str) -> None:
    (TRACEFS / name).write_text(value)


def record(out: Path, log_glob: str, *, min_lag_ms: float, cause: str, buffer_kb: int,
           timeout_s: float) -> str | None:
    """Trace the scheduler into a ring until a broker log matching `log_glob` logs, after this
    starts, a stall that `stall_triggers`; then freeze the ring and dump it to out/trace.txt
    (the stall line to out/stall.txt, every thread to out/threads.txt). Returns the stall line,
    or None after `timeout_s` without one. Needs root and tracefs; leaves tracing as it found
    it."""
    out.mkdir(parents=True, exist_ok=True)
    saved = {name: (TRACEFS / name).read_text().strip()
             for name in ("tracing_on", "buffer_size_kb", "trace_clock")}
    saved["trace_clock"] = re.sub(r".*\[(\w+)\].*", r"\1", saved["trace_clock"])
    saved["buffer_size_kb"] = buffer_kb_to_restore(saved["buffer_size_kb"])
    _write("tracing_on", "0")
    _write("trace", "")
    _write("buffer_size_kb", str(buffer_kb))
    for event in EVENTS:
        _write(f"events/{event}/enable", "1")
    _write("trace_clock", "mono")
    _write("tracing_on", "1")
    started = time.time()
    # Stalls logged from now on: a log that exists already is read from its present end.
    sizes = {path: os.path.getsize(path) for path in glob.glob(log_glob)}
    deadline = time.monotonic() + timeout_s
    trigger: str | None = None
    try:
        log: Path | None = None
        offset = 0
        while trigger is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
            if log is None:
                fresh = [p for p in glob.glob(log_glob) if os.path.getmtime(p) > started]
                if not fresh:
                    continue
                log = Path(fresh[0])
                offset = sizes.get(fresh[0], 0)
            with log.open() as f:
                f.seek(offset)
                text = f.read()
                offset = f.tell()
            trigger = next((line for line in text.splitlines()
                            if stall_triggers(line, min_lag_ms=min_lag_ms, cause=cause)), None)
        _write("tracing_on", "0")
        if trigger is not None:
            (out / "stall.txt").write_text(f"{log}\n{trigger}\n")
            threads = subprocess.run(["ps", "-eLo", "pid,tid,comm"], capture_output=True,
                                     text=True, check=False).stdout
            (out / "threads.txt").write_text(threads)
            with (out / "trace.txt").open("w") as dump:
                dump.write((TRACEFS / "trace").read_text())
        return trigger
    finally:
        for event in EVENTS:
            _write(f"events/{event}/enable", "0")
        _write("trace_clock", saved["trace_clock"])
        _write("buffer_size_kb", saved["buffer_size_kb"])
        _write("tracing_on", saved["tracing_on"])


def analyse(trace: Path, tid: int, *, min_ms: float) -> str:
    with trace.open() as lines:
        runs, waits = runs_and_waits(parse(lines), tid)
    if not runs:
        return f"{trace}: no scheduler events"
    index = RunIndex(runs)
    span = max(r.end for r in runs) - min(r.start for r in runs)
    report = [f"{trace}: {span:.2f} s traced, thread {tid} waited for a CPU {len(waits)} times;"
              f" by length (ms): {histogram(waits)}"]
    for wait in sorted((w for w in waits if w.seconds * 1000 >= min_ms), key=lambda w: w.start):
        explained = explain(wait, index)
        held = sorted(explained.on_queued_cpu.items(), key=lambda kv: -kv[1])[:3]
        report.append(
            f"  at {wait.start:.6f} {wait.seconds * 1000:6.2f} ms on cpu{wait.queued_cpu}"
            f" ({wait.began}; ran on cpu{wait.ran_cpu}); held by "
            + ", ".join(f"{comm} {s * 1000:.2f}" for comm, s in held)
            + f"; other CPUs idle {explained.idle_elsewhere_s * 1000:.2f} ms")
    return "\n".join(report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sched_trace", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="trace until a broker logs a stall")
    rec.add_argument("out", type=Path)
    rec.add_argument("--log", required=True, help="glob of the broker's log file")
    rec.add_argument("--min-lag-ms", type=float, default=10.0)
    rec.add_argument("--cause", default="not_scheduled", help='a stall cause, or "any"')
    rec.add_argument("--buffer-kb", type=int, default=BUFFER_KB, help="ring size per CPU")
    rec.add_argument("--timeout-s", type=float, default=600.0)
    ana = commands.add_parser("analyse", help="the waits of one thread in a trace")
    ana.add_argument("trace", type=Path)
    ana.add_argument("--tid", type=int, required=True)
    ana.add_argument("--min-ms", type=float, default=1.0)
    args = parser.parse_args(argv)
    if args.command == "record":
        line = record(args.out, args.log, min_lag_ms=args.min_lag_ms, cause=args.cause,
                      buffer_kb=args.buffer_kb, timeout_s=args.timeout_s)
        print(line if line is not None else "no stall before the timeout")
        return 0 if line is not None else 1
    print(analyse(args.trace, args.tid, min_ms=args.min_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
