"""Consume-queue lookups, per lookup in µs: by queue offset and by store timestamp.

Peers measured in the same run: indexing an in-memory numpy array of the same units (by
offset), and `numpy.searchsorted` over an in-memory array of the same timestamps (by time).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from pytest_benchmark.fixture import BenchmarkFixture

from benchmarks.conftest import median_seconds, pedantic_median, record
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support.store_helpers import batch

MESSAGES = 300_000
LOOKUPS = 20_000


def _store(root: Path) -> MessageStore:
    clock = [1_700_000_000_000]

    def wall_ms() -> int:
        clock[0] += 1
        return clock[0]

    store = MessageStore(StoreConfig(store_path_root_dir=root,
                                     mapped_file_size_commit_log=256 * 1024 * 1024),
                         wall_ms=wall_ms)
    store.open()
    body = [b"x" * 16] * 100
    for _ in range(MESSAGES // 100):
        store.append_batch(batch(body))
    return store


def test_consume_queue_lookup(benchmark: BenchmarkFixture, tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    queue = store.queue("TopicTest", 0)
    assert queue is not None
    assert queue.max_offset == MESSAGES
    rng = random.Random(7)
    offsets = [rng.randrange(MESSAGES) for _ in range(LOOKUPS)]
    first_ts = store.store_timestamp_at(*queue.unit_at(0)[:2])
    times = [first_ts + rng.randrange(MESSAGES // 100) for _ in range(LOOKUPS)]

    def by_offset() -> None:
        unit_at = queue.unit_at
        for offset in offsets:
            unit_at(offset)

    def by_time() -> None:
        lookup = store.offset_by_time
        for ts in times:
            lookup("TopicTest", 0, ts)

    def nothing() -> tuple[tuple[object, ...], dict[str, object]]:
        return (), {}

    offset_s = pedantic_median(benchmark, by_offset, setup=nothing, rounds=5) / LOOKUPS
    time_s = median_seconds(by_time, rounds=3) / LOOKUPS
    # Peers: the same data as plain in-memory arrays.
    units = np.array([queue.unit_at(i) for i in range(MESSAGES)], dtype=np.int64)
    stamps = np.array([first_ts + i // 100 for i in range(MESSAGES)], dtype=np.int64)

    def peer_offset() -> None:
        for offset in offsets:
            units[offset]

    def peer_time() -> None:
        search = np.searchsorted
        for ts in times:
            search(stamps, ts)

    peer_offset_s = median_seconds(peer_offset, rounds=5) / LOOKUPS
    peer_time_s = median_seconds(peer_time, rounds=5) / LOOKUPS
    # Sanity: the binary search agrees with the in-memory search on every probe.
    for ts in times[:200]:
        assert store.offset_by_time("TopicTest", 0, ts) == int(np.searchsorted(stamps, ts))
    record(f"consume queue lookup by offset: {offset_s * 1e6:.2f} µs; in-memory numpy index "
           f"{peer_offset_s * 1e6:.2f} µs; ratio {offset_s / peer_offset_s:.1f}x")
    record(f"consume queue lookup by timestamp ({MESSAGES:,} units): {time_s * 1e6:.1f} µs; "
           f"in-memory numpy searchsorted {peer_time_s * 1e6:.2f} µs; ratio "
           f"{time_s / peer_time_s:.1f}x")
    store.close()
