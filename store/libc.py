"""The C library calls the store makes through ctypes: one handle, each prototype declared once.

Why ctypes rather than `mmap.madvise` or `mmap.flush`: a ctypes call releases the GIL for its
whole length, and these calls (populating, syncing, zeroing a huge page) can take milliseconds
that the event loop must not spend waiting for the GIL.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
libc.fallocate.restype = ctypes.c_int
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.madvise.restype = ctypes.c_int
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
libc.memset.restype = ctypes.c_void_p
libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.msync.restype = ctypes.c_int
libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
libc.sync_file_range.restype = ctypes.c_int


def address_of(buf: mmap.mmap) -> int:
    """The mapping's start address (stable for its lifetime), for libc calls made without the
    GIL. The temporary buffer export is dropped at once, so close() keeps working."""
    holder = ctypes.c_char.from_buffer(buf)
    address = ctypes.addressof(holder)
    del holder
    return address
