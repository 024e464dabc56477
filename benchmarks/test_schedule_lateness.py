"""Delivery lateness of delay-level messages at 10,000 scheduled messages/s.

A real store (in tmp, its background loops running) receives 10,000 level-1 (1 s) messages per
second for SCHEDULE_S seconds, appended in ticks of 10 ms like a busy producer would, while the
ScheduleMessageService in the same event loop delivers them to their real topic (a real re-put,
encoded by the broker's `time_up_message` and appended by `put_messages`, as the broker does).
Lateness, for every message: the wall time when the re-put batch holding it has been appended,
minus its due time (store timestamp + 1 s); a message early in a batch is counted as late as the
batch's last. The peer, in the same test, under the same producer and store load: a bare
asyncio timer (`loop.call_at`) per message at its due time, which does no work at all: the
event loop's own precision. The same timers also run inside the pyrmq run, for the same due
times: on a shared machine, where two runs a few seconds apart can see very different CPU
contention, they say what the loop itself managed at the moments the service delivered.

Both runs use the broker process's heap settings (`broker/heap.py`: the start-up heap frozen,
the young-generation threshold raised; `broker/__main__.py` does this at start): without them a
full collection scans the whole pytest process (every module of every benchmark) and stalls the
loop for tens of milliseconds, which the broker's frozen heap avoids. The line also prints each
run's CPU time and how long its loop thread waited for a CPU (`/proc/thread-self/schedstat`): on
a shared machine that wait largely decides p99 (a run that waited seconds is a loaded run).
Each run's loop is watched by the broker's own loop monitor (broker/loop_monitor.py): its
stalls over STALL_REPORT_MS are printed with their cause, so that a run whose loop was held up
(three CI runs had a p99 of 99-259 ms, the bare timers in the same loop as late) names why.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from benchmarks.conftest import record
from broker.config_file import ConfigFile
from broker.heap import GC_THRESHOLDS
from broker.loop_monitor import LoopMonitor, SchedStat
from broker.schedule_message_service import ScheduleMessageService
from store.config import StoreConfig
from store.host_port import HostPort
from store.message_encoder import prepare_message
from store.message_properties import encode_properties
from store.message_store import MessageStore
from store.record_layout import MessageRecord
from store.schedule import SCHEDULE_TOPIC, parse_message_delay_level, time_up_message

RATE_PER_S: Final = 10_000
SCHEDULE_S: Final = 3
TICK_MS: Final = 10
DELAY_MS: Final = 1_000
HOST: Final = HostPort(bytes([127, 0, 0, 1]), 10911)
STALL_REPORT_MS: Final = 50


@dataclass(frozen=True, slots=True)
class Run:
    lateness_ms: list[float]
    timers_ms: list[float]  # bare timers for the same due times in the same loop, same run
    cpu_s: float  # process CPU time (all threads) during the run
    cpu_wait_s: float | None  # the loop thread's run-queue wait; None where not readable
    stalls: str  # the loop monitor's stalls over STALL_REPORT_MS


def measured(run: Callable[[Path], Coroutine[Any, Any, tuple[list[float], list[float]]]],
             root: Path) -> Run:
    monitor = LoopMonitor(stall_threshold_ms=STALL_REPORT_MS)

    async def monitored() -> tuple[list[float], list[float]]:
        monitor.start()
        try:
            return await run(root)
        finally:
            monitor.close()

    schedstat = SchedStat()  # this thread's: asyncio.run runs the loop in it
    sched_before = schedstat.read()
    cpu_before = time.process_time()
    lateness, timers = asyncio.run(monitored())
    cpu_s = time.process_time() - cpu_before
    sched_after = schedstat.read()
    schedstat.close()
    cpu_wait_s = None if sched_before is None or sched_after is None else \
        (sched_after[1] - sched_before[1]) / 1e9
    return Run(lateness, timers, cpu_s, cpu_wait_s, describe_stalls(monitor))


def describe_stalls(monitor: LoopMonitor) -> str:
    """The monitor's stalls: how many, and the longest with what took its time."""
    if not monitor.reported:
        return f"no loop stall over {STALL_REPORT_MS} ms"
    window, cause, gc_s, stack = max(monitor.reported, key=lambda stall: stall[0].lag_s)
    faults = "-" if window.page_faults is None else "{}/{}".format(*window.page_faults)
    count = len(monitor.reported)
    return (f"{count} loop stall{'s' if count > 1 else ''} over {STALL_REPORT_MS} ms, the longest "
            f"{window.lag_s * 1000:.0f} ms {cause.value} (on the CPU "
            f"{_ms_text(window.on_cpu_s)} ms, waiting for one {_ms_text(window.runqueue_wait_s)} "
            f"ms, page faults {faults}, GC {gc_s * 1000:.0f} ms, running "
            f"{' <- '.join(stack) if stack else '-'})")


def _ms_text(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1000:.0f}"


