"""One consume queue (topic, queueId): 20-byte units pointing into the commitlog.

Unit layout (docs/store-format.md §4.2), big-endian:
  0          8      12          20
  | phyOffset | size | tagsCode |
  | i64       | i32  | i64      |

The queue is a `MappedFileQueue` of fixed-size files; a unit's logical (queue) offset is its byte
position / 20. Lookups view the mapping through a numpy structured dtype; appends store one unit
with a precompiled struct, a batch with one numpy assignment.

Invariants:
- Units are dense: the unit for queue offset n sits at byte n*20; appending anywhere but the end
  is refused (`QueueOrderError`, the queue unchanged), except a re-dispatch of a unit already
  present, which is skipped (RocketMQ's idempotent re-dispatch).
- phyOffset increases with the queue offset (fillers at the start have phyOffset 0): a unit
  for a record below the last unit's end is never appended.
- A valid unit has phyOffset >= 0 and size > 0; the first invalid unit ends the queue.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from store import testhooks
from store.errors import DataInvariantError, QueueOrderError
from store.mapped_file import MappedFile, make_dirs_durable, offset_to_file_name
from store.mapped_file_queue import MappedFileQueue
from store.native import native as _native

log = logging.getLogger(__name__)

CQ_UNIT: Final = np.dtype([("phy_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
CQ_UNIT_STRUCT: Final = struct.Struct(">qiq")
CQ_UNIT_SIZE: Final = 20
assert CQ_UNIT.itemsize == CQ_UNIT_STRUCT.size == CQ_UNIT_SIZE
FILLER_SIZE: Final = 0x7FFFFFFF

CqUnits = npt.NDArray[np.void]


# How far ahead of the writer a worker thread faults in a queue file's pages (`warm_ahead`):
# dispatch, on the event loop, then writes into pages that are there. Without it each new page
# cost dispatch a major fault (the page read in: the zeros of a block allocated but never
# written), some 220 a second at 45,000 msg/s (eighteenth session). A window rather than the
# whole file: a broker with thousands of queues would otherwise dirty 6 MB of zeros for each.
WARM_AHEAD_BYTES: Final = 128 * 1024


class ConsumeQueue:
    """The units of one (topic, queue_id); offsets in the API are logical queue offsets."""

    __slots__ = (
        "_create_lock",
        "_files",
        "_next_offset",
        "_spares",
        "_write_end",
        "max_phy_offset",
        "min_logic_offset",
        "queue_id",
        "topic",
    )

    def __init__(self, root: Path, topic: str, queue_id: int, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self._files = MappedFileQueue(root / topic / str(queue_id), file_size)
        # End (phyOffset + size) of the last unit: re-dispatch below it is a no-op.
        self.max_phy_offset = 0
        self.min_logic_offset = 0
        # Files created ahead for a batch that crosses into them (see prepare_for).
        self._spares: list[MappedFile] = []
        # Serialises creating a file ahead (worker thread) with creating it inline (dispatch on
        # the event loop): whoever comes second finds the file there and does not create it.
        self._create_lock = threading.Lock()
        # Cached write cursor: the next queue offset and the end of the last file in bytes.
        self._next_offset = 0
        self._write_end = 0

    # ---------------------------------------------------------------- load and recovery

    def load_and_recover(self) -> None:
        """Map the files and find the end of valid units (docs/store-format.md §9.4).

        Scanning starts at the third file from the end, as RocketMQ does; units before it are
        taken as valid. Files after the stop are deleted and the tail of the stop file zeroed.
        """
        self._files.load()
        files = self._files.files
        if not files:
            return
        end_offset = files[-1].file_end_offset
        for index in range(max(0, len(files) - 3), len(files)):
            units = files[index].numpy_view(CQ_UNIT)
            valid = (units["phy_offset"] >= 0) & (units["size"] > 0)
            invalid_at = int(np.argmin(valid)) if not valid.all() else len(units)
            del units, valid
            if invalid_at < files[index].file_size // CQ_UNIT_SIZE:
                end_offset = files[index].file_from_offset + invalid_at * CQ_UNIT_SIZE
                break
        stop = self._files.find(end_offset) if end_offset < files[-1].file_end_offset else None
        if stop is not None and stop is files[-1] and not self._tail_dirty(stop, end_offset):
            # The usual case after any exit: zeros after the last unit, nothing to rewrite.
            stop.wrote_position = stop.flushed_position = end_offset - stop.file_from_offset
        else:
            self._files.truncate_dirty(end_offset)
        self._sync_cursor()
        self._recompute_max_phy()
        self.min_logic_offset = self._first_real_unit_offset()

    @staticmethod
    def _tail_dirty(mapped: MappedFile, end_offset: int) -> bool:
        tail = mapped.numpy_view(np.uint8)[end_offset - mapped.file_from_offset :]
        dirty = bool(tail.any())
        del tail
        return dirty

    def _recompute_max_phy(self) -> None:
        if self.max_offset > self.min_offset_in_files:
            phy, size, _ = self.unit_at(self.max_offset - 1)
            self.max_phy_offset = phy + size if size != FILLER_SIZE else 0
        else:
            self.max_phy_offset = 0

    def _first_real_unit_offset(self) -> int:
        files = self._files.files
        if not files:
            return 0
        units = files[0].numpy_view(CQ_UNIT)
        count = files[0].wrote_position // CQ_UNIT_SIZE
        fillers = int(np.count_nonzero(units["size"][:count] == FILLER_SIZE))
        del units
        return files[0].file_from_offset // CQ_UNIT_SIZE + fillers

    # ---------------------------------------------------------------- offsets

    @property
    def max_offset(self) -> int:
        """Next queue offset to be written (RocketMQ maxOffsetInQueue)."""
        return self._next_offset

    @property
    def has_files(self) -> bool:
        """False for a queue with no file yet: its first unit may take any queue offset."""
        return bool(self._files.files)

    @property
    def mapped_files(self) -> tuple[MappedFile, ...]:
        """The queue's files, then the spares made ahead of need, in offset order."""
        return (*self._files.files, *self._spares)

    @property
    def min_offset_in_files(self) -> int:
        return self._files.min_offset // CQ_UNIT_SIZE

    @property
    def min_offset(self) -> int:
        """Smallest queue offset still readable (after fillers and retention)."""
        return max(self.min_logic_offset, self.min_offset_in_files)

    # ---------------------------------------------------------------- writes

    def _file_for_write(self, position: int) -> MappedFile:
        last = self._files.last
        if last is not None and last.file_from_offset <= position < last.file_end_offset:
            return last
        if last is None or position == last.file_end_offset:
            start = position - position % self._files.file_size
            mapped = self._take_spare(start) or self._create_inline(start)
            if last is None and position > start:
                self._fill_pre_blank(mapped, position - start)
            self._sync_cursor()
            return mapped
        raise DataInvariantError(
            f"consume queue {self.topic}/{self.queue_id}: write at byte {position} outside the "
            f"last file [{last.file_from_offset}, {last.file_end_offset})"
        )

    def _create_inline(self, start: int) -> MappedFile:
        """Create the file at byte `start` now; if a worker thread just made it (not adopted
        yet), map that one instead: its `adopt_prepared` will then let it go."""
        with self._create_lock:
            path = self._files.directory / offset_to_file_name(start)
            if not path.exists():
                return self._files.create_file(start)
            mapped = self._open_new(start)
            self._files.adopt_file(mapped)
            return mapped

    def _open_new(self, start: int) -> MappedFile:
        """Map the file a worker thread created at byte `start` (new, so empty)."""
        mapped = MappedFile.open_existing(self._files.directory / offset_to_file_name(start),
                                          self._files.file_size)
        mapped.wrote_position = mapped.flushed_position = 0
        return mapped

    def _take_spare(self, start: int) -> MappedFile | None:
        """Adopt the file prepared for `start`, if there is one."""
        if self._spares and self._spares[0].file_from_offset == start:
            mapped = self._spares.pop(0)
            self._files.adopt_file(mapped)
            return mapped
        return None

    def file_needed_for(self, queue_offset: int, count: int = 1) -> int | None:
        """Start (in bytes) of the next file units [queue_offset, queue_offset+count) need that
        neither exists nor is prepared; None when nothing is missing."""
        if self._files.files and queue_offset != self._next_offset:
            return None
        file_size = self._files.file_size
        if self._spares:
            next_start = self._spares[-1].file_end_offset
        elif self._files.files:
            next_start = self._write_end
        else:
            next_start = queue_offset * CQ_UNIT_SIZE
            next_start -= next_start % file_size
        return next_start if next_start < (queue_offset + count) * CQ_UNIT_SIZE else None

    def spare_wanted(self) -> int | None:
        """Where the next file starts (in bytes) when it is time to create it ahead of need:
        the writer is in the second half of the last file and no spare is ready. None
        otherwise. Cheap: called after every append."""
        if self._spares or not self._files.files:
            return None
        if (self._write_end - self._next_offset * CQ_UNIT_SIZE) * 2 > self._files.file_size:
            return None
        return self._write_end

    def create_file_detached(self, start: int, *, warm: bool = False) -> MappedFile | None:
        """Create the file at byte `start` without adding it to the queue (a worker thread
        does this; `adopt_prepared` then takes it on the event loop). Blocking. None when the
        file exists already (dispatch created it inline meanwhile). `warm`: also fault in its
        first WARM_AHEAD_BYTES (a spare made ahead of need)."""
        with self._create_lock:
            path = self._files.directory / offset_to_file_name(start)
            if path.exists():
                return None
            make_dirs_durable(self._files.directory)
            mapped = MappedFile.create(path, self._files.file_size)
            # Without read-ahead while this process writes it: the dispatch's first unit in a
            # new page (on the event loop) then zero-fills that page, not the device's
            # read-around window (8 MiB here: the whole file, 19 ms on this VM's cold memory).
            # The full files before it get theirs back.
            mapped.set_read_ahead(False)
            for full in reversed(self._files.files[:-1]):
                if full.read_ahead:
                    break
                full.set_read_ahead(True)
        if warm:
            # Outside the lock: dispatch, on the event loop, may be waiting on it.
            mapped.populate(WARM_AHEAD_BYTES)
        return mapped

    def warm_wanted(self) -> bool:
        """Whether the writer is within half of WARM_AHEAD_BYTES of the last file's faulted-in
        pages (and the file has more). Cheap: called after every append."""
        if not self._files.files:
            return False
        last = self._files.files[-1]
        return last.populated_to < min(last.file_size,
                                       last.wrote_position + WARM_AHEAD_BYTES // 2)

    def warm_ahead(self) -> None:
        """Fault in the last file's pages up to WARM_AHEAD_BYTES past its writer. Blocking,
        without the GIL: a worker thread's call; best effort (`MappedFile.populate`)."""
        files = self._files.files
        if files:
            last = files[-1]
            last.populate(last.wrote_position + WARM_AHEAD_BYTES)

    def ahead_wanted(self) -> bool:
        """`spare_wanted()` or `warm_wanted()`: work for the store's allocate loop."""
        return self.spare_wanted() is not None or self.warm_wanted()

    def adopt_prepared(self, mapped: MappedFile | None) -> None:
        """Keep a file made by `create_file_detached` as the next spare, or drop it if the
        queue moved on meanwhile (only unmapped when the queue maps that file itself)."""
        if mapped is None:
            return
        expected = self._spares[-1].file_end_offset if self._spares else (
            self._write_end if self._files.files else mapped.file_from_offset)
        if mapped.file_from_offset == expected:
            self._spares.append(mapped)
        elif any(f.path == mapped.path for f in (*self._files.files, *self._spares)):
            mapped.close()  # the queue mapped that file itself meanwhile: it is in use
        else:
            mapped.destroy()

    @staticmethod
    def _fill_pre_blank(mapped: MappedFile, up_to: int) -> None:
        units = mapped.numpy_view(CQ_UNIT)
        count = up_to // CQ_UNIT_SIZE
        units["phy_offset"][:count] = 0
        units["size"][:count] = FILLER_SIZE
        units["tags_code"][:count] = 0
        del units
        mapped.wrote_position = up_to

    def _sync_cursor(self) -> None:
        """Recompute the cached write cursor after the file list changed."""
        self._next_offset = self._files.max_offset // CQ_UNIT_SIZE
        last = self._files.last
        self._write_end = last.file_end_offset if last is not None else 0

    def _check_append(self, queue_offset: int, phy_offset: int) -> bool:
        """True to write; False to skip a record the queue is past in the log (a re-dispatch,
        or a record skipped before whose queue offset a later record took); `QueueOrderError`
        for a gap or a different record at an offset the queue holds."""
        if phy_offset < self.max_phy_offset:
            return False
        expected = self._next_offset
        if queue_offset == expected or not self._files.files:
            return True
        raise QueueOrderError(
            f"consume queue {self.topic}/{self.queue_id}: unit for queue offset {queue_offset} "
            f"(phy {phy_offset}) does not follow max offset {expected}"
        )

    def prepare_for(self, queue_offset: int, count: int = 1) -> None:
        """Create (inline, blocking) the files units [queue_offset, queue_offset+count) will go
        into, so that a full disk refuses an append before its record reaches the commitlog.

        Files are kept aside as spares (the queue's max offset is derived from its last file)
        until the writer reaches them. `MessageStore.put_*` prepares them in a worker thread
        first (`file_needed_for`), so this finds nothing to do there.
        """
        if (queue_offset + count) * CQ_UNIT_SIZE <= self._write_end:
            return
        while (start := self.file_needed_for(queue_offset, count)) is not None:
            mapped = self.create_file_detached(start)
            if mapped is None:  # made by a worker thread, not adopted yet: take it as is
                mapped = self._open_new(start)
            self.adopt_prepared(mapped)

    def put(self, queue_offset: int, phy_offset: int, size: int, tags_code: int) -> None:
        """Append one unit (dispatch of one record)."""
        if (queue_offset != self._next_offset or phy_offset < self.max_phy_offset) \
                and not self._check_append(queue_offset, phy_offset):
            return
        position = queue_offset * CQ_UNIT_SIZE
        mapped = self._file_for_write(position)
        pos = position - mapped.file_from_offset
        if testhooks.FAULTS_ON:
            testhooks.fault_point("cq.write")
        CQ_UNIT_STRUCT.pack_into(mapped.buf, pos, phy_offset, size, tags_code)
        mapped.wrote_position = pos + CQ_UNIT_SIZE
        self._next_offset = queue_offset + 1
        self.max_phy_offset = phy_offset + size

    def next_unit_file(self, queue_offset: int) -> MappedFile | None:
        """The file the unit for `queue_offset` goes into when `put` would write it there as
        is: the queue's next offset, inside its last file. None otherwise (a file to create or
        adopt, an offset out of order, no file yet: `put` handles those)."""
        files = self._files.files
        if queue_offset != self._next_offset or not files:
            return None
        last = files[-1]
        pos = queue_offset * CQ_UNIT_SIZE - last.file_from_offset
        return last if 0 <= pos < last.file_size else None

    def unit_written(self, queue_offset: int, phy_offset: int, size: int) -> bool:
        """Take on the unit for `queue_offset` that `_native.append_message` wrote into
        `next_unit_file(queue_offset)`: what `put` does after its write. Returns
        `ahead_wanted()` (inlined: one call instead of three on the hot path)."""
        last = self._files.files[-1]
        wrote = queue_offset * CQ_UNIT_SIZE - last.file_from_offset + CQ_UNIT_SIZE
        last.wrote_position = wrote
        self._next_offset = queue_offset + 1
        self.max_phy_offset = phy_offset + size
        return (not self._spares and (self._write_end - self._next_offset * CQ_UNIT_SIZE) * 2
                <= self._files.file_size) or last.populated_to < min(
                    last.file_size, wrote + WARM_AHEAD_BYTES // 2)

    def put_batch(
        self,
        first_queue_offset: int,
        phy_offsets: npt.NDArray[np.int64],
        sizes: npt.NDArray[np.int32],
        tags_codes: npt.NDArray[np.int64],
    ) -> None:
        """Append consecutive units; one numpy assignment per file touched."""
        count = len(phy_offsets)
        done = 0
        while done < count:
            queue_offset = first_queue_offset + done
            if not self._check_append(queue_offset, int(phy_offsets[done])):
                done += 1
                continue
            position = queue_offset * CQ_UNIT_SIZE
            mapped = self._file_for_write(position)
            pos = position - mapped.file_from_offset
            room = (mapped.file_size - pos) // CQ_UNIT_SIZE
            n = min(room, count - done)
            if testhooks.FAULTS_ON:
                testhooks.fault_point("cq.write")
            units = mapped.numpy_view(CQ_UNIT)[pos // CQ_UNIT_SIZE : pos // CQ_UNIT_SIZE + n]
            units["phy_offset"] = phy_offsets[done : done + n]
            units["size"] = sizes[done : done + n]
            units["tags_code"] = tags_codes[done : done + n]
            del units
            mapped.wrote_position = pos + n * CQ_UNIT_SIZE
            done += n
            self._next_offset = queue_offset + n
        self.max_phy_offset = int(phy_offsets[-1]) + int(sizes[-1])

    def put_contiguous(
        self,
        first_queue_offset: int,
        phy_offset: int,
        sizes: npt.NDArray[np.int32],
        tags_codes: npt.NDArray[np.int64],
    ) -> None:
        """Append the units of a batch whose records lie back to back from `phy_offset` (a live
        batch append): in C, one call, when the units fit the last file."""
        count = len(sizes)
        position = first_queue_offset * CQ_UNIT_SIZE
        last = self._files.last
        if (
            _native is None
            or first_queue_offset != self._next_offset
            or last is None
            or not last.file_from_offset <= position <= last.file_end_offset - count * CQ_UNIT_SIZE
        ):
            phys = np.empty(count, dtype=np.int64)
            phys[0] = phy_offset
            np.cumsum(sizes[:-1], out=phys[1:])
            phys[1:] += phy_offset
            self.put_batch(first_queue_offset, phys, sizes, tags_codes)
            return
        pos = position - last.file_from_offset
        if testhooks.FAULTS_ON:
            testhooks.fault_point("cq.write")
        self.max_phy_offset = _native.put_cq_units(last.buf, pos, phy_offset, sizes, tags_codes)
        last.wrote_position = pos + count * CQ_UNIT_SIZE
        self._next_offset = first_queue_offset + count

    def _drop_spares(self) -> None:
        for spare in self._spares:
            spare.destroy()
        self._spares.clear()

    # ---------------------------------------------------------------- reads

    def unit_at(self, queue_offset: int) -> tuple[int, int, int]:
        """(phyOffset, size, tagsCode) of one unit; IndexError outside [min, max)."""
        position = queue_offset * CQ_UNIT_SIZE
        mapped = self._files.find(position)
        if mapped is None or position + CQ_UNIT_SIZE > mapped.max_offset:
            raise IndexError(f"consume queue {self.topic}/{self.queue_id}: no unit {queue_offset}")
        phy, size, tags = CQ_UNIT_STRUCT.unpack_from(mapped.buf, position - mapped.file_from_offset)
        return int(phy), int(size), int(tags)

    def units(self, queue_offset: int, max_count: int) -> CqUnits:
        """A copy of up to `max_count` units from `queue_offset`, within one file."""
        position = queue_offset * CQ_UNIT_SIZE
        mapped = self._files.find(position)
        if mapped is None or max_count <= 0:
            return np.empty(0, dtype=CQ_UNIT)
        first = (position - mapped.file_from_offset) // CQ_UNIT_SIZE
        last = min(first + max_count, mapped.wrote_position // CQ_UNIT_SIZE)
        view = mapped.numpy_view(CQ_UNIT)
        out = view[first:last].copy()
        del view
        return out

    def units_between(
        self, low: int, high: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(phyOffsets, sizes) of this queue's units with phyOffset in [low, high), in order
        (fillers excluded)."""
        parts: list[npt.NDArray[np.int64]] = []
        size_parts: list[npt.NDArray[np.int64]] = []
        for mapped in self._files.files:
            count = mapped.wrote_position // CQ_UNIT_SIZE
            if not count:
                continue
            view = mapped.numpy_view(CQ_UNIT)[:count]
            phys = view["phy_offset"].astype(np.int64)
            sizes = view["size"].copy()
            del view
            keep = (phys >= low) & (phys < high) & (sizes != FILLER_SIZE)
            if keep.any():
                parts.append(phys[keep])
                size_parts.append(sizes[keep].astype(np.int64))
        if not parts:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return np.concatenate(parts), np.concatenate(size_parts)

    def offset_by_time(self, timestamp_ms: int, store_timestamp: Callable[[int, int], int]) -> int:
        """The first queue offset whose message was stored at or after `timestamp_ms`.

        Binary search over the units, reading each probed message's store timestamp from the
        commitlog through `store_timestamp(phy_offset, size)`. Returns `max_offset` when every
        message is older, `min_offset` when all are newer or the queue is empty.
        """
        low, high = self.min_offset, self.max_offset
        while low < high:
            middle = (low + high) // 2
            phy, size, _ = self.unit_at(middle)
            if store_timestamp(phy, size) < timestamp_ms:
                low = middle + 1
            else:
                high = middle
        return low

    # ---------------------------------------------------------------- truncation, retention

    def truncate_by_phy(self, phy_offset: int) -> None:
        """Drop every unit whose phyOffset >= `phy_offset` (commitlog truncation)."""
        low, high = self.min_offset_in_files, self.max_offset
        while low < high:
            middle = (low + high) // 2
            phy, size, _ = self.unit_at(middle)
            if size != FILLER_SIZE and phy >= phy_offset:
                high = middle
            else:
                low = middle + 1
        if low < self.max_offset:
            log.info(
                "truncating consume queue topic=%s queue_id=%d from_offset=%d to_offset=%d",
                self.topic, self.queue_id, self.max_offset, low,
            )
            self._drop_spares()
            self._files.truncate_dirty(low * CQ_UNIT_SIZE)
            self._sync_cursor()
            self._recompute_max_phy()

    def delete_expired(self, min_phy_offset: int) -> int:
        """Delete whole files whose units all point below the commitlog's `min_phy_offset`
        and move `min_logic_offset` to the first unit at or above it; returns files deleted."""
        files = self._files.files
        doomed = 0
        for mapped in files[:-1]:
            count = mapped.wrote_position // CQ_UNIT_SIZE
            phy, size, _ = CQ_UNIT_STRUCT.unpack_from(mapped.buf, (count - 1) * CQ_UNIT_SIZE)
            if phy + size > min_phy_offset:
                break
            doomed += 1
        self._files.delete_first(doomed)
        low, high = self.min_offset_in_files, self.max_offset
        while low < high:
            middle = (low + high) // 2
            phy, size, _ = self.unit_at(middle)
            if size != FILLER_SIZE and phy >= min_phy_offset:
                high = middle
            else:
                low = middle + 1
        self.min_logic_offset = low
        return doomed

    def flush(self) -> None:
        """msync every file with unflushed units; blocking (worker thread).

        Only the last files can have any (units are written to the last file only, and a file
        is flushed before any earlier one can become clean): walking back from the end and
        stopping at the first clean file keeps this independent of the queue's length (the
        flushing thread holds the GIL, which the event loop needs, while it walks)."""
        dirty = []
        for mapped in reversed(self._files.files):
            if mapped.flushed_position >= mapped.wrote_position:
                break
            dirty.append(mapped)
        for mapped in reversed(dirty):
            mapped.flush()

    def destroy(self) -> None:
        self._drop_spares()
        self._files.destroy_all()
        self._sync_cursor()
        self.max_phy_offset = 0
        self.min_logic_offset = 0

    def close(self) -> None:
        # A spare is empty: removing it keeps the directory exactly what a Java broker expects.
        self._drop_spares()
        self._files.close()
