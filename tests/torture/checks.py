"""Checks of a recovered store against the oracle, shared by the three torture families.

The walk (`walk_log`) reads the recovered commitlog files independently of the store's recovery:
record by record from each file's start, each record checked (magic, lengths, PHYSICALOFFSET,
body CRC, whole-record CRC) and its body's own key and CRC verified (workload.py), so a record
that survives is provably the one the writer produced at that offset.

Every check raises `AssertionError` with the numbers that differ; callers add the seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from store.message_decoder import decode_record
from store.message_store import GetStatus, MessageStore
from store.record_check import CheckStatus, check_record
from tests.torture.workload import QUEUE_COUNT, TOPIC, Rec, body_key, java_hash


def walk_log(store: MessageStore, *, from_offset: int = 0) -> list[Rec]:
    """Every record of the recovered log at or after `from_offset` (a record start or file
    start), in offset order. Asserts that nothing below `max_phy_offset` is invalid and that the
    walk ends exactly at `max_phy_offset`."""
    max_phy = store.max_phy_offset
    files = store.commitlog.files.files
    out: list[Rec] = []
    reached = from_offset if files else 0
    for mapped in files:
        base = mapped.file_from_offset
        if mapped.file_end_offset <= from_offset:
            continue
        pos = max(0, from_offset - base)
        while base + pos < max_phy:
            check = check_record(mapped.buf, pos, limit=mapped.file_size,
                                 expected_phy_offset=base + pos, check_body_crc=True,
                                 verify_prop_crc=True)
            if check.status is CheckStatus.BLANK:
                assert check.size == mapped.file_size - pos, (
                    f"BLANK at {base + pos} declares {check.size} bytes, "
                    f"{mapped.file_size - pos} remain")
                pos = mapped.file_size
                break
            assert check.status is CheckStatus.VALID, (
                f"record at {base + pos} is invalid below max_phy_offset={max_phy}: "
                f"{check.reason}")
            record = decode_record(mapped.buf, pos)
            tags = record.tags
            out.append(Rec(base + pos, base + pos + record.total_size, body_key(record.body),
                           record.queue_id, record.queue_offset, record.store_timestamp,
                           java_hash(tags) if tags else 0))
            pos += record.total_size
        reached = base + pos
        if reached >= max_phy:
            break
    assert reached == max_phy, f"walk ended at {reached}, max_phy_offset={max_phy}"
    return out


def check_tail(store: MessageStore) -> None:
    """After `max_phy_offset` the file holding it is zeros, and no file starts beyond it."""
    max_phy = store.max_phy_offset
    files = store.commitlog.files.files
    if not files:
        assert max_phy == 0, f"no commitlog file but max_phy_offset={max_phy}"
        return
    last = files[-1]
    assert last.file_from_offset <= max_phy <= last.file_end_offset, (
        f"last file {last.path.name} does not hold max_phy_offset={max_phy}")
    on_disk = sorted(p.name for p in store.config.commitlog_dir.iterdir())
    assert on_disk == [m.path.name for m in files], f"commitlog dir {on_disk} != loaded files"
    if max_phy < last.file_end_offset:
        pos = max_phy - last.file_from_offset
        tail = last.buf[pos:]
        if tail.count(0) != len(tail):
            first = next(i for i, b in enumerate(tail) if b)
            raise AssertionError(
                f"byte {max_phy + first} after max_phy_offset={max_phy} is {tail[first]:#04x}, "
                "not zero (a stale record could come back)")


def first_difference(got: Sequence[object], want: Sequence[object]) -> str:
    for index, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"first difference at #{index}: got {g}, expected {w}"
    return f"lengths differ: got {len(got)}, expected {len(want)}"


def check_prefix(records: Sequence[Rec], oracle: Sequence[Rec], *, at_least: int,
                 what: str) -> None:
    """`records` is a prefix of `oracle` (no gap, nothing foreign) of length >= `at_least`."""
    n = len(records)
    assert n <= len(oracle), (
        f"{what}: {n} records recovered, the oracle has only {len(oracle)}; "
        f"{first_difference(records, oracle)}")
    assert list(records) == list(oracle[:n]), (
        f"{what}: recovered records are not a prefix of the oracle; "
        f"{first_difference(records, oracle[:n])}")
    assert n >= at_least, (
        f"{what}: {n} records recovered, {at_least} required "
        f"(first missing: {oracle[n] if n < len(oracle) else None})")


@dataclass(frozen=True, slots=True)
class QueueState:
    """What recovery left in one consume queue: units as (phy, size, tagsCode), next offset."""

    units: tuple[tuple[int, int, int], ...]
    next_queue_offset: int
    min_offset: int


def queue_states(store: MessageStore) -> list[QueueState]:
    states = []
    for queue_id in range(QUEUE_COUNT):
        queue = store.queue(TOPIC, queue_id)
        count = queue.max_offset if queue is not None else 0
        units = tuple(queue.unit_at(i) for i in range(count)) if queue is not None else ()
        states.append(QueueState(units, store.next_queue_offset(TOPIC, queue_id),
                                 store.min_offset_in_queue(TOPIC, queue_id)))
    return states


def check_consume_queues(store: MessageStore, records: Sequence[Rec], *,
                         dispatched_end: int) -> None:
    """Each queue is dense from 0 and matches, unit by unit, exactly its records ending at or
    below `dispatched_end` (confirmOffset in controller mode, else `max_phy_offset`). The next
    queue offset counts every record, dispatched or not (M5)."""
    for queue_id, state in enumerate(queue_states(store)):
        mine = [r for r in records if r.queue_id == queue_id]
        want_count = sum(1 for r in mine if r.end <= dispatched_end)
        count = len(state.units)
        assert count == want_count, (
            f"queue {queue_id}: {count} units, expected {want_count} (its records ending at or "
            f"below {dispatched_end})")
        want = tuple((r.start, r.size, r.tags_code) for r in mine[:count])
        assert state.units == want, (
            f"queue {queue_id}: units differ from the records; "
            f"{first_difference(state.units, want)}")
        assert state.min_offset == 0, f"queue {queue_id}: min offset {state.min_offset} != 0"
        assert state.next_queue_offset == len(mine), (
            f"queue {queue_id}: next queue offset {state.next_queue_offset} != "
            f"{len(mine)} records in the log (M5)")


def check_lookups(store: MessageStore, records: Sequence[Rec]) -> None:
    """Each record reads back by offset (verified read) and, when dispatched, by queue offset."""
    for rec in records:
        raw = store.commitlog.read_record(rec.start, rec.size)
        key = body_key(decode_record(raw).body)
        assert key == rec.key, f"record at {rec.start}: key {key} != {rec.key}"
        queue = store.queue(TOPIC, rec.queue_id)
        if queue is None or rec.queue_offset >= queue.max_offset:
            continue
        result = store.get_messages(TOPIC, rec.queue_id, rec.queue_offset, max_count=1)
        assert result.status is GetStatus.FOUND, (
            f"queue {rec.queue_id} offset {rec.queue_offset}: {result.status}")
        key = body_key(decode_record(result.messages[0]).body)
        assert key == rec.key, (
            f"queue {rec.queue_id} offset {rec.queue_offset}: key {key} != {rec.key}")


def epoch_pairs(store: MessageStore) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in store.epoch_cache]
