"""Bulk live dispatch (a slave's received range, a backlog reaching confirmOffset) writes exactly
the units the per-record dispatch writes, and skips and counts exactly the same records; so does
a master's dispatch of the records it kept from their appends (`MessageStore._appended`).

Two levels: the dispatcher over arbitrary record fields (duplicates, gaps, non-dispatched
transaction types, the schedule topic, a queue that already holds units), and the store over
real commitlog bytes with confirmOffset moving in steps that end inside records and files.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from store import message_store as message_store_module
from store.consume_queue_store import ConsumeQueueStore
from store.dispatch import Dispatcher
from store.message_store import MessageStore
from store.record_check import CheckStatus, RecordCheck
from store.recovery import RecordBatch
from store.schedule import SCHEDULE_TOPIC
from tests.support.store_helpers import batch, message, small_config

TOPICS = ("TopicA", "TopicB", SCHEDULE_TOPIC)
SYS_FLAGS = (0, 0, 0, 0x4, 0x8, 0xC)  # NOT (mostly), PREPARED, COMMIT, ROLLBACK

# (topic index, queue id, queue offset step: 0 = next, -1 = a duplicate, +k = a gap of k,
#  sys flag, size)
records_strategy = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 2),
              st.sampled_from((0, 0, 0, 0, -1, 1, 3)), st.sampled_from(SYS_FLAGS),
              st.integers(100, 300)),
    max_size=120,
)


def _checks(spec: list[tuple[int, int, int, int, int]]) -> list[RecordCheck]:
    next_offset: dict[tuple[int, int], int] = {}
    checks = []
    phy = 1000
    for index, (topic, queue_id, step, sys_flag, size) in enumerate(spec):
        key = (topic, queue_id)
        offset = max(0, next_offset.get(key, 0) + step)
        next_offset[key] = offset + 1
        checks.append(RecordCheck(CheckStatus.VALID, size, topic=TOPICS[topic],
                                  queue_id=queue_id, queue_offset=offset,
                                  store_timestamp=1_700_000_000_000 + index,
                                  tags_code=index * 7, sys_flag=sys_flag, phy_offset=phy))
        phy += size
    return checks


def _batch(checks: list[RecordCheck]) -> RecordBatch:
    def column(name: str) -> npt.NDArray[np.int64]:
        return np.array([getattr(c, name) for c in checks], dtype=np.int64)

    return RecordBatch(TOPICS, np.array([TOPICS.index(c.topic) for c in checks], dtype=np.int64),
                       column("queue_id"), column("queue_offset"), column("phy_offset"),
                       column("size"), column("sys_flag"), column("store_timestamp"),
                       column("tags_code"))


def _state(dispatcher: Dispatcher) -> tuple[object, ...]:
    queues = {}
    for queue in dispatcher.consume_queues:
        units = [queue.unit_at(offset) for offset in range(queue.min_offset, queue.max_offset)]
        queues[(queue.topic, queue.queue_id)] = (queue.min_offset, queue.max_offset, units)
    return (queues, dispatcher.skipped_total, dict(dispatcher.skipped),
            dispatcher.last_store_timestamp)


@settings(max_examples=150, deadline=None)
@given(spec=records_strategy, prefix=st.integers(0, 120), cuts=st.lists(st.integers(0, 120)))
def test_dispatcher_bulk_equals_per_record(tmp_path_factory: object, spec: list[
        tuple[int, int, int, int, int]], prefix: int, cuts: list[int]) -> None:
    checks = _checks(spec)
    prefix = min(prefix, len(checks))
    root = tmp_path_factory.mktemp("cq")  # type: ignore[attr-defined]
    one = Dispatcher(ConsumeQueueStore(root / "one", 100 * 20))
    bulk = Dispatcher(ConsumeQueueStore(root / "bulk", 100 * 20))
    for check in checks[:prefix]:  # both queues already hold units
        one.dispatch_live(check)
        bulk.dispatch_live(check)
    touched_one = set()
    for check in checks[prefix:]:
        one.dispatch_live(check)
        touched_one.add((check.topic, check.queue_id))
    touched_bulk: set[tuple[str, int]] = set()
    points = sorted({prefix, len(checks), *(min(max(c, prefix), len(checks)) for c in cuts)})
    for start, stop in itertools.pairwise(points):
        bulk.dispatch_live_batch(_batch(checks[start:stop]), touched_bulk)
    assert _state(bulk) == _state(one)
    assert touched_bulk == touched_one


def _store_state(store: MessageStore) -> tuple[object, ...]:
    queues = {}
    for queue in store.consume_queues:
        units = [queue.unit_at(offset) for offset in range(queue.min_offset, queue.max_offset)]
        queues[(queue.topic, queue.queue_id)] = units
    return queues, store.reput_from_offset, store.dispatch_skipped_total


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(0, 5), st.integers(10, 3000)), min_size=1,
                      max_size=150),
       steps=st.lists(st.integers(1, 40_000), min_size=1, max_size=12))
def test_store_bulk_dispatch_equals_per_record(tmp_path_factory: object,
                                               sizes: list[tuple[int, int]],
                                               steps: list[int]) -> None:
    """confirmOffset moves in arbitrary steps (inside records, across 64 KiB files). Three
    stores: the scan record by record, the scan in bulk, and the kept records (no scan)."""
    root = tmp_path_factory.mktemp("store")  # type: ignore[attr-defined]
    stores = []
    for name in ("one", "bulk", "kept"):
        store = MessageStore(small_config(root / name, enable_controller_mode=True))
        store.open()
        store.confirm_follows_max = False
        for kind, size in sizes:
            topic = TOPICS[kind % 2]
            if kind == 5:  # a batch: its units are the scan's
                store.append_batch(batch([b"c" * size, b"d" * (size // 2)], topic=topic,
                                         queue_id=kind % 3))
            else:  # kind 4: PREPARED, no unit
                store.append_message(message(b"b" * size, topic=topic, queue_id=kind % 3,
                                             tags=f"t{kind}", sys_flag=0x4 if kind == 4 else 0))
        if name != "kept" and store._appended:
            store._appended.clear()  # dispatch by scan, from the reput offset
        stores.append(store)
    arrivals: list[list[tuple[str, int, int]]] = [[], [], []]
    try:
        for store, seen in zip(stores, arrivals, strict=True):
            store.arrival_listener = lambda t, q, o, seen=seen: seen.append((t, q, o))
        end = stores[0].max_phy_offset
        assert end == stores[1].max_phy_offset
        original = message_store_module.BULK_DISPATCH_BYTES
        confirm = 0
        for step in [*steps, end]:
            confirm = min(end, confirm + step)
            for store, threshold in zip(stores, (1 << 62, 0, 0), strict=True):
                setattr(message_store_module, "BULK_DISPATCH_BYTES", threshold)  # noqa: B010
                try:
                    store.set_confirm_offset(confirm)
                finally:
                    setattr(message_store_module, "BULK_DISPATCH_BYTES", original)  # noqa: B010
            for other in (1, 2):
                assert _store_state(stores[other]) == _store_state(stores[0])
                assert sorted(arrivals[other]) == sorted(arrivals[0])
            for seen in arrivals:
                seen.clear()
        assert stores[1].dispatch_behind_bytes == 0
        assert stores[2].dispatch_behind_bytes == 0
    finally:
        for store in stores:
            store.close()


def test_store_bulk_dispatch_is_used_above_the_threshold(tmp_path: Path) -> None:
    """A guard that the property above compares two different paths."""
    store = MessageStore(small_config(tmp_path, enable_controller_mode=True))
    store.open()
    try:
        store.confirm_follows_max = False
        for index in range(100):
            store.append_message(message(b"x" * 1000, queue_id=index % 2))
        store._appended.clear()  # not the kept records: the scan from the reput offset
        calls: list[int] = []
        original = store._dispatch_bulk

        def spy(start: int, end: int, touched: set[tuple[str, int]]) -> int:
            calls.append(end - start)
            return original(start, end, touched)

        store._dispatch_bulk = spy  # type: ignore[method-assign]
        store.set_confirm_offset(store.max_phy_offset)
        assert calls
        assert calls[0] >= message_store_module.BULK_DISPATCH_BYTES
        assert store.max_offset_in_queue("TopicTest", 0) == 50
        assert store.max_offset_in_queue("TopicTest", 1) == 50
    finally:
        store.close()


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 8), st.integers(10, 3000), st.floats(0, 1)),
                    min_size=1, max_size=120))
def test_store_kept_dispatch_equals_the_scan_with_appends_between(
    tmp_path_factory: object, ops: list[tuple[int, int, float]],
) -> None:
    """Appends (single, PREPARED, batch), confirmOffset moves (inside records too) and
    truncations interleaved: the store that keeps its appends writes the same units, tells the
    arrival listener of the same queues and gives the same queue offsets as one that reads
    every record back."""
    root = tmp_path_factory.mktemp("store")  # type: ignore[attr-defined]
    stores = []
    for name in ("scan", "kept"):
        store = MessageStore(small_config(root / name, enable_controller_mode=True))
        store.open()
        store.confirm_follows_max = False
        stores.append(store)
    scan, kept = stores
    scan._keep_appended = lambda log_end, record: scan._appended.clear()  # type: ignore[method-assign]
    arrivals: list[list[tuple[str, int, int]]] = [[], []]
    for store, seen in zip(stores, arrivals, strict=True):
        store.arrival_listener = lambda t, q, o, seen=seen: seen.append((t, q, o))
    try:
        last_start: int | None = None
        for kind, size, where in ops:
            results = []
            for store in stores:
                topic = TOPICS[kind % 2]
                if kind == 5:
                    result = store.append_batch(batch([b"c" * size, b"d" * (size // 2)],
                                                      topic=topic, queue_id=kind % 3))
                elif kind == 6:  # confirmOffset moves, to a record end or inside a record
                    confirm = store.confirm_offset
                    store.set_confirm_offset(confirm + int(where * (store.max_phy_offset -
                                                                    confirm)))
                    continue
                elif kind == 7:  # a cut at the last record's start, when above confirmOffset
                    if last_start is not None and last_start >= store.confirm_offset:
                        store.truncate_to_blocking(last_start)
                    continue
                else:  # kind 4: PREPARED, no unit
                    result = store.append_message(message(
                        b"b" * size, topic=topic, queue_id=kind % 3, tags=f"t{kind}",
                        sys_flag=0x4 if kind == 4 else 0))
                results.append((result.phy_offset, result.queue_offset))
            if kind == 7:
                last_start = None
            elif kind != 6:
                assert results[0] == results[1]
                last_start = results[0][0]
            assert _store_state(kept) == _store_state(scan)
            assert sorted(arrivals[1]) == sorted(arrivals[0])
            for seen in arrivals:
                seen.clear()
        for store in stores:
            store.set_confirm_offset(store.max_phy_offset)
        assert _store_state(kept) == _store_state(scan)
        assert kept.dispatch_behind_bytes == 0
    finally:
        for store in stores:
            store.close()
