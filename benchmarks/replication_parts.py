"""What the replication benchmark's processes share (benchmarks/test_ha_replication.py and its
child processes, benchmarks/replication_child.py): the store and HA settings, the broker's heap
settings and the loop ticker."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import heapq
import resource
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from benchmarks.host_pauses import SLOW_SPEED, Pause, Speed, paused_within
from benchmarks.peers import steal_seconds
from broker.heap import freeze_startup_heap
from broker.loop_monitor import SchedStat
from ha.config import HAConfig
from store.config import StoreConfig

FILE_BYTES: Final = 128 * 1024 * 1024
BATCH: Final = 32 * 1024  # haTransferBatchSize, Java's default


def store_config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=FILE_BYTES,
                       enable_controller_mode=True)


def ha_config(broker_id: int) -> HAConfig:
    return HAConfig(broker_id=broker_id, ha_listen_port=0, bind_address="127.0.0.1",
                    ha_transfer_batch_size=BATCH, reconnect_interval_ms=50)


@contextlib.contextmanager
def broker_heap() -> Iterator[None]:
    """The heap settings a broker process runs with (`broker.heap.freeze_startup_heap`: what
    is alive now frozen out of later collections, the broker's thresholds), undone after."""
    thresholds = gc.get_threshold()
    freeze_startup_heap()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


class Ticker:
    """Measures how late a 1 ms sleep wakes up: the event loop's stalls. `worst_s` is the worst
    lateness; `worst_own_s` the worst lateness less the time the loop thread waited for a CPU
    meanwhile (its /proc schedstat run-queue wait): what the loop itself took, or was blocked
    in, rather than what other threads and processes (the VM's kernel threads included) took
    from it on a busy machine. `late` keeps the LATE_KEPT_MAX worst latenesses of LATE_KEPT_S
    or more, each as (when it ended, wall clock; lateness), so that `worst_less_pauses_s` can
    take out what the host's pauses of the whole VM took (benchmarks/host_pauses.py)."""

    LATE_KEPT_S: Final = 0.002
    LATE_KEPT_MAX: Final = 2048  # a child's `done` line carries them: some 45 KB at most

    def __init__(self) -> None:
        self.worst_s = 0.0
        self.worst_own_s = 0.0
        self._worst: list[tuple[float, float]] = []  # a min-heap of (lateness, end)
        # Page faults of this process that read from the disk, from start() to stop(): a page
        # of the page cache or a mapping the kernel had dropped (blocks the loop).
        self.major_faults = 0
        # CPU time the host took from this VM's CPUs (/proc/stat steal, all CPUs, 10 ms
        # resolution), from start() to stop(): a stall no code in the guest causes.
        self.steal_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        schedstat = SchedStat()
        try:
            while True:
                before = schedstat.read()
                started = time.perf_counter()
                await asyncio.sleep(0.001)
                late = time.perf_counter() - started - 0.001
                after = schedstat.read()
                waited = 0.0 if before is None or after is None else (after[1] - before[1]) / 1e9
                self.worst_s = max(self.worst_s, late)
                self.worst_own_s = max(self.worst_own_s, late - waited)
                if late >= self.LATE_KEPT_S:
                    if len(self._worst) < self.LATE_KEPT_MAX:
                        heapq.heappush(self._worst, (late, time.time()))
                    else:
                        heapq.heappushpop(self._worst, (late, time.time()))
        finally:
            schedstat.close()

    def start(self) -> None:
        self.major_faults = -resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        self.steal_s = -steal_seconds()
        self._task = asyncio.create_task(self._run())

    @property
    def late(self) -> list[tuple[float, float]]:
        """(end, lateness) of the kept latenesses, in time order."""
        return sorted((end, late) for late, end in self._worst)

    def late_text(self) -> str:
        """`late` as one word for a child's `done` line: `end:late,...`, or `-`."""
        return ",".join(f"{end:.4f}:{late:.4f}" for end, late in self.late) or "-"

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self.major_faults += resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        self.steal_s += steal_seconds()


def parse_late(text: str) -> list[tuple[float, float]]:
    """The inverse of `Ticker.late_text`."""
    if text == "-":
        return []
    return [(float(end), float(late))
            for end, late in (item.split(":") for item in text.split(","))]


def worst_less_pauses_s(late: Iterable[tuple[float, float]], pauses: Iterable[Pause]) -> float:
    """The worst of `late` (`Ticker.late`) less the VM's `pauses` inside each."""
    kept = list(pauses)
    return max((lateness - paused_within(end - lateness, end, kept) for end, lateness in late),
               default=0.0)


def worst_host_free_s(late: Iterable[tuple[float, float]], pauses: Iterable[Pause],
                      speed: Callable[[float, float], Speed | None]) -> float:
    """The worst of `late` (`Ticker.late`) with no pause of the VM inside it and no CPU below
    SLOW_SPEED of full speed through it (`HostRecords.speed`; unmeasured counts as full
    speed); 0.0 if none of those was kept (all under `Ticker.LATE_KEPT_S`)."""
    kept = list(pauses)

    def host_free(end: float, lateness: float) -> bool:
        if paused_within(end - lateness, end, kept) > 0:
            return False
        measured = speed(end - lateness, end)
        return measured is None or measured.slowest >= SLOW_SPEED

    return max((lateness for end, lateness in late if host_free(end, lateness)), default=0.0)