@contextlib.contextmanager
def broker_heap() -> Iterator[None]:
    """The broker process's heap settings (`broker.heap.freeze_startup_heap`), undone after."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def produce(store: MessageStore, on_append: list[int] | None) -> None:
    """Append RATE_PER_S level-1 messages per second for SCHEDULE_S s, TICK_MS at a time."""
    per_tick = RATE_PER_S * TICK_MS // 1000
    properties = encode_properties(
        {"DELAY": "1", "REAL_TOPIC": "BenchDelay", "REAL_QID": "0", "TAGS": "TagA"}
    )
    started = time.monotonic()
    for tick in range(SCHEDULE_S * 1000 // TICK_MS):
        for _ in range(per_tick):
            msg = prepare_message(
                topic=SCHEDULE_TOPIC, queue_id=0, flag=0, body=b"x" * 64,
                properties=properties, sys_flag=0, born_timestamp=0, born_host=HOST,
                store_host=HOST, max_message_size=1 << 20,
            )
            result = store.append_message(msg)
            if on_append is not None:
                on_append.append(result.store_timestamp + DELAY_MS)
        await asyncio.sleep(max(0.0, started + (tick + 1) * TICK_MS / 1000 - time.monotonic()))


async def fire_timers(due_ms: list[int], lateness: list[float], producing: asyncio.Task[None],
                      total: int) -> None:
    """A bare `loop.call_at` timer per entry of `due_ms` (filled by the producer) at its due
    time, recording its lateness; returns once all `total` have fired."""
    loop = asyncio.get_running_loop()
    offset_s = time.time() - loop.time()
    all_fired = asyncio.Event()

    def fire(due: int) -> None:
        lateness.append(time.time_ns() / 1e6 - due)
        if len(lateness) == total:
            all_fired.set()

    scheduled = 0
    while not producing.done() or scheduled < len(due_ms):
        for due in due_ms[scheduled:]:
            loop.call_at(due / 1000 - offset_s, fire, due)
        scheduled = len(due_ms)
        await asyncio.sleep(TICK_MS / 1000)
    async with asyncio.timeout(30):
        await all_fired.wait()


async def run_pyrmq(root: Path) -> tuple[list[float], list[float]]:
    """(delivery lateness, lateness of bare timers armed in the same loop for the same due
    times: what the loop itself managed at those moments)."""
    store = MessageStore(StoreConfig(store_path_root_dir=root,
                                     mapped_file_size_commit_log=256 * 1024 * 1024))
    store.open()
    lateness: list[float] = []
    timers: list[float] = []
    due_ms: list[int] = []
    total = RATE_PER_S * SCHEDULE_S
    all_delivered = asyncio.Event()

    async def put_time_up(records: Sequence[MessageRecord]) -> int:
        # The broker's put_time_up (broker/processors/send.py) without its pull-hold wake-ups
        # and metrics: the same encoding and the same one store call per batch.
        result = await store.put_messages([
            time_up_message(record, append_prop_crc=True, max_message_size=1 << 20)
            for record in records
        ])
        appended_ms = time.time_ns() / 1e6
        lateness.extend(appended_ms - (record.store_timestamp + DELAY_MS) for record in records)
        if len(lateness) == total:
            all_delivered.set()
        return len(result.appended)

    service = ScheduleMessageService(
        store=store, delays_ms=parse_message_delay_level("1s"),
        file=ConfigFile(root / "config" / "delayOffset.json"), put_time_up=put_time_up,
        flush_delay_offset_interval_ms=10_000,
    )
    service.load()
    try:
        async with asyncio.TaskGroup() as group:
            store_task = group.create_task(store.run())
            service_task = group.create_task(service.run())
            producing = group.create_task(produce(store, due_ms))
            await fire_timers(due_ms, timers, producing, total)
            async with asyncio.timeout(30):
                await all_delivered.wait()
            service_task.cancel()
            store_task.cancel()
    finally:
        store.close()
    return lateness, timers


async def run_bare_timers(root: Path) -> tuple[list[float], list[float]]:
    """(lateness of bare timers, the same) with the same producer and store loops, without
    the service."""
    store = MessageStore(StoreConfig(store_path_root_dir=root,
                                     mapped_file_size_commit_log=256 * 1024 * 1024))
    store.open()
    lateness: list[float] = []
    due_ms: list[int] = []
    try:
        async with asyncio.TaskGroup() as group:
            store_task = group.create_task(store.run())  # the same background loops as pyrmq's
            producing = group.create_task(produce(store, due_ms))
            await fire_timers(due_ms, lateness, producing, RATE_PER_S * SCHEDULE_S)
            store_task.cancel()
    finally:
        store.close()
    return lateness, lateness


def test_schedule_delivery_lateness(tmp_path: Path) -> None:
    with broker_heap():
        pyrmq = measured(run_pyrmq, tmp_path / "pyrmq")
        bare = measured(run_bare_timers, tmp_path / "bare")
    late, shadow, peer = pyrmq.lateness_ms, pyrmq.timers_ms, bare.lateness_ms
    record(
        f"schedule: {RATE_PER_S:,} level-1 msg/s for {SCHEDULE_S} s: delivery lateness "
        f"p50 {percentile(late, 0.5):.1f} ms, p99 {percentile(late, 0.99):.1f} ms, "
        f"max {max(late):.1f} ms (CPU {pyrmq.cpu_s:.2f} s, loop waited "
        f"{_ms_text(pyrmq.cpu_wait_s)} ms for a CPU, {pyrmq.stalls}; bare timers in the same loop "
        f"p99 {percentile(shadow, 0.99):.1f} ms); bare asyncio timers alone under the same "
        f"producer and store p50 {percentile(peer, 0.5):.1f} ms, p99 "
        f"{percentile(peer, 0.99):.1f} ms (CPU {bare.cpu_s:.2f} s, waited "
        f"{_ms_text(bare.cpu_wait_s)} ms, {bare.stalls}); mean lateness ratio "
        f"{statistics.mean(late) / max(statistics.mean(peer), 0.001):.1f}"
    )
