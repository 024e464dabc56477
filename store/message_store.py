"""The message store: commitlog, consume queues, dispatch, flush, checkpoint, recovery, retention.

`MessageStore` is what the broker and HA layers use. Appends and reads are synchronous calls on
the event loop (they touch only memory); everything that blocks on the disk runs in a worker
thread, driven by `run()`, the store's own long-lived coroutine.

Invariants:
- Queue offsets are assigned densely per (topic, queueId) at append time, and after any restart
  or truncation they account for every record up to maxPhyOffset (docs/reliability.md M5).
- Consume-queue units are written only for records that end at or below the dispatch bound:
  maxPhyOffset normally, confirmOffset in controller mode (M4, RocketMQ #6609).
- confirmOffset <= maxPhyOffset always; a truncation below it is a `DataInvariantError` unless
  the caller states it knows committed data is lost.
- An append's `put_*` coroutine returns only once its flush policy holds: at once for
  ASYNC_FLUSH, after an msync covering the record for SYNC_FLUSH (group commit).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import functools
import logging
import shutil
import struct
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Final, NamedTuple, ParamSpec, TypeVar

from store import testhooks
from store.checkpoint import Checkpoint, load_checkpoint, write_checkpoint
from store.commitlog import HALF_WRITE_FAULT, CommitLog
from store.config import FlushDiskType, StoreConfig
from store.consume_queue import CQ_UNIT_SIZE, ConsumeQueue
from store.consume_queue_store import ConsumeQueueStore
from store.dispatch import Dispatcher
from store.epoch_cache import EpochCache
from store.epoch_file import EpochFileSource, read_epoch_file, write_epoch_file
from store.errors import (
    DataInvariantError,
    DiskFullError,
    DispatchError,
    MessageIllegalError,
    QueueOrderError,
    StoreError,
    WriteRefusedError,
)
from store.host_port import HostPort
from store.message_batch import EncodedBatch
from store.message_encoder import EncodedMessage, encoded_topic, prepare_message
from store.message_properties import PROPERTY_CRC_RESERVED_BYTES
from store.native import native as _native
from store.record_check import CheckStatus, RecordCheck, check_record
from store.record_layout import FIXED_BYTES, MAGIC_CODE_V1, MAGIC_CODE_V2, read_store_timestamp
from store.recovery import RecordBatch, ScanStop, scan_file_fast
from store.run_files import AbortFile, StoreLock
from store.schedule import SCHEDULE_TOPIC, parse_message_delay_level, unit_tags_code
from store.store_recovery import RecoveryReport, recover_store
from store.transaction_type import (
    TRANSACTION_PREPARED_TYPE,
    batch_transaction_error,
    takes_queue_offset,
)
from store.unit_selection import select_units

log = logging.getLogger(__name__)

_SIZE_AND_MAGIC: Final = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE
# A record C writes is at most this plus its body, TOPICLENGTH + TOPIC and properties: the
# fixed fields (IPv6 hosts), PROPERTIESLENGTH and the 20-byte __CRC32# property it may add.
_NATIVE_RECORD_OVERHEAD_MAX: Final = max(FIXED_BYTES) + 2 + 20

_P = ParamSpec("_P")
_T = TypeVar("_T")


ALLOCATE_INTERVAL_S: Final = 0.1


# From this many bytes to dispatch on, `dispatch_pending` scans in bulk (numpy); below, the
# per-record walk is cheaper than the vectorised pass's fixed cost.
BULK_DISPATCH_BYTES: Final = 64 * 1024
# A dispatch walk in a worker thread gives up the GIL after each this many bytes: the walk holds
# it for most of its time (numpy, the consume queues), and the event loop thread, back from any
# system call, waited for it until the walk ended or the 5 ms switch interval ran out (walks of
# up to 100 ms at a slave's 1 GiB catch-up: event-loop stalls of 5-13 ms). A step costs some
# 0.1 ms of fixed CPU: 2 MiB steps (about 0.7 ms each) took 0.33 ms per MiB, 1 MiB 0.39-0.43.
DISPATCH_WALK_BYTES_MAX = 2 * 1024 * 1024
STORE_WORKERS: Final = 4  # the store's worker threads (disk work, dispatch walks)
WORKER_START_TIMEOUT_S: Final = 10.0


def system_wall_ms() -> int:
    return time.time_ns() // 1_000_000


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # appended, but not known to be on disk


# NamedTuples, not frozen dataclasses: one of each is built per append, and a frozen
# dataclass's __init__ costs ~1 us here (see EncodedMessage).
class AppendResult(NamedTuple):
    """Where an append landed. For a batch, the records are contiguous from `phy_offset`."""

    phy_offset: int
    wrote_bytes: int
    queue_offset: int
    msg_count: int
    store_timestamp: int
    tags_code: int | None = None  # a single message's tag hash (TAGS); None for a batch

    @property
    def end_offset(self) -> int:
        return self.phy_offset + self.wrote_bytes


_new_tuple: Final = tuple.__new__


class _Appended(NamedTuple):
    """A record appended past the dispatch bound (controller mode: past confirmOffset), kept
    until the bound reaches its end so that dispatch needs no second read of it. `unit` False:
    a record that takes no queue offset (PREPARED, ROLLBACK: no unit)."""

    end: int
    phy_offset: int
    size: int
    topic: str
    queue_id: int
    unit: bool
    queue_offset: int
    tags_code: int  # the unit's (a schedule-topic record's deliver time already)
    store_timestamp: int


class PutResult(NamedTuple):
    status: PutStatus
    append: AppendResult


class PutMessagesResult(NamedTuple):
    """What `put_messages` appended: `appended[i]` is the i-th message's append; fewer than
    asked when `refused` (the error the next message got; nothing after it was tried)."""

    status: PutStatus
    appended: list[AppendResult]
    refused: StoreError | None


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"


@dataclass(frozen=True, slots=True)
class GetMessageResult:
    """Records found for a pull: `body` is whole, verified records in queue order, one after
    another (a pull response's body as it goes out), `sizes` their sizes."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes
    sizes: list[int]
    queue_offsets: list[int]

    @property
    def messages(self) -> list[bytes]:
        """Each record on its own."""
        out, start = [], 0
        for size in self.sizes:
            out.append(self.body[start : start + size])
            start += size
        return out


class MessageStore:
    """One broker's store directory. Build, `open()` (blocking), run `run()`, then `close()`."""

    def __init__(
        self,
        config: StoreConfig,
        *,
        wall_ms: Callable[[], int] = system_wall_ms,
    ) -> None:
        self.config = config
        self.wall_ms = wall_ms
        self.commitlog = CommitLog(config)
        self.consume_queues = ConsumeQueueStore(
            config.consume_queue_dir, config.mapped_file_size_consume_queue
        )
        root = config.store_path_root_dir
        self._lock = StoreLock(root / "lock")
        self._abort = AbortFile(root / "abort")
        self._checkpoint_path = root / "checkpoint"
        self.epoch_file_path = root / "epochFileCheckpoint"
        self.epoch_cache = EpochCache()
        self._queue_offsets: dict[tuple[str, int], int] = {}
        self._reput_from = 0
        # Records appended while dispatch waits for the bound (confirmOffset), in log order:
        # they cover [_appended_from, max_phy_offset) with nothing else in between (a roll's
        # BLANK padding at most). `dispatch_pending` reads (scans) the records from the reput
        # offset up to `_appended_from`, then writes the units of these from what their appends
        # knew. An append not kept (a batch) empties them, a truncation too; the next append
        # starts them afresh.
        self._appended: collections.deque[_Appended] = collections.deque()
        self._appended_from = 0
        self._dispatching_in_thread: asyncio.Future[int] | None = None
        # Where dispatch last stopped at confirmed bytes that are no record (logged once).
        self._dispatch_blocked_at: int | None = None
        self._confirm_offset = 0
        # Outside controller mode confirmOffset follows maxPhyOffset (RocketMQ's master with
        # default settings); the HA layer turns this off and sets confirmOffset itself.
        self.confirm_follows_max = not config.enable_controller_mode
        # The lowest commitlog offset a connected slave still needs (None: none), asked by
        # retention (store/retention.py's replica_protect_from_offset); the HA layer sets it.
        self.replica_need: Callable[[], int | None] | None = None
        self.fenced = False
        self.disk_full = False
        # Told (topic, queue_id, new max queue offset) when `dispatch_pending` writes units to a
        # queue (records dispatched after their append: controller mode's confirmOffset, a
        # backlog); the broker wakes the pulls held on it. Inline dispatch in `append_*` is
        # not reported: its caller knows.
        self.arrival_listener: Callable[[str, int, int], object] | None = None
        self._opened = False
        self._closed = False
        self._last_store_timestamp = 0
        self._delays_ms = parse_message_delay_level(config.message_delay_level)
        self._dispatcher = Dispatcher(self.consume_queues, delays_ms=self._delays_ms)
        self._flushed_store_timestamp = 0
        self._logics_flushed_store_timestamp = 0
        # The checkpoint's logicsPhysicalOffset (5.5.0, docs/store-format.md §7): the start of the
        # last record dispatched before the last consume-queue flush; 0 = unknown.
        self._logics_physical_offset = 0
        self._flush_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._preparing: dict[tuple[object, ...], asyncio.Future[None]] = {}
        # Consume queues whose next file (past the middle of their last one) or next pages
        # the allocate loop prepares ahead of need (as the commitlog's next segment).
        self._ahead_wanted: dict[tuple[str, int], ConsumeQueue] = {}
        self._allocate_wakeup: asyncio.Event | None = None
        self._flush_wakeup: asyncio.Event | None = None
        self._disk_lock: asyncio.Lock | None = None
        # The store's own worker threads for disk work: close() waits for what is in flight
        # (a cancelled coroutine does not stop its thread, which could race the unmapping).
        self._executor = ThreadPoolExecutor(max_workers=STORE_WORKERS,
                                            thread_name_prefix="store-io")
        self.recovery: RecoveryReport | None = None

    # ================================================================ open / close

    def open(self) -> RecoveryReport:
        """Lock the directory, load every file and recover (docs/store-format.md §9). Blocking."""
        root = self.config.store_path_root_dir
        root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        testhooks.set_journal_root(root)
        try:
            report = self._load_and_recover()
            self._load_epoch_file(report.max_phy_offset)
        except BaseException:
            # A refused open unmaps what it loaded: no descriptor or mapping outlives it.
            with contextlib.suppress(BufferError):  # a view still held by the traceback
                self.commitlog.close()
                self.consume_queues.close()
            self._lock.release()
            raise
        self._abort.create()
        self._start_workers()
        self._opened = True
        self.recovery = report
        return report

    def _start_workers(self) -> None:
        """Start every worker thread of the store's executor now (open runs off the loop):
        the executor starts them lazily, on a submit, and Thread.start waits until the new
        thread runs, which took the event loop 30-70 ms on a busy host."""
        workers = STORE_WORKERS
        barrier = threading.Barrier(workers)
        # Each task waits until all have started: no idle thread takes the next submit, so
        # each submit starts one.
        started = [self._executor.submit(barrier.wait, WORKER_START_TIMEOUT_S)
                   for _ in range(workers)]
        for future in started:
            with contextlib.suppress(threading.BrokenBarrierError):
                future.result()

    def _load_and_recover(self) -> RecoveryReport:
        started = time.monotonic()
        abnormal = self._abort.exists()
        self.commitlog.load()
        self.consume_queues.load_and_recover()
        loaded = load_checkpoint(self._checkpoint_path)
        checkpoint = loaded.checkpoint
        if loaded.bad:
            log.warning("checkpoint unusable, recovering as after a crash reason=%s",
                        loaded.reason)
            abnormal = True
        # The checkpoint's timestamps stand until newer records replace them: a run without
        # appends must not write zeros back (the next abnormal recovery would rescan the whole
        # log), and store timestamps do not go back across a restart.
        self._flushed_store_timestamp = self._last_store_timestamp = \
            checkpoint.physic_msg_timestamp
        self._logics_flushed_store_timestamp = self._dispatcher.last_store_timestamp = \
            checkpoint.logics_msg_timestamp
        report = recover_store(
            self.config, self.commitlog, self.consume_queues, self._dispatcher,
            abnormal=abnormal, checkpoint=loaded, started=started,
        )
        self._confirm_offset = report.confirm_offset
        # Kept unless recovery cut the log below it (a value from a 5.3.3 run after 5.5.0 may be
        # stale, i.e. lower: harmless).
        self._logics_physical_offset = checkpoint.logics_physical_offset \
            if checkpoint.logics_physical_offset < report.max_phy_offset else 0
        self._rebuild_queue_offsets()
        self._reput_from = max(self.consume_queues.max_phy_offset(), self.commitlog.min_phy_offset)
        self._reput_from = min(self._reput_from, report.max_phy_offset)
        self.dispatch_pending()
        skipped = self._dispatcher.skipped_total
        if skipped:
            log.error("recovery skipped %d record(s) whose consume-queue unit cannot follow "
                      "its queue: kept in the commitlog, never served (see the ERROR above "
                      "for each queue)", skipped)
            report = replace(report, records_skipped=skipped)
        return report

    def _load_epoch_file(self, max_phy_offset: int) -> None:
        """Load the epoch entries and drop those the recovered commitlog no longer covers (M8).

        Both the file and its `.bak` unreadable is an `EpochFileUnreadableError`: the store does
        not open (an empty cache would silently skip a slave's truncation).
        """
        loaded = read_epoch_file(self.epoch_file_path)
        if loaded.source is EpochFileSource.BAK:
            log.warning("epoch file unusable, using its .bak path=%s problem=%s",
                        self.epoch_file_path, loaded.main_problem)
        cache = EpochCache(loaded.entries)
        trimmed = cache.drop_beyond(max_phy_offset)
        if trimmed != cache or loaded.source is EpochFileSource.BAK:
            if trimmed != cache:
                log.warning("dropping epoch entries beyond max_phy_offset=%d old=%s new=%s",
                            max_phy_offset, cache, trimmed)
            write_epoch_file(self.epoch_file_path, trimmed.entries)
        self.epoch_cache = trimmed

    def append_epoch_blocking(self, epoch: int, start_offset: int) -> None:
        """Persist a new epoch entry, then adopt it (a new master does this before accepting
        writes). Raises `DataInvariantError` if the epoch does not increase. Blocking."""
        updated = self.epoch_cache.append(epoch, start_offset)
        write_epoch_file(self.epoch_file_path, updated.entries)
        self.epoch_cache = updated

    def _rebuild_queue_offsets(self) -> None:
        """Next queue offsets from the consume queues, then from undispatched records (M5).

        Dispatch runs in log order, so every record below the furthest dispatched one is in
        its queue already (RocketMQ's dispatchFromPhyOffset): only the tail after it is read.
        A tail record counts only where dispatch will take it: it takes a queue offset and
        follows its queue (a record that will be skipped must not move the counter, or every
        later record of the queue would meet the same gap).
        """
        offsets = {(q.topic, q.queue_id): q.max_offset for q in self.consume_queues}

        def count(check: RecordCheck) -> None:
            key = (check.topic, check.queue_id)
            if takes_queue_offset(check.sys_flag) and check.queue_offset == offsets.get(key, 0):
                offsets[key] = check.queue_offset + 1

        start = max(self.consume_queues.max_phy_offset(), self.commitlog.min_phy_offset)
        self._scan_range(start, self.commitlog.max_phy_offset, count)
        self._queue_offsets = offsets

    def _scan_range(self, start: int, end: int, on_record: Callable[[RecordCheck], None]) -> int:
        """Walk valid records in [start, end) (start on a record boundary); returns where the
        walk ended. Skips BLANK padding to the next file."""
        pos = start
        while pos < end:
            mapped = self.commitlog.files.find(pos)
            if mapped is None:
                break
            file_pos = pos - mapped.file_from_offset
            check = check_record(
                mapped.buf, file_pos, limit=mapped.wrote_position, expected_phy_offset=pos,
                check_body_crc=True, verify_prop_crc=self.config.force_verify_prop_crc,
            )
            if check.status is CheckStatus.BLANK:
                pos = mapped.file_end_offset
                continue
            if check.status is not CheckStatus.VALID or pos + check.size > end:
                break
            on_record(check)
            pos += check.size
        return pos

    def close(self) -> None:
        """Flush everything, write the checkpoint, and end cleanly. Blocking."""
        if self._closed or not self._opened:
            return
        self._closed = True
        clean = self.dispatch_behind_bytes == 0 and not self.fenced
        self._executor.shutdown(wait=True)  # disk work still in flight finishes first
        try:
            self.commitlog.flush()
            self._flushed_store_timestamp = self._last_store_timestamp
            logics_physical_offset = self.consume_queues.last_dispatched_phy_offset()
            self.consume_queues.flush()
            self._logics_flushed_store_timestamp = self._dispatcher.last_store_timestamp
            self._logics_physical_offset = logics_physical_offset or self._logics_physical_offset
            self._write_checkpoint()
        finally:
            self.commitlog.close()
            self.consume_queues.close()
            if clean:
                self._abort.delete()
            self._lock.release()

    # ================================================================ writes

    def _check_writable(self) -> None:
        if self.fenced:
            raise WriteRefusedError("store is fenced: this broker has no role that accepts writes")
        if self._closed or not self._opened:
            raise WriteRefusedError("store is not open")
        if self.disk_full:
            raise DiskFullError(
                f"disk use above {self.config.disk_space_warning_level_ratio}%: writes refused"
            )

    def _store_timestamp(self) -> int:
        # Store timestamps never go backwards, so binary search by time stays valid.
        now = self.wall_ms()
        if now < self._last_store_timestamp:
            now = self._last_store_timestamp
        self._last_store_timestamp = now
        return now

    def append_message(self, msg: EncodedMessage) -> AppendResult:
        """Append one message; the record is in the mapping (not yet on disk) on return.

        A message that takes no queue offset (PREPARED, ROLLBACK) is stored with queue offset
        0 and no consume-queue unit. `DispatchError`: appended, but its unit was refused.
        """
        self._check_writable()
        key = (msg.topic, msg.queue_id)
        takes_offset = takes_queue_offset(msg.sys_flag)
        queue_offset = self._queue_offsets.get(key, 0) if takes_offset else 0
        queue = self.consume_queues.get_or_create(msg.topic, msg.queue_id) if takes_offset \
            else None
        if queue is not None:
            queue.prepare_for(queue_offset)
        store_timestamp = self._store_timestamp()
        log_end = self.commitlog.max_phy_offset
        phy_offset = self.commitlog.append_message(
            msg, queue_offset=queue_offset, store_timestamp=store_timestamp
        )
        if queue is not None:
            self._queue_offsets[key] = queue_offset + 1
        if not self.confirm_follows_max:
            self._keep_appended(log_end, _Appended(
                phy_offset + msg.total_size, phy_offset, msg.total_size, msg.topic,
                msg.queue_id, queue is not None, queue_offset,
                unit_tags_code(msg.topic, msg.queue_id, store_timestamp, msg.tags_code,
                               self._delays_ms) if queue is not None else 0,
                store_timestamp))
        else:
            end = phy_offset + msg.total_size
            self._confirm_offset = end
            if self._reput_from != phy_offset:
                self.dispatch_pending()
            elif queue is None:
                self._reput_from = end
            else:
                # Inline dispatch: the common case needs no second read of the record.
                try:
                    queue.put(queue_offset, phy_offset, msg.total_size, unit_tags_code(
                        msg.topic, msg.queue_id, store_timestamp, msg.tags_code,
                        self._delays_ms))
                except QueueOrderError as err:
                    raise self._inline_refused(key, end, err) from err
                self._reput_from = end
                self._dispatcher.last_store_timestamp = store_timestamp
        if queue is not None and queue.ahead_wanted():
            self._want_ahead(queue)
        return AppendResult(phy_offset, msg.total_size, queue_offset, 1, store_timestamp,
                            msg.tags_code)

    def _keep_appended(self, log_end: int, record: _Appended) -> None:
        """Keep `record` (appended where the log ended at `log_end`, after a roll's BLANK at
        most) for dispatch_pending. Kept records are back to back up to the log's end: one
        that does not continue them (an append not kept came between) starts them afresh, and
        the records before it are the scan's."""
        appended = self._appended
        if not appended or appended[-1].end != log_end:
            appended.clear()
            self._appended_from = log_end
        appended.append(record)

    def append_message_fields(
        self,
        topic: str,
        queue_id: int,
        flag: int,
        body: bytes,
        properties: bytes,
        sys_flag: int,
        born_timestamp: int,
        born_host: HostPort,
        store_host: HostPort,
        reconsume_times: int = 0,
    ) -> AppendResult:
        """`append_message(prepare_message(...))` of one message's fields, with the store's
        `enabled_append_prop_crc` and `max_message_size`: the same record and unit, the same
        result, the same refusals in the same order (`MessageIllegalError` first).

        The common message (its queue's next unit in the queue's last file, the record in the
        commitlog's current file, dispatch caught up, confirmOffset following the log, no
        schedule topic, a type that takes a queue offset) is encoded straight into the mapping,
        with both CRCs and its consume-queue unit, by one C call (`_native.append_message`);
        the bookkeeping around it is `append_message`'s, in the same order. In controller mode
        (confirmOffset set by the HA layer) the same call writes the record only, and the unit
        waits in `_appended` for confirmOffset. Anything else, and a store without the
        extension, takes `prepare_message` and `append_message`.
        """
        native = _native
        files = self.commitlog.files.files
        queue = self.consume_queues.get(topic, queue_id)
        if (
            native is None
            or queue is None
            or not files
            or self.fenced
            or self.disk_full
            or self._closed
            or not self._opened
            or sys_flag & TRANSACTION_PREPARED_TYPE  # PREPARED, ROLLBACK: no queue offset
            or topic == SCHEDULE_TOPIC  # its units' tags code is a deliver time
            or len(body) > self.config.max_message_size
            or (testhooks.FAULTS_ON and testhooks.armed(HALF_WRITE_FAULT))
        ):
            return self._append_fields_general(
                topic, queue_id, flag, body, properties, sys_flag, born_timestamp, born_host,
                store_host, reconsume_times)
        key = (topic, queue_id)
        queue_offset = self._queue_offsets.get(key, 0)
        commitlog_file = files[-1]
        pos = commitlog_file.wrote_position
        phy_offset = commitlog_file.file_from_offset + pos
        follows = self.confirm_follows_max
        # Following the log, the unit is written with the record (inline dispatch); else it
        # waits for confirmOffset (`_appended`) and dispatch_pending writes it.
        unit_file = queue.next_unit_file(queue_offset) if follows else None
        if follows and (unit_file is None or self._reput_from != phy_offset):
            return self._append_fields_general(
                topic, queue_id, flag, body, properties, sys_flag, born_timestamp, born_host,
                store_host, reconsume_times)
        magic_code, topic_part = encoded_topic(topic, False)  # MessageIllegalError first
        faults = testhooks.FAULTS_ON
        commitlog_file.claim(pos + _NATIVE_RECORD_OVERHEAD_MAX + len(body) + len(topic_part)
                             + len(properties))
        written = native.append_message(
            commitlog_file.buf, pos, body, properties, topic_part, magic_code, queue_id, flag,
            sys_flag, born_timestamp, born_host.packed, store_host.packed, reconsume_times, 0,
            self.config.enabled_append_prop_crc, queue_offset, phy_offset,
            # `_store_timestamp`, in C: the clock is read only for a record C writes.
            self.wall_ms, self._last_store_timestamp,
            # With fault points on, `put` writes the unit after them, as dispatch would.
            None if faults or unit_file is None else unit_file.buf,
            0 if unit_file is None else queue_offset * CQ_UNIT_SIZE - unit_file.file_from_offset,
        )
        if written is None:  # not C's message, or the file must roll: nothing was written
            return self._append_fields_general(
                topic, queue_id, flag, body, properties, sys_flag, born_timestamp, born_host,
                store_host, reconsume_times)
        size, tags_code, store_timestamp = written
        self._last_store_timestamp = store_timestamp
        if faults:
            testhooks.fault_point("commitlog.append.before_position")
        commitlog_file.wrote_position = pos + size
        self._queue_offsets[key] = queue_offset + 1
        end = phy_offset + size
        if not follows:
            self._keep_appended(phy_offset, _new_tuple(_Appended, (
                end, phy_offset, size, topic, queue_id, True, queue_offset, tags_code,
                store_timestamp)))
            if queue.ahead_wanted():
                self._want_ahead(queue)
            return _new_tuple(AppendResult, (phy_offset, size, queue_offset, 1,
                                             store_timestamp, tags_code))
        self._confirm_offset = end
        if faults:
            try:
                queue.put(queue_offset, phy_offset, size, tags_code)
            except QueueOrderError as err:
                raise self._inline_refused(key, end, err) from err
            ahead_wanted = queue.ahead_wanted()
        else:
            ahead_wanted = queue.unit_written(queue_offset, phy_offset, size)
        self._reput_from = end
        self._dispatcher.last_store_timestamp = store_timestamp
        if ahead_wanted:
            self._want_ahead(queue)
        # AppendResult's own __new__ is a Python function; this is its body, at half the cost.
        return _new_tuple(AppendResult, (phy_offset, size, queue_offset, 1, store_timestamp,
                                         tags_code))

    def _append_fields_general(
        self, topic: str, queue_id: int, flag: int, body: bytes, properties: bytes,
        sys_flag: int, born_timestamp: int, born_host: HostPort, store_host: HostPort,
        reconsume_times: int,
    ) -> AppendResult:
        return self.append_message(self._prepare_fields(
            topic, queue_id, flag, body, properties, sys_flag, born_timestamp, born_host,
            store_host, reconsume_times))

    def _prepare_fields(
        self, topic: str, queue_id: int, flag: int, body: bytes, properties: bytes,
        sys_flag: int, born_timestamp: int, born_host: HostPort, store_host: HostPort,
        reconsume_times: int,
    ) -> EncodedMessage:
        """`prepare_message` of one message's fields with the store's own limits."""
        return prepare_message(
            topic=topic, queue_id=queue_id, flag=flag, body=body, properties=properties,
            sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host,
            store_host=store_host, reconsume_times=reconsume_times,
            append_prop_crc=self.config.enabled_append_prop_crc,
            max_message_size=self.config.max_message_size,
        )

    def append_batch(self, batch: EncodedBatch) -> AppendResult:
        """Append a batch's records contiguously with consecutive queue offsets.

        `MessageIllegalError` for a batch that is not of TRANSACTION_NOT type (as Java);
        `DispatchError`: appended, but the units were refused.
        """
        self._check_writable()
        refusal = batch_transaction_error(batch.sys_flag)
        if refusal is not None:
            raise MessageIllegalError(f"topic {batch.topic}: {refusal}")
        key = (batch.topic, batch.queue_id)
        queue_offset = self._queue_offsets.get(key, 0)
        queue = self.consume_queues.get_or_create(batch.topic, batch.queue_id)
        queue.prepare_for(queue_offset, batch.count)
        store_timestamp = self._store_timestamp()
        phy_offset = self.commitlog.append_batch(
            batch, first_queue_offset=queue_offset, store_timestamp=store_timestamp
        )
        self._queue_offsets[key] = queue_offset + batch.count
        if not self.confirm_follows_max:
            self._appended.clear()  # a batch's units: the scan's, from the reput offset
        else:
            end = phy_offset + batch.total_size
            self._confirm_offset = end
            if self._reput_from != phy_offset or batch.topic == SCHEDULE_TOPIC:
                self.dispatch_pending()  # (a schedule-topic batch's units: the dispatcher's)
            else:
                try:
                    queue.put_contiguous(queue_offset, phy_offset, batch.sizes, batch.tags_codes)
                except QueueOrderError as err:
                    raise self._inline_refused(key, end, err) from err
                self._reput_from = end
                self._dispatcher.last_store_timestamp = store_timestamp
        if queue.ahead_wanted():
            self._want_ahead(queue)
        return AppendResult(phy_offset, batch.total_size, queue_offset, batch.count,
                            store_timestamp)

    def _want_ahead(self, queue: ConsumeQueue) -> None:
        self._ahead_wanted[(queue.topic, queue.queue_id)] = queue
        if self._allocate_wakeup is not None:
            self._allocate_wakeup.set()

    def _inline_refused(self, key: tuple[str, int], end: int, err: QueueOrderError
                        ) -> DispatchError:
        """The units of the record(s) just appended were refused: this append alone fails.
        The reput offset moves past them and the queue's counter is realigned with the
        queue, so the next append to it succeeds."""
        self._reput_from = end
        self._dispatcher.refused(*key, err)
        self._realign_skipped_queues()
        return DispatchError(f"appended, but it will not be served: {err}")

    def _realign_skipped_queues(self) -> None:
        """Once dispatch has caught up with the log, a queue that skipped records takes its
        next queue offset from its consume queue again (undispatched records would otherwise
        keep the gap open for every later record of that queue)."""
        if self._reput_from < self.commitlog.max_phy_offset:
            return
        for key in self._dispatcher.take_skipped_queues():
            queue = self.consume_queues.get(*key)
            self._queue_offsets[key] = queue.max_offset if queue is not None else 0

    async def _prepare_files(self, topic: str, queue_id: int, size: int, count: int) -> None:
        """Create, in a worker thread, any file the next append would otherwise create on the
        event loop: a commitlog segment, or a consume-queue file (a new queue's first one).
        Concurrent puts needing the same file share one creation."""
        start = self.commitlog.file_needed_for(size)
        if start is not None:
            await self._once(("commitlog", start), lambda: self._in_thread(
                self.commitlog.prepare_next_file, start))
        if not count:
            return  # a record that takes no queue offset needs no consume-queue file
        queue = self.consume_queues.get_or_create(topic, queue_id)
        key = (topic, queue_id)
        while (file_start := queue.file_needed_for(self._queue_offsets.get(key, 0), count)) \
                is not None:

            async def create(at: int = file_start) -> None:
                queue.adopt_prepared(await self._in_thread(queue.create_file_detached, at))
                self._want_ahead(queue)  # its first pages, after the put that needed it

            await self._once(("cq", topic, queue_id, file_start), create)

    async def _once(self, key: tuple[object, ...],
                    make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `make()` unless a run for `key` is in flight; either way wait for it."""
        running = self._preparing.get(key)
        if running is None:
            running = asyncio.ensure_future(make())
            self._preparing[key] = running
            running.add_done_callback(lambda _: self._preparing.pop(key, None))
        await asyncio.shield(running)

    async def put_message(self, msg: EncodedMessage) -> PutResult:
        """Append one message and wait for its flush policy."""
        await self._prepare_files(msg.topic, msg.queue_id, msg.total_size,
                                  1 if takes_queue_offset(msg.sys_flag) else 0)
        result = self.append_message(msg)
        return PutResult(await self._wait_flush(result.end_offset), result)

    async def put_message_fields(
        self,
        topic: str,
        queue_id: int,
        flag: int,
        body: bytes,
        properties: bytes,
        sys_flag: int,
        born_timestamp: int,
        born_host: HostPort,
        store_host: HostPort,
        reconsume_times: int = 0,
    ) -> PutResult:
        """`put_message(prepare_message(...))` of one message's fields, with the store's
        limits (the broker's send): `append_message_fields` when every file the append needs
        exists, else exactly that (its files made in a worker thread first)."""
        key = (topic, queue_id)
        queue = self.consume_queues.get(topic, queue_id)
        # An upper bound of the record's size (the topic's UTF-8 at 4 bytes a char, a final
        # 0x02 added to the properties): only ever early in asking for the next file.
        size_max = FIXED_BYTES[-1] + len(body) + 2 + 4 * len(topic) + 2 + len(properties) + 1 \
            + PROPERTY_CRC_RESERVED_BYTES
        if (
            queue is None
            or self.commitlog.file_needed_for(size_max) is not None
            or queue.file_needed_for(self._queue_offsets.get(key, 0)) is not None
        ):
            return await self.put_message(self._prepare_fields(
                topic, queue_id, flag, body, properties, sys_flag, born_timestamp, born_host,
                store_host, reconsume_times))
        result = self.append_message_fields(
            topic, queue_id, flag, body, properties, sys_flag, born_timestamp, born_host,
            store_host, reconsume_times)
        return PutResult(await self._wait_flush(result.end_offset), result)

    async def put_messages(self, msgs: Sequence[EncodedMessage]) -> PutMessagesResult:
        """Append `msgs` in order, each as `put_message` would, then wait once for the flush
        policy of the last (one group-commit wait for all, not one per message). The first
        refusal (a `StoreError` from its append) stops the run: the messages before it stay
        appended and are reported, the refused one and the rest are not appended."""
        appended: list[AppendResult] = []
        refused: StoreError | None = None
        for msg in msgs:
            count = 1 if takes_queue_offset(msg.sys_flag) else 0
            try:
                # Awaits only when a file is missing (worker thread); usually returns at once.
                await self._prepare_files(msg.topic, msg.queue_id, msg.total_size, count)
                appended.append(self.append_message(msg))
            except StoreError as err:
                refused = err
                break
        status = await self._wait_flush(appended[-1].end_offset) if appended \
            else PutStatus.PUT_OK
        return PutMessagesResult(status, appended, refused)

    async def put_batch(self, batch: EncodedBatch) -> PutResult:
        await self._prepare_files(batch.topic, batch.queue_id, batch.total_size, batch.count)
        result = self.append_batch(batch)
        return PutResult(await self._wait_flush(result.end_offset), result)

    async def _wait_flush(self, end_offset: int) -> PutStatus:
        if self.config.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            return PutStatus.PUT_OK
        if self.commitlog.flushed_where >= end_offset:
            return PutStatus.PUT_OK
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append((end_offset, future))
        if self._flush_wakeup is not None:
            self._flush_wakeup.set()
        try:
            async with asyncio.timeout(self.config.sync_flush_timeout_ms / 1000):
                await asyncio.shield(future)
        except TimeoutError:
            return PutStatus.FLUSH_DISK_TIMEOUT
        return PutStatus.PUT_OK

    # ================================================================ dispatch and confirm

    @property
    def max_phy_offset(self) -> int:
        return self.commitlog.max_phy_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commitlog.min_phy_offset

    @property
    def confirm_offset(self) -> int:
        return self.commitlog.max_phy_offset if self.confirm_follows_max else self._confirm_offset

    @property
    def dispatch_skipped_total(self) -> int:
        """Records since open whose consume-queue unit was refused (store/dispatch.py)."""
        return self._dispatcher.skipped_total

    @property
    def reput_from_offset(self) -> int:
        return self._reput_from

    @property
    def dispatch_behind_bytes(self) -> int:
        bound = self.commitlog.max_phy_offset if self.config.read_uncommitted else \
            self.confirm_offset
        return max(0, bound - self._reput_from)

    def set_confirm_offset(self, confirm_offset: int, *, dispatch: bool = True) -> None:
        """Controller mode: set confirmOffset (the HA layer's decision) and dispatch up to it
        (`dispatch=False`: the caller runs `dispatch_in_thread` instead)."""
        if confirm_offset > self.commitlog.max_phy_offset:
            raise DataInvariantError(
                f"confirm_offset={confirm_offset} > max_phy_offset={self.commitlog.max_phy_offset}"
            )
        self.confirm_follows_max = False
        self._confirm_offset = confirm_offset
        if dispatch:
            self.dispatch_pending()

    async def dispatch_in_thread(self) -> None:
        """`dispatch_pending` with its walk in a worker thread, until the reput offset reaches
        the bound or a record not yet whole (a slave's reput: none of it on the event loop).
        Serialised with truncation and the other disk work; while it runs, `dispatch_pending`
        on the loop does nothing (this call covers its range). Cancelling it waits for the walk
        in flight."""
        loop = asyncio.get_running_loop()
        touched: set[tuple[str, int]] = set()
        while not self._closed and self._dispatching_in_thread is None:
            # Small ranges too: a record may need a new consume-queue file, whose creation
            # (an allocation and fsyncs) must not run on the loop.
            if self.dispatch_behind_bytes == 0:
                break
            async with self._disk():
                start = self._reput_from
                bound = self.commitlog.max_phy_offset if self.config.read_uncommitted else \
                    self.confirm_offset  # under the lock: no truncation meanwhile
                walk = loop.run_in_executor(self._executor, self._dispatch_walks, start, bound,
                                            touched)
                self._dispatching_in_thread = walk
                try:
                    await asyncio.shield(walk)
                finally:
                    while not walk.done():  # cancelled: the walk in flight ends first
                        with contextlib.suppress(asyncio.CancelledError):
                            await asyncio.wait([walk])
                    self._dispatching_in_thread = None
                    if not walk.cancelled() and walk.exception() is None:
                        self._reput_from = walk.result()
                if self._reput_from == start:
                    self._report_blocked_dispatch(start, bound)
                    break  # stopped at a record not (yet) whole (or no record)
        self.dispatch_pending(touched)

    def _report_blocked_dispatch(self, pos: int, bound: int) -> None:
        """Dispatch stopped at `pos`, below `bound`. Usually a record confirmed only in part
        (slaves ack byte ranges) or not yet whole; but confirmed bytes that are no record (a
        broken or hostile master: a slave appends TRANSFER bodies unread, as Java's does) stop
        it for good, and this broker's consumers get nothing past them: say so, once."""
        if pos == self._dispatch_blocked_at or self._is_partial_record(pos, bound):
            return
        check = self._check_at(pos)
        if check.status is not CheckStatus.INVALID:
            return
        self._dispatch_blocked_at = pos
        log.error("dispatch stopped: the confirmed bytes at phy_offset=%d are no record (%s); "
                  "consumers of this broker get nothing past them and it will not become "
                  "master over them; the master sent them (compare its commitlog there)",
                  pos, check.reason)

    def dispatch_pending(self, touched: set[tuple[str, int]] | None = None) -> int:
        """Write consume-queue units for records from the reput offset up to the bound
        (`touched`: queues already written to, to tell the arrival listener about too)."""
        if self._dispatching_in_thread is not None:
            return 0  # `dispatch_in_thread` runs: it ends with this call
        bound = self.commitlog.max_phy_offset if self.config.read_uncommitted else \
            self.confirm_offset
        count = 0
        touched = set() if touched is None else touched
        appended = self._appended
        if appended and self._appended_from < self._reput_from:
            appended.clear()  # a walk (dispatch_in_thread) went past their start: its records
        # The records before the kept ones are read (the scan); the kept ones are not.
        scan_to = min(bound, self._appended_from) if appended else bound

        def on_record(check: RecordCheck) -> None:
            nonlocal count
            count += self._dispatcher.dispatch_live(check)
            touched.add((check.topic, check.queue_id))

        if scan_to - self._reput_from >= BULK_DISPATCH_BYTES:
            self._reput_from = self._dispatch_bulk(self._reput_from, scan_to, touched)
        if self._reput_from < scan_to:
            self._reput_from = self._scan_range(self._reput_from, scan_to, on_record)
        if appended and self._reput_from == self._appended_from:
            dispatcher = self._dispatcher
            get_queue = self.consume_queues.get_or_create
            while appended and appended[0].end <= bound:
                record = appended.popleft()
                if record.unit:
                    count += dispatcher.dispatch_appended(
                        get_queue(record.topic, record.queue_id), record.queue_offset,
                        record.phy_offset, record.size, record.tags_code,
                        record.store_timestamp)
                touched.add((record.topic, record.queue_id))  # (as the scan does)
                self._reput_from = self._appended_from = record.end
        if self._dispatcher.skipped:
            self._realign_skipped_queues()
        listener = self.arrival_listener
        if listener is not None:
            for topic, queue_id in touched:
                listener(topic, queue_id, self.max_offset_in_queue(topic, queue_id))
        return count

    def _dispatch_walks(self, start: int, end: int, touched: set[tuple[str, int]]) -> int:
        """`_dispatch_bulk` over [start, end) in a worker thread, in steps of at most
        DISPATCH_WALK_BYTES_MAX bytes (doubled while a step holds no whole record), with the GIL
        given up after each (`time.sleep(0)`); returns where it stopped, as `_dispatch_bulk`."""
        pos = start
        step = DISPATCH_WALK_BYTES_MAX
        while pos < end:
            bound = min(end, pos + step)
            reached = self._dispatch_bulk(pos, bound, touched)
            if reached == pos:
                if bound == end:
                    break  # a record not (yet) whole, or not valid
                step *= 2  # a record longer than the step
                continue
            pos = reached
            step = DISPATCH_WALK_BYTES_MAX
            time.sleep(0)  # the GIL to a waiting thread (the event loop's)
        return pos

    def _dispatch_bulk(self, start: int, end: int, touched: set[tuple[str, int]]) -> int:
        """`dispatch_pending`'s walk over [start, end), vectorised per file (`scan_file_fast`:
        numpy and C vouch for the records, `Dispatcher.dispatch_live_batch` writes their units
        a queue run at a time); the same records, checks and units as the per-record walk.
        Returns where it stopped: `end`, or before a record that is cut or not (yet) valid."""
        dispatcher = self._dispatcher
        verify_prop = self.config.force_verify_prop_crc

        def one(check: RecordCheck) -> None:
            dispatcher.dispatch_live(check)
            touched.add((check.topic, check.queue_id))

        def bulk(batch: RecordBatch) -> None:
            dispatcher.dispatch_live_batch(batch, touched)

        pos = start
        while pos < end:
            mapped = self.commitlog.files.find(pos)
            if mapped is None:
                break
            base = mapped.file_from_offset
            limit = min(mapped.wrote_position, end - base)
            scan = scan_file_fast(mapped.buf, file_from_offset=base, file_size=limit,
                                  start_pos=pos - base, check_body_crc=True,
                                  verify_prop_crc=verify_prop, on_record=one,
                                  on_records=bulk).scan
            pos = base + scan.end_pos
            if scan.stop is ScanStop.BLANK or pos == mapped.file_end_offset:
                pos = mapped.file_end_offset
                continue
            break
        return pos

    # ================================================================ reads

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.consume_queues.get(topic, queue_id)
        return queue.max_offset if queue is not None else 0

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.consume_queues.get(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next append to this queue gets (counts undispatched records)."""
        return self._queue_offsets.get((topic, queue_id), 0)

    def store_timestamp_at(self, phy_offset: int, size: int) -> int:
        mapped = self.commitlog.files.find(phy_offset)
        if mapped is None:
            raise IndexError(f"commitlog: no record at {phy_offset}")
        return read_store_timestamp(mapped.buf, phy_offset - mapped.file_from_offset)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset stored at or after `timestamp_ms` (see ConsumeQueue)."""
        queue = self.consume_queues.get(topic, queue_id)
        if queue is None:
            return 0
        return queue.offset_by_time(timestamp_ms, self.store_timestamp_at)

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int,
        max_bytes: int = 256 * 1024,
        tags_codes: frozenset[int] | None = None,
    ) -> GetMessageResult:
        """Read up to `max_count` whole records from `offset`, verified (never damaged bytes).

        `tags_codes` filters by the units' tag hash (RocketMQ's consume-queue tag filter).
        """
        queue = self.consume_queues.get(topic, queue_id)
        if queue is None:
            return GetMessageResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0, b"", [], [])
        low, high = queue.min_offset, queue.max_offset
        if high == 0:
            return GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, low, high, b"", [], [])
        if offset < low:
            return GetMessageResult(GetStatus.OFFSET_TOO_SMALL, low, low, high, b"", [], [])
        if offset == high:
            return GetMessageResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, low, high, b"", [], [])
        if offset > high:
            return GetMessageResult(GetStatus.OFFSET_OVERFLOW_BADLY, high, low, high, b"", [], [])
        min_phy = self.commitlog.min_phy_offset
        phys: list[int] = []
        sizes: list[int] = []
        offsets: list[int] = []
        total = 0
        next_offset = offset
        while next_offset < high and len(phys) < max_count:
            units = queue.units(next_offset, max_count - len(phys))  # within one queue file
            if not len(units):
                break
            chosen = select_units(
                units["phy_offset"].tolist(), units["size"].tolist(),
                None if tags_codes is None else units["tags_code"].tolist(),
                min_phy_offset=min_phy, tags_codes=tags_codes, total_bytes=total,
                max_bytes=max_bytes, first_of_pull=not phys,
            )
            phys += chosen.phys
            sizes += chosen.sizes
            offsets += [next_offset + index for index in chosen.picked]
            total = chosen.total_bytes
            next_offset += chosen.passed
            if chosen.full:
                break
        if not phys:
            return GetMessageResult(GetStatus.NO_MATCHED_MESSAGE, next_offset, low, high, b"",
                                    [], [])
        body = self.commitlog.read_records_joined(phys, sizes)  # verified: damage raises
        return GetMessageResult(GetStatus.FOUND, next_offset, low, high, body, sizes, offsets)

    def read_record_at(self, phy_offset: int) -> bytes | None:
        """The verified record starting at commitlog `phy_offset` (a message id's offset): one
        way for every reader (view by id, send-back, HA). None when nothing is written there;
        `RecordCorruptError` for bytes that are no valid record there."""
        return self.commitlog.read_record_at(phy_offset)

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.consume_queues.get(topic, queue_id)

    # ================================================================ truncation

    def truncate_to_blocking(self, phy_offset: int, *, allow_below_confirm: bool = False) -> None:
        """Cut the store at `phy_offset` (a record boundary): consume queues, then the commitlog
        (zeroed and fsynced, M7), then offsets. Blocking; writes must be stopped."""
        if phy_offset >= self.commitlog.max_phy_offset:
            return
        if phy_offset < self.confirm_offset and not allow_below_confirm and \
                not self.confirm_follows_max:
            raise DataInvariantError(
                f"truncate to phy_offset={phy_offset} below confirm_offset={self.confirm_offset}"
            )
        mapped = self.commitlog.files.find(phy_offset)
        if mapped is not None and phy_offset < self.commitlog.max_phy_offset:
            pos = phy_offset - mapped.file_from_offset
            check = check_record(mapped.buf, pos, limit=mapped.file_size,
                                 expected_phy_offset=phy_offset, check_body_crc=False,
                                 verify_prop_crc=False)
            # A record replication has not finished (a slave's tail: TRANSFER bodies end
            # anywhere) is a boundary too: its unwritten rest reads as zeros.
            if check.status is CheckStatus.INVALID and not self._is_partial_record(phy_offset):
                raise DataInvariantError(
                    f"truncate to phy_offset={phy_offset}: not a record boundary ({check.reason})"
                )
        old_max = self.commitlog.max_phy_offset
        # Durable order: the checkpoint's confirmOffset comes down to the cut first, so that a
        # crash after the cut never reads as "committed data lost" (M9); then consume queues and
        # commitlog are cut (and fsynced), then the epoch file, so a crash in between never
        # leaves epochs describing bytes that are gone.
        # logicsPhysicalOffset must never name a record that is gone (docs/store-format.md §7).
        if self._logics_physical_offset >= phy_offset:
            self._logics_physical_offset = 0
        checkpoint = self._checkpoint_value()
        on_disk = load_checkpoint(self._checkpoint_path).checkpoint.logics_physical_offset
        if checkpoint.confirm_phy_offset > phy_offset or (on_disk and on_disk >= phy_offset):
            write_checkpoint(self._checkpoint_path, replace(
                checkpoint, confirm_phy_offset=min(checkpoint.confirm_phy_offset, phy_offset)))
        self._appended.clear()
        self.consume_queues.truncate_by_phy(phy_offset)
        self.commitlog.truncate_dirty(phy_offset)
        trimmed = self.epoch_cache.truncate_suffix_by_offset(phy_offset)
        if trimmed != self.epoch_cache:
            write_epoch_file(self.epoch_file_path, trimmed.entries)
            self.epoch_cache = trimmed
        self._reput_from = min(self._reput_from, phy_offset)
        self._confirm_offset = min(self._confirm_offset, phy_offset)
        self._rebuild_queue_offsets()
        log.info("truncated store old_max_phy_offset=%d new_max_phy_offset=%d",
                 old_max, phy_offset)

    async def truncate_to(self, phy_offset: int, *, allow_below_confirm: bool = False) -> None:
        """`truncate_to_blocking` in a worker thread, writes refused meanwhile."""
        was_fenced = self.fenced
        self.fenced = True
        try:
            async with self._disk():
                await self._in_thread(self.truncate_to_blocking, phy_offset,
                                        allow_below_confirm=allow_below_confirm)
        finally:
            self.fenced = was_fenced

    # ================================================================ HA (replication)

    def append_replicated(self, phy_offset: int, data: bytes | bytearray | memoryview) -> None:
        """A slave appends bytes its master shipped (any byte range) at the commitlog's end.
        Client writes stay refused (fenced); dispatch follows confirmOffset. Raises
        `WriteRefusedError` when closed, `DiskFullError` above the disk limit, `ValueError` for
        bytes that do not continue the log inside one file (nothing copied)."""
        self.append_replicated_run(phy_offset, (data,))

    def append_replicated_run(self, phy_offset: int,
                              parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """`append_replicated` of consecutive byte ranges from `phy_offset` (the bodies of the
        TRANSFER frames of one read), each within one file, written a file at a time
        (`CommitLog.append_raw_run`). On a `ValueError` the ranges before the bad one are
        appended."""
        self.append_replicated_run_blocking(phy_offset, parts)
        self.replicated_appended()

    def append_replicated_run_blocking(
            self, phy_offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """`append_replicated_run` for a worker thread (the slave's backlog pump, ha/client.py),
        one writer at a time; it creates a segment the allocator has not prepared. The caller
        has `replicated_appended` run on the loop afterwards."""
        if self._closed or not self._opened:
            raise WriteRefusedError("store is not open")
        if self.disk_full:
            raise DiskFullError(
                f"disk use above {self.config.disk_space_warning_level_ratio}%: writes refused"
            )
        self._appended.clear()  # (a slave keeps none: its bytes are the master's)
        self.commitlog.append_raw_run(phy_offset, parts)

    def replicated_appended(self) -> None:
        """On the loop after replicated appends: wakes the allocator when the writer needs
        pre-faulted pages or the next segment."""
        wakeup = self._allocate_wakeup
        if wakeup is not None and not wakeup.is_set() and (
                self.commitlog.warm_ahead_wanted() or self.commitlog.need_next_file() is not None):
            wakeup.set()  # pre-fault ahead of the slave's writes, prepare the next segment

    async def prepare_replicated(self, phy_offset: int, size: int) -> None:
        """Create, in a worker thread, the file `append_replicated` would otherwise create on
        the event loop."""
        start = self.commitlog.raw_file_needed(phy_offset, size)
        if start is not None:
            await self._once(("commitlog", start), lambda: self._in_thread(
                self.commitlog.prepare_raw_file, start))

    def is_record_boundary(self, phy_offset: int) -> bool:
        """Whether the log may be cut at `phy_offset` (docs/ha-protocol.md §6 step 5): at or past
        the end, at a fully valid record (CRCs checked), at a BLANK, or past its file's data."""
        if phy_offset >= self.commitlog.max_phy_offset:
            return True
        mapped = self.commitlog.files.find(phy_offset)
        if mapped is None:
            return False
        pos = phy_offset - mapped.file_from_offset
        if pos >= mapped.wrote_position:
            return True
        check = check_record(mapped.buf, pos, limit=mapped.wrote_position,
                             expected_phy_offset=phy_offset, check_body_crc=True,
                             verify_prop_crc=self.config.force_verify_prop_crc)
        return check.status in (CheckStatus.VALID, CheckStatus.BLANK)

    async def truncate_for_slave(self, phy_offset: int) -> None:
        """A slave's handshake cut (docs/ha-protocol.md §6 steps 5-6), in durable order: consume
        queues and commitlog (zeroed, fsynced), then epoch entries starting at or after
        `phy_offset` (the epoch file, also when no byte was cut). Committed bytes may go: the
        master's log is authoritative (the caller reports that loudly)."""
        if phy_offset < self.commitlog.max_phy_offset:
            await self.truncate_to(phy_offset, allow_below_confirm=True)
        async with self._disk():
            await self._in_thread(self._truncate_epochs_from_blocking, phy_offset)

    def _truncate_epochs_from_blocking(self, phy_offset: int) -> None:
        trimmed = self.epoch_cache.truncate_suffix_by_offset(phy_offset)
        if trimmed != self.epoch_cache:
            write_epoch_file(self.epoch_file_path, trimmed.entries)
            self.epoch_cache = trimmed

    async def append_epoch(self, epoch: int, start_offset: int) -> None:
        """`append_epoch_blocking` in a worker thread (the epoch file is fsynced)."""
        async with self._disk():
            await self._in_thread(self.append_epoch_blocking, epoch, start_offset)

    def become_master_blocking(self, epoch: int) -> int:
        """The store's part of changeToMaster (docs/ha-protocol.md §12.1), in durable order: cut a
        partial tail left by replication (bytes after the last whole valid record), drop epoch
        entries at or above `epoch`, persist `(epoch, max_phy_offset)` (unless the last entry
        already is `epoch`'s: then it stays), then rebuild the next queue offsets and dispatch
        everything (a lone master confirms its whole log). Returns the epoch's start offset.
        Blocking; the store must be fenced meanwhile."""
        self.commitlog.end_raw_writes()
        end = self._scan_range(self._reput_from, self.commitlog.max_phy_offset, lambda _: None)
        if end < self.commitlog.max_phy_offset:
            if end < self._confirm_offset and not self._is_partial_record(end):
                raise DataInvariantError(
                    f"refusing to become master: the record at {end}, below the confirm offset "
                    f"{self._confirm_offset}, fails its check ({self._check_at(end).reason}); "
                    "cutting there would drop acknowledged messages (records from a Java master "
                    "carry no __CRC32# property: in a group with Java brokers set "
                    "forceVerifyPropCRC=false)"
                )
            # A replicated tail may end inside a record (the confirm offset too: slaves ack
            # byte ranges): that partial record goes.
            self.truncate_to_blocking(end, allow_below_confirm=True)
        start = self.commitlog.max_phy_offset
        epoch_start = start
        last = self.epoch_cache.last_entry()
        if last is not None and last.epoch == epoch and last.start_offset <= start:
            # Leading the same epoch again (restarted while the controller kept this broker as
            # the master at that epoch): the epoch began at its entry's start. Re-labelling it
            # from `start` would leave the slaves, whose entry for it starts there, without a
            # common epoch with this master (they could never catch up again).
            epoch_start = last.start_offset
        else:
            cache = self.epoch_cache.truncate_suffix_by_epoch(epoch).append(epoch, start)
            write_epoch_file(self.epoch_file_path, cache.entries)
            self.epoch_cache = cache
        self._rebuild_queue_offsets()
        self._confirm_offset = max(self._confirm_offset, start)
        self.confirm_follows_max = False
        self.dispatch_pending()
        return epoch_start

    def _check_at(self, pos: int) -> RecordCheck:
        mapped = self.commitlog.files.find(pos)
        if mapped is None:
            return RecordCheck(CheckStatus.INVALID, 0, f"no commitlog file holds {pos}")
        return check_record(
            mapped.buf, pos - mapped.file_from_offset, limit=mapped.wrote_position,
            expected_phy_offset=pos, check_body_crc=True,
            verify_prop_crc=self.config.force_verify_prop_crc,
        )

    def _is_partial_record(self, pos: int, end: int | None = None) -> bool:
        """Whether the bytes at `pos` are the start of a record that replication has not
        finished (its TOTALSIZE runs past the written end, or past `end`), not a damaged or
        refused one."""
        mapped = self.commitlog.files.find(pos)
        if mapped is None:
            return True
        file_pos = pos - mapped.file_from_offset
        left = mapped.wrote_position - file_pos
        if end is not None:
            left = min(left, end - pos)
        if left < _SIZE_AND_MAGIC.size:
            return True
        total_size, magic_code = _SIZE_AND_MAGIC.unpack_from(mapped.buf, file_pos)
        return magic_code in (MAGIC_CODE_V1, MAGIC_CODE_V2) and total_size > left

    async def become_master(self, epoch: int) -> int:
        """`become_master_blocking` in a worker thread, under the disk lock."""
        async with self._disk():
            return await self._in_thread(self.become_master_blocking, epoch)

    # ================================================================ background work

    async def _in_thread(self, fn: Callable[_P, _T], /, *args: _P.args,
                         **kwargs: _P.kwargs) -> _T:
        """Run blocking disk work in the store's worker threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def _disk(self) -> asyncio.Lock:
        if self._disk_lock is None:
            self._disk_lock = asyncio.Lock()
        return self._disk_lock

    async def flush(self) -> int:
        """Force the commitlog to disk now; returns the flushed offset."""
        async with self._disk():
            ts = self._last_store_timestamp
            flushed = await self._in_thread(self.commitlog.flush)
            self._flushed_store_timestamp = ts
        self._wake_flush_waiters()
        return flushed

    def _wake_flush_waiters(self) -> None:
        flushed = self.commitlog.flushed_where
        still: list[tuple[int, asyncio.Future[None]]] = []
        for end, future in self._flush_waiters:
            if end <= flushed:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((end, future))
        self._flush_waiters = still

    async def run(self) -> None:
        """The store's background loops (flush, group commit, consume-queue flush, checkpoint,
        segment pre-allocation, retention) until cancelled."""
        self._flush_wakeup = asyncio.Event()
        self._allocate_wakeup = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            if self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
                group.create_task(self._group_commit_loop())
            else:
                group.create_task(self._async_flush_loop())
            group.create_task(self._consume_queue_flush_loop())
            group.create_task(self._checkpoint_loop())
            group.create_task(self._allocate_loop())
            group.create_task(self._clean_loop())

    async def _group_commit_loop(self) -> None:
        assert self._flush_wakeup is not None
        while True:
            await self._flush_wakeup.wait()
            self._flush_wakeup.clear()
            # Every append that arrived while the previous msync ran shares this one.
            await self.flush()

    async def _async_flush_loop(self) -> None:
        interval = self.config.flush_interval_commit_log_ms / 1000
        rounds = 0
        while True:
            await asyncio.sleep(interval)
            rounds += 1
            # Every ~10 s flush whatever is dirty, like RocketMQ's thorough flush.
            least = 0 if rounds % max(1, int(10 / interval)) == 0 else \
                self.config.flush_commit_log_least_pages
            dirty = self.commitlog.max_phy_offset - self.commitlog.flushed_where
            if dirty <= 0 or dirty < least * 4096:
                continue  # nothing to do: no worker thread (each costs the loop the GIL)
            async with self._disk():
                ts = self._last_store_timestamp
                await self._in_thread(self.commitlog.flush, least)
                if self.commitlog.flushed_where >= self.commitlog.max_phy_offset:
                    self._flushed_store_timestamp = ts

    async def _consume_queue_flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval_consume_queue_ms / 1000)
            await self.flush_consume_queues()

    async def flush_consume_queues(self) -> None:
        async with self._disk():
            # As 5.5.0: captured before the flush, stored after it (only a known value).
            ts = self._dispatcher.last_store_timestamp
            logics_physical_offset = self.consume_queues.last_dispatched_phy_offset()
            await self._in_thread(self.consume_queues.flush)
            self._logics_flushed_store_timestamp = ts
            self._logics_physical_offset = logics_physical_offset or self._logics_physical_offset

    async def _checkpoint_loop(self) -> None:
        written: Checkpoint | None = None
        while True:
            await asyncio.sleep(self.config.checkpoint_flush_interval_ms / 1000)
            value = self._checkpoint_value()
            if value == written:
                continue  # unchanged: no rewrite, no fsyncs
            await self._in_thread(write_checkpoint, self._checkpoint_path, value)
            written = value

    def _checkpoint_value(self) -> Checkpoint:
        # Standalone: the committed offset worth protecting is what is flushed. Controller
        # mode: confirmOffset, which a power loss may take away (M9 reports it).
        confirm = self._confirm_offset if self.config.enable_controller_mode else \
            self.commitlog.flushed_where
        return Checkpoint(
            physic_msg_timestamp=self._flushed_store_timestamp,
            logics_msg_timestamp=self._logics_flushed_store_timestamp,
            index_msg_timestamp=0,
            master_flushed_offset=0,
            confirm_phy_offset=confirm,
            logics_physical_offset=self._logics_physical_offset,
        )

    def _write_checkpoint(self) -> None:
        write_checkpoint(self._checkpoint_path, self._checkpoint_value())

    async def write_checkpoint(self) -> None:
        await self._in_thread(write_checkpoint, self._checkpoint_path, self._checkpoint_value())

    async def _allocate_loop(self) -> None:
        """Files ahead of need, in worker threads (RocketMQ's AllocateMappedFileService): the
        next consume-queue file of every queue past the middle of its last one, and the pages
        of its last file ahead of its writer (woken by the append that got there), the next
        commitlog segment once the current one is half written, and pre-faulted pages ahead of
        the commitlog's writer. A put then finds its files ready and never waits for a disk
        operation."""
        assert self._allocate_wakeup is not None
        wakeup = self._allocate_wakeup
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ALLOCATE_INTERVAL_S):
                    await wakeup.wait()
            wakeup.clear()
            await self._prepare_queues_ahead()
            if self.commitlog.warm_ahead_wanted():
                await self._in_thread(self.commitlog.warm_ahead)
            start = self.commitlog.need_next_file()
            if start is not None:
                with contextlib.suppress(DiskFullError):
                    # A full disk here is reported by the append that needs the file.
                    await self._in_thread(self.commitlog.prepare_next_file, start)

    async def _prepare_queues_ahead(self) -> None:
        """Each queue an append asked for: its next pages faulted in, its next file made."""
        wanted, self._ahead_wanted = self._ahead_wanted, {}
        for (topic, queue_id), queue in wanted.items():
            if self.consume_queues.get(topic, queue_id) is not queue:
                continue
            if queue.warm_wanted():
                await self._in_thread(queue.warm_ahead)
            start = queue.spare_wanted()
            if start is None:
                continue

            async def create(at: int = start, queue: ConsumeQueue = queue) -> None:
                queue.adopt_prepared(
                    await self._in_thread(queue.create_file_detached, at, warm=True))

            with contextlib.suppress(DiskFullError):
                # Shared with a put that needs the same file now (`_prepare_files`).
                await self._once(("cq", topic, queue_id, start), create)

    async def _clean_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.clean_resource_interval_ms / 1000)
            await self.clean_expired_files()

    def disk_used_ratio(self) -> float:
        usage = shutil.disk_usage(self.config.store_path_root_dir)
        return usage.used / usage.total if usage.total else 0.0

    async def clean_expired_files(self, *, now_ms: int | None = None,
                                  current_hour: int | None = None) -> int:
        """Delete expired commitlog files per retention rules, then consume-queue files that
        point only below the new minimum. Returns the number of commitlog files deleted."""
        from store.retention import FileAge, files_to_delete, parse_delete_when

        ratio = await self._in_thread(self.disk_used_ratio)
        self.disk_full = ratio * 100 >= self.config.disk_space_warning_level_ratio
        files = list(self.commitlog.files.files)
        now = self.wall_ms() if now_ms is None else now_ms
        hour = time.localtime(now / 1000).tm_hour if current_hour is None else current_hour

        def file_ages() -> list[FileAge]:
            return [FileAge(m.file_from_offset, int(m.path.stat().st_mtime * 1000))
                    for m in files]

        ages = await self._in_thread(file_ages)
        replica_need = self.replica_need() if self.replica_need is not None else None
        doomed = files_to_delete(
            ages, now_ms=now,
            file_reserved_time_ms=int(self.config.file_reserved_time_h * 3600_000),
            delete_when_hours=parse_delete_when(self.config.delete_when), current_hour=hour,
            disk_used_ratio=ratio, disk_max_used_space_ratio=self.config.disk_max_used_space_ratio,
            protect_from_offset=min(self._reput_from, self.confirm_offset),
            replica_protect_from_offset=replica_need,
        )
        if not doomed:
            return 0
        cut = ages[len(doomed)].start_offset  # the new min offset
        if replica_need is not None and cut > replica_need:
            log.warning("disk pressure: deleting commitlog files a connected slave still needs "
                        "slave_needs_from=%d new_min_phy_offset=%d disk_used_ratio=%.2f; that "
                        "slave cannot catch up from this master any more", replica_need, cut,
                        ratio)
        count = len(doomed)
        async with self._disk():
            await self._in_thread(self._delete_first_files, count)
        return count

    def _delete_first_files(self, count: int) -> None:
        deleted = self.commitlog.files.delete_first(count)
        for mapped in deleted:
            log.info("deleted expired commitlog file path=%s", mapped.path)
        min_phy = self.commitlog.min_phy_offset
        for queue in self.consume_queues:
            queue.delete_expired(min_phy)
