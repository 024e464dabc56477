"""The commitlog: one logical byte log of RocketMQ records over fixed-size mapped segments.

Appends run on the event loop and are synchronous: one copy of the encoded record into the
mapping, CRCs included (store/message_encoder.py and store/message_batch.py write the bytes).
Everything that blocks (msync, fsync, allocating a segment) runs in a worker thread through the
owning store.

Invariants:
- A record never spans two files: when `size + 8` does not fit in the rest of the file, a BLANK
  record fills it and the record starts the next file (docs/store-format.md §2, §3.6).
- Every record's PHYSICALOFFSET field equals its position in the log.
- `flushed_where <= max_phy_offset`; bytes below `flushed_where` are on disk.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Final

import numpy as np

from store import testhooks
from store.config import StoreConfig
from store.errors import MessageIllegalError, RecordCorruptError
from store.mapped_file import MappedFile, make_dirs_durable, offset_to_file_name
from store.mapped_file_queue import MappedFileQueue
from store.message_batch import EncodedBatch, write_batch
from store.message_encoder import EncodedMessage, write_record
from store.native import native as _native
from store.record_check import CheckStatus, check_record
from store.record_layout import TOTAL_SIZE, write_blank

log = logging.getLogger(__name__)

END_FILE_MIN_BLANK_LENGTH: Final = 8
# Keep this much of the current segment pre-faulted ahead of the write position.
WARM_AHEAD_BYTES: Final = 128 * 1024 * 1024
# Pre-faulting goes a chunk at a time: zeros written over it (`MappedFile.zero_fill`: page-cache
# folios of ZERO_FILL_CALL_BYTES), then MADV_POPULATE_WRITE maps those pages. That
# call holds the process's mmap lock for reading (a thread mapping a new file, or the loop's own
# mmap/munmap, then waits for it, and any page fault of the event loop queues behind that
# writer); over pages already cached it is short. Without the zeros first, each call's first
# touch of a hole read around it (8 MiB on this VM's disk) in one kernel call: 19 ms on memory
# the host backs again only on first touch, a stall of the loop behind it; at 45,000 msg/s the
# publish p99 was 15-22 ms without, 9-12 with (2026-11-27, docs/benchmark-history.md).
WARM_CHUNK_BYTES: Final = 2 * 1024 * 1024
# A segment prepared ahead has this much of its start pre-faulted before a roll adopts it.
NEXT_FILE_WARM_BYTES: Final = 16 * 1024 * 1024
# The one fault point that needs a record half written: while it is armed, appends take the
# Python writer and reach the mapping in two copies, this fixed prefix first (up to BODYLENGTH
# for IPv4 hosts); every other fault point leaves the C writer production uses in place.
HALF_WRITE_FAULT: Final = "commitlog.append.after_header"
FAULT_HEADER_BYTES: Final = 88


class CommitLog:
    """Segments, the write position, and raw/record reads by physical offset."""

    __slots__ = ("_alloc_lock", "_next_file", "_populate_lock", "config", "files",
                 "flushed_where", "raw_writes")

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.files = MappedFileQueue(config.commitlog_dir, config.mapped_file_size_commit_log)
        self.flushed_where = 0
        self._next_file: MappedFile | None = None
        # Held while a segment is created and while `_next_file` changes hands, so the
        # allocator thread and a roll never race to create the same file. A roll on the event
        # loop takes it only when the next file is ready (`file_needed_for` makes the put wait
        # for it in a worker thread otherwise), so it never waits for an allocation.
        self._alloc_lock = threading.Lock()
        # Held by the pre-faulting thread while it touches a mapping and by whatever unmaps
        # (truncation, close): never by the appends, so a roll never waits for pre-faulting.
        self._populate_lock = threading.Lock()
        # Set once a slave writes replicated bytes with pwrite (`append_raw_run`): its files are
        # then never pre-faulted (that would zero-fill pages the writes overwrite anyway).
        # `become_master_blocking` clears it, so a new master's appends find warm pages again.
        self.raw_writes = False

    def load(self) -> None:
        self.files.load()

    @property
    def file_size(self) -> int:
        return self.files.file_size

    @property
    def min_phy_offset(self) -> int:
        return self.files.min_offset

    @property
    def max_phy_offset(self) -> int:
        return self.files.max_offset

    # ---------------------------------------------------------------- appends

    def _file_for(self, size: int) -> MappedFile:
        """The file the next `size`-byte write goes into, rolling with a BLANK if needed."""
        mapped = self.files.last
        if mapped is not None and size + END_FILE_MIN_BLANK_LENGTH <= mapped.remaining:
            return mapped
        if size + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise MessageIllegalError(
                f"record of {size} bytes does not fit a commitlog file of {self.file_size} bytes"
            )
        return self._roll(mapped)

    def _roll(self, mapped: MappedFile | None) -> MappedFile:
        start = 0 if mapped is None else mapped.file_end_offset
        with self._alloc_lock:
            next_file = self._next_file
            self._next_file = None
            if next_file is not None and next_file.file_from_offset == start:
                self.files.adopt_file(next_file)
            else:
                if next_file is not None:
                    next_file.destroy()
                # Not prepared ahead (first file, or appends outran the allocator).
                next_file = self.files.create_file(start)
        if testhooks.FAULTS_ON:
            testhooks.fault_point("commitlog.roll.after_create")
        if mapped is not None and mapped.remaining > 0:
            mapped.claim(mapped.file_size)
            write_blank(mapped.buf, mapped.wrote_position, mapped.remaining)
            mapped.wrote_position = mapped.file_size
        return next_file

    def append_message(
        self, msg: EncodedMessage, *, queue_offset: int, store_timestamp: int
    ) -> int:
        """Append one record; returns its physical offset."""
        mapped = self._file_for(msg.total_size)
        pos = mapped.wrote_position
        mapped.claim(pos + msg.total_size)
        phy_offset = mapped.file_from_offset + pos
        if testhooks.FAULTS_ON and testhooks.armed(HALF_WRITE_FAULT):
            scratch = bytearray(msg.total_size)
            write_record(
                scratch, 0, msg,
                queue_offset=queue_offset, phy_offset=phy_offset, store_timestamp=store_timestamp,
            )
            _copy_in_two_steps(mapped, pos, scratch)
        elif _native is not None:  # write_record's C path, called directly: the hot one
            _native.write_record(
                mapped.buf, pos, msg.template, queue_offset, phy_offset, store_timestamp,
                msg.store_timestamp_at, msg.append_prop_crc,
            )
        else:
            write_record(
                mapped.buf, pos, msg,
                queue_offset=queue_offset, phy_offset=phy_offset, store_timestamp=store_timestamp,
            )
        if testhooks.FAULTS_ON:
            testhooks.fault_point("commitlog.append.before_position")
        mapped.wrote_position = pos + msg.total_size
        return phy_offset

    def append_batch(
        self, batch: EncodedBatch, *, first_queue_offset: int, store_timestamp: int
    ) -> int:
        """Append a batch's records contiguously in one file; returns the first offset."""
        mapped = self._file_for(batch.total_size)
        pos = mapped.wrote_position
        mapped.claim(pos + batch.total_size)
        phy_offset = mapped.file_from_offset + pos
        if testhooks.FAULTS_ON and testhooks.armed(HALF_WRITE_FAULT):
            scratch = bytearray(batch.total_size)
            write_batch(
                scratch, 0, batch,
                first_queue_offset=first_queue_offset, phy_offset=phy_offset,
                store_timestamp=store_timestamp,
            )
            _copy_in_two_steps(mapped, pos, scratch)
        elif _native is not None:  # write_batch's C path, called directly: the hot one
            _native.write_batch(
                mapped.buf, pos, batch.template, batch.sizes, first_queue_offset, phy_offset,
                store_timestamp, batch.store_timestamp_at, batch.append_prop_crc,
            )
        else:
            write_batch(
                mapped.buf, pos, batch,
                first_queue_offset=first_queue_offset, phy_offset=phy_offset,
                store_timestamp=store_timestamp,
            )
        if testhooks.FAULTS_ON:
            testhooks.fault_point("commitlog.append.before_position")
        mapped.wrote_position = pos + batch.total_size
        return phy_offset

    def append_raw(self, phy_offset: int, data: bytes | bytearray | memoryview) -> None:
        """Copy replicated commitlog bytes (an HA TRANSFER body: an arbitrary byte range, maybe
        cutting a record) to the end of the log at `phy_offset`.

        `phy_offset` must be the log's end; an empty log starts its first file there, which must
        then be a file start. The range must fit the rest of the current file (a master never
        ships across a file); a full last file rolls to the next one (prepared ahead by the
        store's allocator, or created inline). Raises `ValueError` otherwise: nothing is copied.
        """
        self.append_raw_run(phy_offset, (data,))

    def append_raw_run(self, phy_offset: int,
                       parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """`append_raw` of consecutive ranges (the bodies of the TRANSFER frames of one read)
        from `phy_offset`: each must fit one file as in `append_raw`; the run may go on into the
        next files. Those of one file are written at once, with one pwritev: no zero-fill, no
        pre-faulting needed (`MappedFile.write_at`). In one process with allAck sends (a master
        and two slaves) that cost 38-42 us of CPU per send against 47-52 us for copies into
        the mapping pre-faulted ahead, live traffic of some 16 KiB a read included. Raises
        `ValueError` at the first range that does not continue the log within one file: the
        ranges before it are appended, nothing of it or after it."""
        index = 0
        while index < len(parts):
            mapped = self._raw_target(phy_offset, len(parts[index]))
            room = mapped.remaining
            end = index
            size = 0
            while end < len(parts) and size + len(parts[end]) <= room:
                size += len(parts[end])
                end += 1
            pos = mapped.wrote_position
            if not self.raw_writes or mapped.populated_to < mapped.file_size:
                # Written pages are in the page cache: pre-faulting (or reading ahead) beyond
                # the writer would only zero-fill pages about to be overwritten.
                self.raw_writes = True
                mapped.populated_to = mapped.file_size
                mapped.set_read_ahead(False)
            mapped.claim(pos + size)
            mapped.write_at(pos, parts[index:end])
            mapped.wrote_position = pos + size
            if mapped.wrote_position == mapped.file_size:
                mapped.set_read_ahead(True)  # complete: later reads may come from the disk
            phy_offset += size
            index = end

    def _raw_target(self, phy_offset: int, size: int) -> MappedFile:
        """The file replicated bytes [phy_offset, phy_offset + size) go into (created or rolled
        to if needed); raises `ValueError` as `append_raw` says."""
        mapped = self.files.last
        if mapped is None:
            if phy_offset % self.file_size:
                raise ValueError(
                    f"replicated bytes at {phy_offset}: an empty commitlog starts at a file start "
                    f"(a multiple of {self.file_size})"
                )
            with self._alloc_lock:
                prepared, self._next_file = self._next_file, None
                if prepared is not None and prepared.file_from_offset == phy_offset:
                    self.files.adopt_file(prepared)
                    mapped = prepared
                else:
                    if prepared is not None:
                        prepared.destroy()
                    mapped = self.files.create_file(phy_offset)
        elif phy_offset != mapped.max_offset:
            raise ValueError(
                f"replicated bytes at {phy_offset}: the commitlog ends at {mapped.max_offset}"
            )
        if mapped.is_full() and size:
            mapped = self._roll(mapped)
        if size > mapped.remaining:
            raise ValueError(
                f"replicated bytes [{phy_offset}, {phy_offset + size}) cross the end of "
                f"{mapped.path.name} at {mapped.file_end_offset}"
            )
        return mapped

    def end_raw_writes(self) -> None:
        """Replication into this log ended (the node becomes master): pre-fault ahead of the
        appends again, from the write position of the last file, and read ahead normally."""
        self.raw_writes = False
        last = self.files.last
        if last is not None:
            last.populated_to = min(last.populated_to, last.wrote_position)
            last.set_read_ahead(True)

    def raw_file_needed(self, phy_offset: int, size: int) -> int | None:
        """Start of the file `append_raw(phy_offset, <size bytes>)` (or `append_raw_run` of
        `size` bytes in all) would create inline (on the event loop), or None; prepare it first
        with `prepare_raw_file` in a worker thread. Only the next file is named: a run longer
        than a file may still create the one after inline."""
        last = self.files.last
        if last is None:
            start = phy_offset - phy_offset % self.file_size
        elif size and (last.is_full() or size > last.remaining):
            start = last.file_end_offset
        else:
            return None
        prepared = self._next_file
        return None if prepared is not None and prepared.file_from_offset == start else start

    def prepare_raw_file(self, start: int) -> None:
        """Create the file starting at `start` ahead of `append_raw` (also the first file of an
        empty log, at any file start); blocking (worker thread)."""
        with self._alloc_lock:
            last = self.files.last
            if self._next_file is not None or (last is not None and start != last.file_end_offset):
                return
            make_dirs_durable(self.files.directory)
            self._next_file = MappedFile.create(
                self.files.directory / offset_to_file_name(start), self.file_size
            )

    def view(self, phy_offset: int, size: int) -> memoryview:
        """A view of written bytes [phy_offset, phy_offset + size) in one file, without a copy
        (the HA master sends from it). Release it soon: a live view blocks closing the file.
        Raises `IndexError` outside the written data of one file."""
        mapped = self.files.find(phy_offset)
        if mapped is None or phy_offset + size > mapped.max_offset:
            raise IndexError(f"commitlog: [{phy_offset}, {phy_offset + size}) not written")
        pos = phy_offset - mapped.file_from_offset
        with memoryview(mapped.buf) as whole:
            return whole[pos : pos + size]

    def file_needed_for(self, size: int) -> int | None:
        """Start offset of the segment an append of `size` bytes would have to create inline
        (no room left and none prepared); None when the append needs no new file."""
        last = self.files.last
        if last is not None and size + END_FILE_MIN_BLANK_LENGTH <= last.remaining:
            return None
        start = 0 if last is None else last.file_end_offset
        if self._next_file is not None and self._next_file.file_from_offset == start:
            return None
        return start

    def need_next_file(self) -> int | None:
        """Start offset of the file to prepare ahead, or None when it is ready or not needed:
        the first file of an empty log (so that the first put does not wait for a 1 GiB
        allocation), and the next one once the current file is half written."""
        last = self.files.last
        if self._next_file is not None:
            return None
        if last is None:
            return 0
        return last.file_end_offset if last.wrote_position * 2 >= last.file_size else None

    def warm_ahead_wanted(self) -> bool:
        """Whether `warm_ahead` has work: less than half of WARM_AHEAD_BYTES is pre-faulted
        ahead of the writer. Cheap: checked on the event loop, so that a worker thread (and the
        GIL hand-over it costs the loop) is used only when there is something to do."""
        last = self.files.last
        if last is None or last.buf.closed or self.raw_writes:
            return False
        target = min(last.file_size, last.wrote_position + WARM_AHEAD_BYTES)
        return last.populated_to < target and not (
            last.populated_to - last.wrote_position >= WARM_AHEAD_BYTES // 2
            and last.populated_to > 0
        )

    def warm_ahead(self) -> None:
        """Pre-fault the current segment ahead of the writer; blocking (worker thread)."""
        while True:
            # Small chunks: truncation and close wait for one chunk at most.
            with self._populate_lock:
                if not self.warm_ahead_wanted():
                    return
                last = self.files.last
                assert last is not None
                target = min(last.file_size, last.wrote_position + WARM_AHEAD_BYTES)
                last.populate(min(target, max(last.populated_to, last.wrote_position)
                                  + WARM_CHUNK_BYTES), zero_fill=True)

    def prepare_next_file(self, start: int) -> None:
        """Allocate and map the next segment ahead of time, then pre-fault its start; blocking
        (worker thread). The file is complete and durable (size, allocation, directory entry)
        before it is handed over, so a roll only ever adopts a durable file."""
        with self._alloc_lock:
            last = self.files.last
            expected = 0 if last is None else last.file_end_offset
            if self._next_file is not None or start != expected:
                return
            make_dirs_durable(self.files.directory)
            mapped = MappedFile.create(
                self.files.directory / offset_to_file_name(start), self.file_size
            )
            self._next_file = mapped
        # Outside the allocation lock: a roll may adopt the file meanwhile (the zero-fill
        # writes only past what its writer claimed, `MappedFile.claim`).
        populated = 0
        while not self.raw_writes and populated < min(self.file_size, NEXT_FILE_WARM_BYTES):
            with self._populate_lock:
                if mapped.buf.closed:
                    return
                populated += WARM_CHUNK_BYTES
                mapped.populate(populated, zero_fill=True)

    # ---------------------------------------------------------------- reads

    def read(self, phy_offset: int, size: int) -> bytes:
        """Copy [phy_offset, phy_offset + size) from one file; IndexError outside written data."""
        mapped = self.files.find(phy_offset)
        if mapped is None or phy_offset + size > mapped.max_offset:
            raise IndexError(f"commitlog: [{phy_offset}, {phy_offset + size}) not written")
        return mapped.read(phy_offset - mapped.file_from_offset, size)

    def read_record_at(self, phy_offset: int) -> bytes | None:
        """The verified record starting at `phy_offset`, its size read from its TOTALSIZE;
        None when nothing is written there (or a non-positive size); `RecordCorruptError` for
        bytes that are no valid record there (damage, or an offset inside a record)."""
        try:
            (size,) = TOTAL_SIZE.unpack(self.read(phy_offset, TOTAL_SIZE.size))
            return self.read_record(phy_offset, size) if size > 0 else None
        except IndexError:
            return None

    def read_record(self, phy_offset: int, size: int) -> bytes:
        """One record's bytes after checking them (magic, sizes, position, both CRCs).

        Damaged bytes are never served: a failed check raises `RecordCorruptError`.
        """
        mapped = self.files.find(phy_offset)
        if mapped is None or phy_offset + size > mapped.max_offset:
            raise IndexError(f"commitlog: record [{phy_offset}, {phy_offset + size}) not written")
        pos = phy_offset - mapped.file_from_offset
        check = check_record(
            mapped.buf, pos, limit=pos + size, expected_phy_offset=phy_offset,
            check_body_crc=True, verify_prop_crc=self.config.force_verify_prop_crc,
        )
        if check.status is not CheckStatus.VALID or check.size != size:
            raise RecordCorruptError(
                f"commitlog record at {phy_offset} ({mapped.path.name}) size {size}: "
                f"{check.reason or f'size field {check.size}'}"
            )
        return mapped.read(pos, size)

    def read_records(self, phy_offsets: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        """`read_record` of each (offset, size), in order: the common records of one file are
        checked in one C call where built; any other, and any the C check is unsure of, go
        through `read_record`, which raises on damage."""
        mapped = self.files.find(phy_offsets[0]) if _native is not None and phy_offsets else None
        if mapped is None or phy_offsets[-1] + sizes[-1] > mapped.max_offset:
            # Not built, nothing to read, or spanning files or unwritten bytes: one by one.
            return [self.read_record(phy, size) for phy, size in zip(phy_offsets, sizes,
                                                                      strict=True)]
        base = mapped.file_from_offset
        positions = np.array(phy_offsets, dtype=np.int64) - base
        surely = _native.records_surely_valid(
            mapped.buf, positions, np.array(sizes, dtype=np.int64), base,
            self.config.force_verify_prop_crc,
        )
        buf = mapped.buf
        return [
            buf[phy - base : phy - base + size] if ok else self.read_record(phy, size)
            for phy, size, ok in zip(phy_offsets, sizes, surely, strict=True)
        ]

    def read_records_joined(self, phy_offsets: list[int], sizes: list[int]) -> bytes:
        """The records of `read_records`, one after another, as one `bytes` (a pull's body).

        A pull's records mostly lie in a few contiguous runs (a producer's batch is one run):
        once the C check finds them all sound, each run is one copy out of the mapping, not one
        per record plus the join."""
        if not phy_offsets:
            return b""
        mapped = self.files.find(phy_offsets[0]) if _native is not None else None
        if mapped is None or phy_offsets[-1] + sizes[-1] > mapped.max_offset:
            return b"".join(self.read_records(phy_offsets, sizes))
        base = mapped.file_from_offset
        surely = _native.records_surely_valid(
            mapped.buf, np.array(phy_offsets, dtype=np.int64) - base,
            np.array(sizes, dtype=np.int64), base, self.config.force_verify_prop_crc,
        )
        if surely.count(0):
            return b"".join(self.read_records(phy_offsets, sizes))
        buf = mapped.buf
        start = phy_offsets[0]
        end = start + sizes[0]
        runs: list[bytes] = []
        for phy, size in zip(phy_offsets[1:], sizes[1:], strict=True):
            if phy != end:
                runs.append(buf[start - base : end - base])
                start = phy
            end = phy + size
        if not runs:
            return buf[start - base : end - base]
        runs.append(buf[start - base : end - base])
        return b"".join(runs)

    # ---------------------------------------------------------------- durability

    def flush(self, least_pages: int = 0) -> int:
        """msync every file from `flushed_where` to the write position; returns the new
        `flushed_where`. With `least_pages`, skip unless that many pages are dirty (ASYNC_FLUSH).
        Blocking (worker thread)."""
        target = self.max_phy_offset
        if least_pages and target - self.flushed_where < least_pages * 4096:
            return self.flushed_where
        for mapped in list(self.files.files):
            if mapped.file_end_offset <= self.flushed_where:
                continue
            if mapped.file_from_offset >= target:
                break
            mapped.flush(min(mapped.wrote_position, target - mapped.file_from_offset))
        self.flushed_where = max(self.flushed_where, target)
        return self.flushed_where

    def truncate_dirty(self, phy_offset: int) -> None:
        """Cut the log at `phy_offset`, zeroing the tail on disk (M7). Blocking."""
        with self._alloc_lock, self._populate_lock:
            if self._next_file is not None:
                self._next_file.destroy()
                self._next_file = None
            self.files.truncate_dirty(phy_offset)
        self.flushed_where = min(self.flushed_where, phy_offset)

    def close(self) -> None:
        with self._alloc_lock, self._populate_lock:
            if self._next_file is not None:
                # A prepared but unused file would break the exact-size/contiguity rules of a
                # Java reader only if empty files were left behind; remove it.
                self._next_file.destroy()
                self._next_file = None
            self.files.close()


def _copy_in_two_steps(mapped: MappedFile, pos: int, record: bytearray) -> None:
    """Fault-point builds only: copy `record` into the mapping at `pos`, the fixed header first."""
    mapped.buf[pos : pos + FAULT_HEADER_BYTES] = record[:FAULT_HEADER_BYTES]
    testhooks.fault_point(HALF_WRITE_FAULT)
    mapped.buf[pos + FAULT_HEADER_BYTES : pos + len(record)] = record[FAULT_HEADER_BYTES:]
