"""One fixed-size store file (commitlog segment or consume-queue file) mapped into memory.

A `MappedFile` owns one `mmap` and is the only source of views on it. Writers store through
`buf` (the mmap itself: `pack_into`, slice assignment); readers copy out with `read()` or take a
numpy view with `numpy_view()`, which must be dropped before `close()`.

Invariants:
- The whole file is allocated with `posix_fallocate` before it is mapped: a later store into the
  mapping never needs a new block, so a full disk is a typed `DiskFullError` at creation, never a
  SIGBUS in the middle of an append (docs/reliability.md M14).
- `flushed_position <= wrote_position <= file_size`.
- `truncate_to(pos)` leaves zeros in [pos, file_size) on disk before it returns (M7): a later
  recovery scan can never read a stale record after the cut.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from store import testhooks
from store.errors import CorruptFileError, DiskFullError, StoreIOError
from store.hot_folio import FOLIO_BYTES, heat_next_folio, slot_address
from store.libc import address_of as _address_of
from store.libc import libc as _libc
from store.native import native as _native

log = logging.getLogger(__name__)

PAGE_SIZE: Final = mmap.PAGESIZE
FILE_NAME_DIGITS: Final = 20
# `zeroing_from` while no zero-fill runs: past the end of any file.
NO_ZERO_FILL: Final = 1 << 62
# The most one `zero_fill` write hands the kernel, and so the size of the page-cache folios it
# makes. A 2 MiB folio is mapped with one PMD (one TLB entry: `FilePmdMapped` in smaps; 1 MiB
# and 256 KiB folios are not), and appends and reads go faster: Java client batches of 32 at
# 224,000-234,000 msg/s against 178,000-201,000 with 1 MiB or 256 KiB writes (2026-11-28). The
# price: a folio is filled in one uninterrupted copy on a PREEMPT_NONE kernel, 7-8 ms for 2 MiB
# on this VM's cold memory, and a loop woken on that CPU waits behind it. With 256 KiB writes
# the loop's waits of 4 ms or more at 45,000 msg/s fell from 86-238 per run to 10-13, but the
# clean-clone run with them still had 3 stalls over 10 ms (docs/benchmark-history.md).
# Most of those 7-8 ms are host faults on memory the VM had handed back: `hot_folio` takes them
# first, where the kernel can preempt them, and the copy then takes 0.3 ms.
ZERO_FILL_CALL_BYTES: Final = FOLIO_BYTES
# Zeros `zero_fill` writes from (read-only, shared by every file).
_ZEROS: Final = memoryview(bytes(ZERO_FILL_CALL_BYTES))

_FALLOC_FL_KEEP_SIZE: Final = 0x01
_FALLOC_FL_PUNCH_HOLE: Final = 0x02
_FALLOC_FL_ZERO_RANGE: Final = 0x10

# Fault pages in writable ahead of the writer (Linux 5.14+). Called through ctypes because
# ctypes releases the GIL for the call; mmap.madvise holds it for the whole (slow) call.
_MADV_POPULATE_WRITE: Final = 23
_MADV_NORMAL: Final = 0
_MADV_RANDOM: Final = 1
_MS_SYNC: Final = 4
_SYNC_FILE_RANGE_WRITE: Final = 2
# The most one write (`write_at`) or one writeback start (`flush`) hands the kernel. This VM's
# kernel is PREEMPT_NONE: a thread inside a call keeps its CPU until the call is done, and a
# woken event loop waits for it. With a replicated backlog a slave's 4 MiB pwritev held a CPU
# 3.9-5.8 ms, its flush's msync (ext4 walking the range's pages, mapping their blocks) 6.5 ms,
# and the slave's loop waited that long (perf, 2026-11-28). Between two calls the thread is
# back in user space, where the loop can take the CPU.
KERNEL_CALL_BYTES: Final = 1024 * 1024
# Buffers per pwritev call (Linux's IOV_MAX).
_IOV_MAX: Final = 1024


def _call_batch(pending: list[memoryview]) -> list[memoryview]:
    """The first parts of `pending` one pwritev takes: at least one, at most _IOV_MAX, and no
    more than KERNEL_CALL_BYTES together unless the first alone is larger."""
    size = 0
    for count, view in enumerate(pending[:_IOV_MAX]):
        size += len(view)
        if size > KERNEL_CALL_BYTES and count:
            return pending[:count]
    return pending[:_IOV_MAX]


def offset_to_file_name(offset: int) -> str:
    """RocketMQ's segment name: the start offset in decimal, zero-padded to 20 digits."""
    return f"{offset:020d}"


