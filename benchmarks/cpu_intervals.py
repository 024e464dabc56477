"""Where the CPU went in each interval of a latency window: the broker's loop thread, the
broker, the load generator and the whole machine.

Why: issue 16 asks, where one core's CPU budget is what limits the 45,000 msg/s figures, to show
that by measurement. A window's averages do not: pyrmq's broker at 80 % of one core over 30 s
can hide a 5 s interval at 100 % (its loop saturated: requests queue, the publish p99 climbs)
or one in which the loop ran 60 % and waited 30 % for a CPU (the two cores, shared with the load
generator, were full). So a sampler thread reads, every SAMPLE_PERIOD_S through the run, the
loop thread's /proc schedstat (its time on a CPU and its waits for one), the broker's and the
load generator's CPU time and the machine's busy time; each of the load generator's 5 s
INTERVAL lines is then given the shares of its own seconds.

`shares_between` is the pure core (tests/unit/test_cpu_intervals.py); `CpuSampler` the shell.

Invariants:
- A share is measured between two samples, over their own times: an interval's figures cover
  its nominal seconds to within half a sample period at each end.
- The sampler reads four small /proc files per sample (60 us of CPU in a tight loop, four
  samples a second: well under 1 ms of CPU a second): it costs the machine nothing a latency
  figure could show.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from benchmarks.peers import machine_busy_seconds, process_cpu_seconds
from broker.loop_monitor import SchedStat

SAMPLE_PERIOD_S: Final = 0.25


@dataclass(frozen=True, slots=True)
class CpuSample:
    """Cumulative CPU seconds at one moment (monotonic `at_s`)."""

    at_s: float
    broker_s: float
    load_generator_s: float
    machine_busy_s: float
    # The broker's loop thread (pyrmq's main thread): on a CPU, waiting for one; None unread.
    loop_on_cpu_s: float | None = None
    loop_waited_s: float | None = None


@dataclass(frozen=True, slots=True)
class CpuShares:
    """CPU used over a stretch, in cores (1.0 = one core busy all the stretch)."""

    broker: float
    load_generator: float
    machine: float  # all cores together: at most the machine's CPU count
    loop_on_cpu: float | None = None
    loop_waited: float | None = None

    def text(self) -> str:
        loop = ("" if self.loop_on_cpu is None or self.loop_waited is None else
                f"loop on a CPU {100 * self.loop_on_cpu:.0f} %, waiting for one "
                f"{100 * self.loop_waited:.0f} %; ")
        return (f"{loop}broker {100 * self.broker:.0f} %, load generator "
                f"{100 * self.load_generator:.0f} %, machine {100 * self.machine:.0f} %")


def _nearest(times: Sequence[float], at_s: float) -> int:
    """The index of the time nearest to `at_s` in `times` (ascending, not empty)."""
    index = bisect.bisect_left(times, at_s)
    if index == len(times):
        return index - 1
    if index > 0 and at_s - times[index - 1] <= times[index] - at_s:
        return index - 1
    return index


def shares_between(samples: Sequence[CpuSample], start_s: float, end_s: float, *,
                   slack_s: float = SAMPLE_PERIOD_S) -> CpuShares | None:
    """The shares between the samples nearest to `start_s` and `end_s` (samples in time order),
    over those samples' own times; None when the samples do not reach within `slack_s` of
    either end, or the two ends meet in one sample."""
    if not samples or end_s <= start_s:
        return None
    times = [sample.at_s for sample in samples]
    first = samples[_nearest(times, start_s)]
    last = samples[_nearest(times, end_s)]
    seconds = last.at_s - first.at_s
    if abs(first.at_s - start_s) > slack_s or abs(last.at_s - end_s) > slack_s or seconds <= 0:
        return None

    def share(before: float | None, after: float | None) -> float | None:
        return None if before is None or after is None else (after - before) / seconds

    return CpuShares(
        broker=(last.broker_s - first.broker_s) / seconds,
        load_generator=(last.load_generator_s - first.load_generator_s) / seconds,
        machine=(last.machine_busy_s - first.machine_busy_s) / seconds,
        loop_on_cpu=share(first.loop_on_cpu_s, last.loop_on_cpu_s),
        loop_waited=share(first.loop_waited_s, last.loop_waited_s),
    )


class CpuSampler:
    """Samples a broker, its load generator and the machine every `period_s` in a thread of its
    own, from `start()` to `stop()`; `loop_tid` names the broker's loop thread (None: not
    read, as for a Java broker)."""

    def __init__(self, broker_pid: int, load_generator_pid: int, *, loop_tid: int | None = None,
                 period_s: float = SAMPLE_PERIOD_S) -> None:
        self._broker_pid = broker_pid
        self._load_generator_pid = load_generator_pid
        self._loop_tid = loop_tid
        self._period_s = period_s
        self._samples: list[CpuSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def stop(self) -> tuple[CpuSample, ...]:
        """Stop sampling; the samples taken, in time order."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return tuple(self._samples)

    def _run(self) -> None:
        loop_stat = None if self._loop_tid is None else SchedStat(
            f"/proc/{self._broker_pid}/task/{self._loop_tid}/schedstat")
        try:
            next_s = time.monotonic()
            while not self._stop.is_set():
                sample = self._sample(loop_stat)
                if sample is None:
                    return  # a process has ended: nothing more to measure
                self._samples.append(sample)
                next_s += self._period_s
                self._stop.wait(max(0.0, next_s - time.monotonic()))
        finally:
            if loop_stat is not None:
                loop_stat.close()

    def _sample(self, loop_stat: SchedStat | None) -> CpuSample | None:
        try:
            broker_s = process_cpu_seconds(self._broker_pid)
            load_generator_s = process_cpu_seconds(self._load_generator_pid)
        except (OSError, ValueError):
            return None
        loop = None if loop_stat is None else loop_stat.read()
        return CpuSample(
            at_s=time.monotonic(), broker_s=broker_s, load_generator_s=load_generator_s,
            machine_busy_s=machine_busy_seconds(),
            loop_on_cpu_s=None if loop is None else loop[0] / 1e9,
            loop_waited_s=None if loop is None else loop[1] / 1e9,
        )
