"""Delivery lateness of delay-level messages at 10,000 scheduled messages/s.

A real store (in tmp) receives 10,000 level-1 (1 s) messages per second for SCHEDULE_S seconds,
appended in ticks of 10 ms like a busy producer would, while the ScheduleMessageService in the
same event loop delivers them to their real topic (a real re-put). Lateness = the re-put's
wall time minus the due time (store timestamp + 1 s). The peer, in the same run and under the
same producer load: a bare asyncio timer (`loop.call_at`) per message at its due time, which
does no work at all: the event loop's own precision.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Final

from benchmarks.conftest import record
from broker.config_file import ConfigFile
from broker.schedule_message_service import ScheduleMessageService
from store.config import StoreConfig
from store.host_port import HostPort
from store.message_encoder import prepare_message
from store.message_properties import encode_properties
from store.message_store import MessageStore
from store.record_layout import MessageRecord
from store.schedule import SCHEDULE_TOPIC, parse_message_delay_level, time_up_destination

RATE_PER_S: Final = 10_000
SCHEDULE_S: Final = 3
TICK_MS: Final = 10
DELAY_MS: Final = 1_000
HOST: Final = HostPort(bytes([127, 0, 0, 1]), 10911)


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


async def run_pyrmq(root: Path) -> list[float]:
    store = MessageStore(StoreConfig(store_path_root_dir=root,
                                     mapped_file_size_commit_log=256 * 1024 * 1024))
    store.open()
    lateness: list[float] = []
    total = RATE_PER_S * SCHEDULE_S
    all_delivered = asyncio.Event()

    async def put_time_up(scheduled: MessageRecord) -> bool:
        properties = scheduled.properties_map()
        topic, queue_id = time_up_destination(properties)
        msg = prepare_message(
            topic=topic, queue_id=queue_id, flag=scheduled.flag, body=scheduled.body,
            properties=encode_properties(properties), sys_flag=scheduled.sys_flag,
            born_timestamp=scheduled.born_timestamp, born_host=scheduled.born_host,
            store_host=scheduled.store_host, max_message_size=1 << 20,
        )
        await store.put_message(msg)
        lateness.append(time.time_ns() / 1e6 - (scheduled.store_timestamp + DELAY_MS))
        if len(lateness) == total:
            all_delivered.set()
        return True

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
            await produce(store, None)
            async with asyncio.timeout(30):
                await all_delivered.wait()
            service_task.cancel()
            store_task.cancel()
    finally:
        store.close()
    return lateness


async def run_bare_timers(root: Path) -> list[float]:
    store = MessageStore(StoreConfig(store_path_root_dir=root,
                                     mapped_file_size_commit_log=256 * 1024 * 1024))
    store.open()
    loop = asyncio.get_running_loop()
    lateness: list[float] = []
    due_ms: list[int] = []
    offset_s = time.time() - loop.time()
    all_fired = asyncio.Event()

    def fire(due: int) -> None:
        lateness.append(time.time_ns() / 1e6 - due)
        if len(lateness) == RATE_PER_S * SCHEDULE_S:
            all_fired.set()

    try:
        producing = asyncio.ensure_future(produce(store, due_ms))
        scheduled = 0
        while not producing.done() or scheduled < len(due_ms):
            for due in due_ms[scheduled:]:
                loop.call_at(due / 1000 - offset_s, fire, due)
            scheduled = len(due_ms)
            await asyncio.sleep(TICK_MS / 1000)
        await producing
        async with asyncio.timeout(30):
            await all_fired.wait()
    finally:
        store.close()
    return lateness


def test_schedule_delivery_lateness(tmp_path: Path) -> None:
    pyrmq = asyncio.run(run_pyrmq(tmp_path / "pyrmq"))
    bare = asyncio.run(run_bare_timers(tmp_path / "bare"))
    p50, p99 = percentile(pyrmq, 0.5), percentile(pyrmq, 0.99)
    peer_p50, peer_p99 = percentile(bare, 0.5), percentile(bare, 0.99)
    record(
        f"schedule: {RATE_PER_S:,} level-1 msg/s for {SCHEDULE_S} s: delivery lateness "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(pyrmq):.1f} ms; bare asyncio timers "
        f"under the same load p50 {peer_p50:.1f} ms, p99 {peer_p99:.1f} ms "
        f"(mean lateness ratio {statistics.mean(pyrmq) / max(statistics.mean(bare), 0.001):.1f})"
    )