def file_name_to_offset(path: Path) -> int:
    """Parse a segment name; a name that is not exactly 20 digits is a `CorruptFileError`."""
    name = path.name
    if len(name) != FILE_NAME_DIGITS or not name.isdigit():
        raise CorruptFileError(f"store file {path}: name is not a 20-digit offset")
    return int(name)


def _io_error(path: Path, what: str, err: OSError) -> Exception:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(f"{what} {path}: no space left on device")
    return StoreIOError(f"{what} {path}: {err.strerror or err}")


def make_dirs_durable(directory: Path) -> None:
    """mkdir -p, fsyncing the parent of every directory it creates (a new directory's entry is
    not durable until its parent is synced). Blocking."""
    missing: list[Path] = []
    path = directory
    while not path.exists():
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            continue
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _zero_range(fd: int, offset: int, length: int) -> None:
    """Make [offset, offset+length) read as zeros and stay allocated, whole pages only."""
    if length <= 0:
        return
    if _libc.fallocate(fd, _FALLOC_FL_ZERO_RANGE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return
    # tmpfs and some file systems lack ZERO_RANGE: punch a hole, then allocate it again so the
    # region keeps its blocks (a store into a hole on a full disk would SIGBUS).
    if _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        os.posix_fallocate(fd, offset, length)
        return
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


class MappedFile:
    """A mapped segment: `file_from_offset` is its start in the global offset space."""

    __slots__ = (
        "_address",
        "_fd",
        "_zero_fill_lock",
        "buf",
        "file_from_offset",
        "file_size",
        "flushed_position",
        "path",
        "populated_to",
        "read_ahead",
        "writing_to",
        "wrote_position",
        "zeroing_from",
    )

    def __init__(self, path: Path, fd: int, buf: mmap.mmap, file_size: int) -> None:
        self.path = path
        self.file_from_offset = file_name_to_offset(path)
        self.file_size = file_size
        self._fd = fd
        self.buf = buf
        self._address = _address_of(buf)
        self.wrote_position = 0
        self.flushed_position = 0
        self.populated_to = 0
        self.read_ahead = True
        # The writer / zero-filler exclusion (`claim`, `zero_fill`): the end of the last write
        # announced, and the start of the zero-fill running (NO_ZERO_FILL: none).
        self.writing_to = 0
        self.zeroing_from = NO_ZERO_FILL
        self._zero_fill_lock = threading.Lock()

    @classmethod
    def create(cls, path: Path, file_size: int) -> MappedFile:
        """Create, allocate in full and map a new file; no half-made file is left on failure."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise _io_error(path, "create store file", err) from err
        try:
            os.posix_fallocate(fd, 0, file_size)
            # The size and the allocation, then the directory entry, must be durable before the
            # file's content can matter: a segment of the wrong size after a power loss would
            # refuse the next start.
            os.fsync(fd)
            buf = mmap.mmap(fd, file_size, flags=mmap.MAP_SHARED)
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as err:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise _io_error(path, "allocate store file", err) from err
        if testhooks.JOURNAL_ON:
            testhooks.journal_new_file(path)
        return cls(path, fd, buf, file_size)

    @classmethod
    def open_existing(cls, path: Path, file_size: int) -> MappedFile:
        """Map an existing file of exactly `file_size` bytes; positions start at the file end."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as err:
            raise _io_error(path, "open store file", err) from err
        actual = os.fstat(fd).st_size
        if actual != file_size:
            os.close(fd)
            raise CorruptFileError(
                f"store file {path}: size {actual} != configured size {file_size}"
            )
        try:
            buf = mmap.mmap(fd, file_size, flags=mmap.MAP_SHARED)
        except OSError as err:
            os.close(fd)
            raise _io_error(path, "map store file", err) from err
        mapped = cls(path, fd, buf, file_size)
        mapped.wrote_position = mapped.flushed_position = file_size
        return mapped

    @property
    def file_end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def max_offset(self) -> int:
        """Global offset just after the last written byte."""
        return self.file_from_offset + self.wrote_position

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def read(self, pos: int, size: int) -> bytes:
        """Copy `size` bytes at file position `pos`; the caller checks the range."""
        return self.buf[pos : pos + size]

    def write_at(self, pos: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Write `parts`, one after another, at file position `pos` with pwritev (the caller
        checks the range and moves `wrote_position`). The page cache behind the mapping is the
        same, so reads through `buf` see the bytes at once and `flush` (msync) makes them
        durable. Unlike a copy into the mapping, a whole page written this way is not
        zero-filled first (a fault on a cold page of an allocated file zero-fills it, which
        costs more than the copy itself on a VM) and needs no pre-faulting; the call releases
        the GIL. A call takes at most KERNEL_CALL_BYTES (or one larger part). Raises
        `StoreIOError`."""
        pending = [memoryview(part) for part in parts]
        try:
            while pending:
                batch = _call_batch(pending)
                try:
                    written = os.pwritev(self._fd, batch, pos)
                except InterruptedError:
                    continue
                except OSError as err:
                    raise _io_error(self.path, "write", err) from err
                if not written:
                    raise _io_error(self.path, "write", OSError(0, "pwritev wrote nothing"))
                pos += written
                # Drop what was written (a short write leaves the rest of one part).
                done = 0
                while done < len(batch) and written >= len(batch[done]):
                    written -= len(batch[done])
                    done += 1
                if done < len(batch) and written:
                    batch[done] = batch[done][written:]
                pending[: len(batch)] = batch[done:]
        finally:
            for view in pending:
                view.release()

    def set_read_ahead(self, enabled: bool) -> None:
        """Turn the kernel's read-ahead for faults on this mapping off (MADV_RANDOM) or back on.
        Off while a slave writes the file with `write_at`: a read fault near the write position
        (the dispatch following the writer) would otherwise read ahead up to the device's
        read_ahead_kb (8 MiB on some VMs) past it, zero-filling pages the next writes overwrite
        at once; the written pages are in the page cache, so reading them needs no read-ahead.
        Best effort, as `populate`."""
        if enabled == self.read_ahead or self.buf.closed:
            return
        if _libc.madvise(self._address, self.file_size,
                         _MADV_NORMAL if enabled else _MADV_RANDOM) == 0:
            self.read_ahead = enabled

    def numpy_view(self, dtype: npt.DTypeLike) -> npt.NDArray[np.void]:
        """A numpy array over the whole mapping; drop it before `close()`."""
        return np.frombuffer(self.buf, dtype=dtype)

    def populate(self, up_to: int, *, zero_fill: bool = False) -> None:
        """Pre-fault [populated_to, up_to) so appends there write to warm pages (a cold mmap
        store costs a page fault per 4 KiB: 0.45 GB/s here, against 9 GB/s warm). With
        `zero_fill` the pages not yet written first get zeros written (`zero_fill`). Blocking,
        without the GIL: call it from a worker thread. Best effort: errors are ignored.

        The zeros and the populate call go in one `store._native.prefault` call, which takes
        the GIL back once: each return from a system call asks for it, and while the loop holds
        it CPython makes the loop hand it over and wait until this thread has it, however long
        this thread then waits for a CPU (four such hand-overs per 2 MiB chunk otherwise)."""
        start = max(self.populated_to, self.wrote_position)
        start -= start % PAGE_SIZE
        end = min(self.file_size, -(-up_to // PAGE_SIZE) * PAGE_SIZE)
        if end <= start or self.buf.closed:
            return
        populated = self._zero_fill_then(start, end, start) if zero_fill else \
            self._prefault(end, end, start)
        if populated is None:
            return  # closed meanwhile
        # Unsupported kernel (before 5.14): do not retry.
        self.populated_to = end if populated else self.file_size

    def claim(self, end: int) -> None:
        """A writer is about to write bytes below `end`: announce it, and if a zero-fill
        (`zero_fill`, another thread) runs at or below `end`, wait until it is done. Every
        write to a file that may be zero-filled claims first. The wait happens only when the
        writer has caught up with the pre-faulting (which then lags behind it anyway)."""
        self.writing_to = end
        if end > self.zeroing_from:
            with self._zero_fill_lock:
                pass

    def zero_fill(self, start: int, end: int) -> None:
        """Write zeros over [start, end), from the first page past every write made or claimed.
        Through write(), the page cache takes those pages as folios of the write's size
        (ZERO_FILL_CALL_BYTES, aligned to it) and nothing else; a first touch of a hole through
        the mapping instead reads around it, up to the device's read_ahead_kb (8 MiB here), all
        zero-filled in one kernel call the scheduler cannot preempt (19 ms on cold memory,
        2026-11-27). Blocking, without the GIL; best effort."""
        self._zero_fill_then(start, end, None)

    def _zero_fill_then(self, start: int, end: int, populate_from: int | None) -> bool | None:
        """`_prefault` under the zero-fill lock, its zeros from where `_start_zero_fill` says;
        None when the file is closed."""
        with self._zero_fill_lock:
            if self.buf.closed:
                return None
            zero_from = self._start_zero_fill(start, end)
            try:
                return self._prefault(zero_from, end, populate_from)
            finally:
                self.zeroing_from = NO_ZERO_FILL

    def _start_zero_fill(self, start: int, end: int) -> int:
        """Where the zeros of [start, end) start (`end`: none are wanted), published as
        `zeroing_from`; the caller holds the zero-fill lock and resets `zeroing_from` after.

        Exclusion with the writers, who write without a lock (`claim`): this publishes
        `zeroing_from` and then reads `writing_to`, a writer publishes `writing_to` and then
        reads `zeroing_from` (both under the GIL, so in one order for both threads): a writer
        that saw no zero-fill is seen here, and backs this one off; one that saw it waits."""
        start = max(start, self.wrote_position, self.writing_to)
        start += -start % PAGE_SIZE
        if start >= end:
            return end
        self.zeroing_from = start
        if max(self.wrote_position, self.writing_to) > start:
            return end  # a writer got there meanwhile
        return start

    def _prefault(self, zero_from: int, end: int, populate_from: int | None) -> bool:
        """Zeros pwritten over [zero_from, end) (none if zero_from >= end) in folio-aligned
        calls of at most ZERO_FILL_CALL_BYTES, a hot block first (`hot_folio`) for each call
        that makes a whole folio; then, unless `populate_from` is None, [populate_from, end)
        faulted in writable: whether that worked. One native call where built (the GIL taken
        back once); the Python twin stays the reference."""
        if _native is not None:
            heat = slot_address() if zero_from < end else 0
            if populate_from is None:
                return _native.prefault(self._fd, end, end, zero_from, 0, heat)[2]
            return _native.prefault(self._fd, populate_from, end, zero_from, self._address,
                                    heat)[2]
        pos = zero_from
        try:
            while pos < end:
                size = min(end - pos, ZERO_FILL_CALL_BYTES - pos % ZERO_FILL_CALL_BYTES)
                if size == FOLIO_BYTES:
                    heat_next_folio()  # a write that makes one 2 MiB folio
                pos += os.pwrite(self._fd, _ZEROS[:size], pos)
        except OSError:
            pass  # what was not zero-filled gets populated (and read around) as before
        return populate_from is not None and _libc.madvise(
            self._address + populate_from, end - populate_from, _MADV_POPULATE_WRITE) == 0

    def flush(self, up_to_position: int | None = None) -> int:
        """msync [flushed_position, up_to_position) rounded out to pages; returns the new
        flushed position. Blocking: call it from a worker thread, never on the event loop."""
        end = self.wrote_position if up_to_position is None else up_to_position
        if end <= self.flushed_position:
            return self.flushed_position
        start = self.flushed_position - self.flushed_position % PAGE_SIZE
        self._msync(start, end - start)
        self.flushed_position = end
        if testhooks.JOURNAL_ON:
            testhooks.journal_synced(self.path, end)
        return end

    def _msync(self, start: int, length: int) -> None:
        """msync [start, start+length) of the mapping (start page-aligned), the GIL released
        (mmap.flush holds it for the whole msync, which would stall the event loop for as long
        as the disk takes). A range over KERNEL_CALL_BYTES has its writeback started a chunk per
        call first (`sync_file_range`, which starts the writes and does not wait for them): the
        msync then waits for them and makes the range durable. In one native call where built
        (`store._native.sync_range`: the GIL taken back once, not after every chunk's call)."""
        if self.buf.closed:
            raise StoreIOError(f"msync {self.path}: the file is closed")
        if _native is not None:
            code = _native.sync_range(self._fd, self._address, start, length, KERNEL_CALL_BYTES)
            if code:
                raise _io_error(self.path, "msync", OSError(code, os.strerror(code)))
            return
        if length > KERNEL_CALL_BYTES:
            for pos in range(start, start + length, KERNEL_CALL_BYTES):
                # Best effort: an error here shows again in the msync, which reports it.
                _libc.sync_file_range(self._fd, pos, min(KERNEL_CALL_BYTES, start + length - pos),
                                      _SYNC_FILE_RANGE_WRITE)
        if _libc.msync(self._address + start, length, _MS_SYNC) != 0:
            code = ctypes.get_errno()
            raise _io_error(self.path, "msync", OSError(code, os.strerror(code)))

    def truncate_to(self, pos: int) -> None:
        """Zero [pos, file_size) on disk and set both positions to `pos` (M7).

        The partial page is zeroed through the mapping and msynced; whole pages after it are
        zeroed by the file system (ZERO_RANGE, or punch-hole plus re-allocation); then fsync.
        Blocking: call it from a worker thread.
        """
        if not 0 <= pos <= self.file_size:
            raise ValueError(f"truncate {self.path} to {pos}: outside [0, {self.file_size}]")
        page_end = min(self.file_size, -(-pos // PAGE_SIZE) * PAGE_SIZE)
        try:
            if page_end > pos:
                self.buf[pos:page_end] = bytes(page_end - pos)
                page_start = pos - pos % PAGE_SIZE
                self._msync(page_start, page_end - page_start)
            if testhooks.FAULTS_ON:
                testhooks.fault_point("ha.truncate.before_zero")
            _zero_range(self._fd, page_end, self.file_size - page_end)
            os.fsync(self._fd)
        except OSError as err:
            raise _io_error(self.path, "truncate", err) from err
        self.wrote_position = self.flushed_position = self.writing_to = pos
        if testhooks.JOURNAL_ON:
            testhooks.journal_truncated(self.path, pos)

    def close(self) -> None:
        """Unmap and close; raises BufferError if a numpy or memoryview export is still alive."""
        with self._zero_fill_lock:  # a zero-fill in flight writes to the descriptor
            if not self.buf.closed:
                self.buf.close()
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def destroy(self) -> None:
        """Close and delete the file (retention, truncation of whole files). A view of the
        mapping still held elsewhere (an HA master's transport that has not yet sent the bytes
        of this file it was given) does not stop it: the mapping then stays until that last
        view goes (the mmap object unmaps itself), its bytes valid for that reader, while the
        file is deleted now."""
        try:
            self.close()
        except BufferError:
            log.debug("deleting %s while a view of it is still held: unmapped when it goes",
                      self.path)
            with self._zero_fill_lock:
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path.name}, wrote={self.wrote_position}, "
            f"flushed={self.flushed_position}, size={self.file_size})"
        )
