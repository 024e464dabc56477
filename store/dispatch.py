"""Dispatch: writing consume-queue units for commitlog records (RocketMQ's CommitLogDispatcher).

Used by recovery (records found by the scan, one by one or in bulk) and by the live store
(records up to the dispatch bound). Which records get a unit is `takes_queue_offset`'s rule
(store/transaction_type.py): TRANSACTION_NOT and COMMIT records only.

Invariants:
- Within a queue, units follow the log: a record's unit is written only when its queue offset
  is the queue's next one. One the queue holds already is skipped (idempotent re-dispatch).
- During recovery a record that lands past the queue's end (the queue lost units: a power loss
  tore it) marks the queue for a rebuild from the first commitlog file, instead of leaving a
  hole; `rebuild_queues` does that after the scan.
- A unit the queue still refuses (`QueueOrderError`: a gap that a rebuild does not close, as in
  stores written before issue 12's fix) is *skipped*, never fatal: the record stays in the
  commitlog unserved, the first skip of each queue is logged at ERROR, every skip is counted
  (`skipped_total`, the broker's gauge `pyrmq_store_dispatch_skipped`), and dispatch goes on with
  the next record, so one bad record never stops the other queues.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Sequence

import numpy as np

from store.consume_queue import ConsumeQueue
from store.consume_queue_store import ConsumeQueueStore
from store.errors import QueueOrderError
from store.mapped_file import MappedFile
from store.record_check import RecordCheck
from store.recovery import RecordBatch, scan_file
from store.schedule import DEFAULT_DELAYS_MS, SCHEDULE_TOPIC, unit_tags_code
from store.transaction_type import takes_queue_offset, takes_queue_offset_array

log = logging.getLogger(__name__)


class Dispatcher:
    """Writes units into the store's consume queues; remembers the last dispatched record's
    store timestamp (the checkpoint's logicsMsgTimestamp), in recovery the queues to rebuild,
    and the records whose unit was refused (skipped)."""

    __slots__ = ("consume_queues", "delays_ms", "last_store_timestamp", "logged", "skipped",
                 "skipped_total", "to_rebuild")

    def __init__(self, consume_queues: ConsumeQueueStore, *, last_store_timestamp: int = 0,
                 delays_ms: tuple[int, ...] = DEFAULT_DELAYS_MS) -> None:
        self.consume_queues = consume_queues
        self.last_store_timestamp = last_store_timestamp
        self.delays_ms = delays_ms  # messageDelayLevel: schedule-topic units hold deliver times
        self.to_rebuild: set[tuple[str, int]] = set()
        # Skipped records per queue since the last `take_skipped_queues` (the store realigns
        # those queues' counters), and in all since the store opened.
        self.skipped: Counter[tuple[str, int]] = Counter()
        self.skipped_total = 0
        self.logged: set[tuple[str, int]] = set()  # queues whose first skip was logged

    def refused(self, topic: str, queue_id: int, err: QueueOrderError, count: int = 1) -> None:
        """Count `count` records of a queue whose units were refused; log the queue's first."""
        key = (topic, queue_id)
        if key not in self.logged:
            self.logged.add(key)
            log.error("record not dispatched, it will not be served: %s; later records of "
                      "topic=%s queue_id=%d refused alike are counted, not logged",
                      err, topic, queue_id)
        self.skipped[key] += count
        self.skipped_total += count

    def take_skipped_queues(self) -> list[tuple[str, int]]:
        """Queues with skipped records since the last call (their counters need realigning)."""
        keys = list(self.skipped)
        self.skipped.clear()
        return keys

    def _put(self, queue: ConsumeQueue, check: RecordCheck) -> bool:
        try:
            queue.put(check.queue_offset, check.phy_offset, check.size, self._tags_code(check))
        except QueueOrderError as err:
            self.refused(check.topic, check.queue_id, err)
            return False
        return True

    def _tags_code(self, check: RecordCheck) -> int:
        return unit_tags_code(check.topic, check.queue_id, check.store_timestamp,
                              check.tags_code, self.delays_ms)

    def dispatch_live(self, check: RecordCheck) -> bool:
        """A record reached the dispatch bound: write its unit unless the queue has it."""
        if not takes_queue_offset(check.sys_flag):
            return False
        queue = self.consume_queues.get_or_create(check.topic, check.queue_id)
        if check.queue_offset < queue.max_offset or not self._put(queue, check):
            return False
        self.last_store_timestamp = check.store_timestamp
        return True

    def dispatch_appended(self, queue: ConsumeQueue, queue_offset: int, phy_offset: int,
                          size: int, tags_code: int, store_timestamp: int) -> bool:
        """`dispatch_live` for a record the store kept from its append (no second read):
        the same rules, `tags_code` the unit's already."""
        if queue_offset < queue.max_offset:
            return False
        try:
            queue.put(queue_offset, phy_offset, size, tags_code)
        except QueueOrderError as err:
            self.refused(queue.topic, queue.queue_id, err)
            return False
        self.last_store_timestamp = store_timestamp
        return True

    def dispatch_recovered(self, check: RecordCheck) -> bool:
        """A record found by recovery: write its unit if its queue lacks it; a queue that lost
        units before it is marked for rebuild."""
        key = (check.topic, check.queue_id)
        if key in self.to_rebuild or not takes_queue_offset(check.sys_flag):
            return False
        queue = self.consume_queues.get_or_create(check.topic, check.queue_id)
        if check.queue_offset < queue.max_offset:
            return False  # already there (idempotent re-dispatch)
        if check.queue_offset > queue.max_offset and queue.max_offset > queue.min_offset_in_files:
            self.to_rebuild.add(key)
            return False
        if not self._put(queue, check):
            return False
        self.last_store_timestamp = check.store_timestamp
        return True

    def dispatch_recovered_batch(self, batch: RecordBatch, *, bound: int | None) -> int:
        """`dispatch_recovered` for a batch, one `put_batch` per run of a queue; records ending
        past `bound` (controller mode's confirmOffset) are left out."""
        return self._dispatch_batch(batch, bound=bound, live=False)

    def dispatch_live_batch(self, batch: RecordBatch,
                            touched: set[tuple[str, int]] | None = None) -> int:
        """`dispatch_live` for each record of a batch, in bulk (a slave's received byte range,
        a backlog reaching confirmOffset); `touched` gets every (topic, queue_id) met."""
        return self._dispatch_batch(batch, bound=None, live=True, touched=touched)

    def _dispatch_batch(self, batch: RecordBatch, *, bound: int | None, live: bool,
                        touched: set[tuple[str, int]] | None = None) -> int:
        """Queues are independent, so each queue's records (in log order) get the per-record
        rules of `dispatch_live` / `dispatch_recovered`: skip what the queue holds, and a
        consecutive run is put at once. A record past the queue's next offset is refused
        (live: counted, skipped) or marks the queue for rebuild (recovery)."""
        keep = takes_queue_offset_array(batch.sys_flag)
        if bound is not None:
            keep &= batch.phy_offset + batch.size <= bound
        # One stable sort by queue serves both the touched queues and the groups.
        all_keys = batch.topic_index * (1 << 32) + batch.queue_id
        order = np.argsort(all_keys, kind="stable")
        if touched is not None and len(order):
            sorted_keys = all_keys[order]
            firsts = np.flatnonzero(np.diff(sorted_keys, prepend=sorted_keys[0] - 1))
            for index in sorted_keys[firsts].tolist():
                touched.add((batch.topics[index >> 32], index & 0xFFFFFFFF))
        rows = order[keep[order]]
        if not len(rows):
            return 0
        group_key = all_keys[rows]
        bounds = [0, *(np.flatnonzero(np.diff(group_key)) + 1).tolist(), len(rows)]
        count = 0
        last_row = -1
        for first, stop in itertools.pairwise(bounds):
            group = rows[first:stop]
            key = (batch.topics[int(batch.topic_index[group[0]])], int(batch.queue_id[group[0]]))
            if key in self.to_rebuild:
                continue
            queue = self.consume_queues.get_or_create(*key)
            if live:  # records the queue is past in the log are skipped (ConsumeQueue.put)
                group = group[batch.phy_offset[group] >= queue.max_phy_offset]
            offsets = batch.queue_offset[group]
            i = 0
            while i < len(group):
                expected = queue.max_offset
                if offsets[i] < expected:
                    ahead = np.flatnonzero(offsets[i:] >= expected)
                    if not len(ahead):
                        break
                    i += int(ahead[0])
                    continue
                if offsets[i] > expected and (queue.has_files if live else
                                              expected > queue.min_offset_in_files):
                    if not live:
                        self.to_rebuild.add(key)  # the queue lost units before this record
                        break
                    # Refused one by one up to the next record at the expected offset.
                    rest = offsets[i:]
                    at = np.flatnonzero(rest == expected)
                    upto = int(at[0]) if len(at) else len(rest)
                    refused = int(np.count_nonzero(rest[:upto] > expected))
                    self.refused(*key, QueueOrderError(
                        f"consume queue {key[0]}/{key[1]}: unit for queue offset "
                        f"{int(offsets[i])} (phy {int(batch.phy_offset[group[i]])}) does not "
                        f"follow max offset {expected}"), refused)
                    i += upto
                    continue
                run = offsets[i:] - offsets[i] == np.arange(len(group) - i)
                length = len(run) if run.all() else int(np.argmin(run))
                part = group[i:i + length]
                tags_codes = batch.tags_code[part]
                if key[0] == SCHEDULE_TOPIC:
                    tags_codes = np.array([
                        unit_tags_code(key[0], key[1], ts, 0, self.delays_ms)
                        for ts in batch.store_timestamp[part].tolist()
                    ], dtype=np.int64)
                try:
                    queue.put_batch(int(offsets[i]), batch.phy_offset[part],
                                    batch.size[part].astype(np.int32), tags_codes)
                except QueueOrderError as err:  # a gap at the start of a queue's files
                    self.refused(*key, err, length)
                else:
                    count += length
                    last_row = max(last_row, int(part[-1]))  # rows are in log order
                i += length
        if last_row >= 0:
            self.last_store_timestamp = int(batch.store_timestamp[last_row])
        return count

    def rebuild_queues(self, files: Sequence[MappedFile], *, end: int, bound: int,
                       check_crc: bool, verify_prop: bool) -> int:
        """Rebuild the queues marked by recovery from the first commitlog file up to `end`,
        dispatching records that end at or below `bound`; returns the units written."""
        keys = self.to_rebuild
        for topic, queue_id in keys:
            log.warning("rebuilding consume queue topic=%s queue_id=%d", topic, queue_id)
            self.consume_queues.destroy(topic, queue_id)
        count = 0

        def on_record(check: RecordCheck) -> None:
            nonlocal count
            if (check.topic, check.queue_id) in keys and takes_queue_offset(check.sys_flag) \
                    and check.phy_offset + check.size <= bound:
                queue = self.consume_queues.get_or_create(check.topic, check.queue_id)
                # A gap left after the rebuild is no torn queue: that record is skipped.
                if check.queue_offset >= queue.max_offset and self._put(queue, check):
                    count += 1

        for mapped in files:
            if mapped.file_from_offset >= end:
                break
            scan_file(mapped.buf, file_from_offset=mapped.file_from_offset,
                      file_size=min(mapped.file_size, end - mapped.file_from_offset),
                      check_body_crc=check_crc, verify_prop_crc=verify_prop, on_record=on_record)
        self.to_rebuild = set()
        return count
