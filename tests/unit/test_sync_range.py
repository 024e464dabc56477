"""`MappedFile.flush`'s kernel work (`MappedFile._msync`) in the native call
(`store._native.sync_range`) and in its Python twin alike: the range is written back (no page of
it left dirty, as the kernel's `cachestat` counts them), past one chunk too, and an msync error
is a `StoreIOError` naming the file."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import pytest

from store import _native
from store.errors import StoreIOError
from store.libc import address_of
from store.mapped_file import KERNEL_CALL_BYTES, PAGE_SIZE, MappedFile

_SYS_CACHESTAT = 451  # x86_64 and the generic table alike (Linux 6.5+)


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [("nr_cache", ctypes.c_uint64), ("nr_dirty", ctypes.c_uint64),
                ("nr_writeback", ctypes.c_uint64), ("nr_evicted", ctypes.c_uint64),
                ("nr_recently_evicted", ctypes.c_uint64)]


def dirty_pages(fd: int, length: int) -> int:
    """Dirty page-cache pages of [0, length) of the file, as the kernel counts them."""
    libc = ctypes.CDLL(None, use_errno=True)
    span, stat = _CachestatRange(0, length), _Cachestat()
    if libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(span), ctypes.byref(stat), 0) != 0:
        raise OSError(ctypes.get_errno(), "cachestat (Linux 6.5+)")
    return int(stat.nr_dirty)


@pytest.mark.parametrize("size", [3 * PAGE_SIZE + 5, 3 * KERNEL_CALL_BYTES + PAGE_SIZE])
def test_a_flush_leaves_no_page_of_its_range_dirty(tmp_path: Path, mapped_file_calls: str,
                                                   size: int) -> None:
    mapped = MappedFile.create(tmp_path / f"{0:020d}", 4 * KERNEL_CALL_BYTES)
    try:
        mapped.buf[:size] = os.urandom(size)
        mapped.wrote_position = size
        assert dirty_pages(mapped._fd, mapped.file_size) == -(-size // PAGE_SIZE)
        assert mapped.flush() == size
        assert dirty_pages(mapped._fd, mapped.file_size) == 0
        with open(mapped.path, "rb") as again:
            assert again.read(size) == mapped.buf[:size]
    finally:
        mapped.close()


def test_an_msync_error_is_a_store_error_naming_the_file(tmp_path: Path,
                                                        mapped_file_calls: str) -> None:
    """An msync over memory that is not mapped (ENOMEM) fails the flush, and nothing else."""
    mapped = MappedFile.create(tmp_path / f"{0:020d}", 2 * KERNEL_CALL_BYTES)
    gone = mmap.mmap(-1, 2 * KERNEL_CALL_BYTES)
    real_address = mapped._address
    try:
        mapped._address = address_of(gone)
        gone.close()  # the address range is unmapped now
        with pytest.raises(StoreIOError, match=f"msync {mapped.path}: Cannot allocate memory"):
            mapped._msync(0, 2 * KERNEL_CALL_BYTES)
    finally:
        mapped._address = real_address
        mapped.close()


def test_the_native_call_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="bad arguments"):
        _native.sync_range(-1, 4096, 0, 10, KERNEL_CALL_BYTES)
    with pytest.raises(ValueError, match="bad arguments"):
        _native.sync_range(0, 4096, 0, 10, 0)
