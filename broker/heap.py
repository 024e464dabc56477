"""The Python heap under a running broker: keeping the garbage collector's pauses short.

A collection runs on whichever thread allocates when a threshold is crossed, holding the GIL
for its whole length: on the event loop it is a stall. Its cost grows with the objects it
scans. A full (generation 2) collection scans every tracked object; a started broker has about
40,000 (modules, classes, functions, tables), and one full collection of them took 20-60 ms of
loop time here (see `broker/loop_monitor.py`, which names such stalls `cause=gc`).

`freeze_startup_heap()`, called once start-up is done, collects once and then moves every
surviving object to the permanent generation (`gc.freeze()`): later collections scan only what
was allocated since, which under load is almost all short-lived request objects. It also raises
the young-generation threshold, so that young collections run a few times a second at high
request rates instead of hundreds of times, each still scanning a few thousand objects at most.
Objects that become garbage after the freeze are still collected as before.

`keep_freed_memory()` keeps the memory the process has touched. By default glibc's malloc
gives the free top of its heap back to the kernel as soon as it passes 128 KiB to 64 MiB
(its threshold follows the largest block freed), so each pile of requests (bodies of up to
256 KiB as the event loop reads them, one task per request) touches pages new to the process
again: a page fault per 4 KiB, and in a VM one the host serves too. A busy stall of 12 ms under
the 45,000 msg/s latency benchmark had 403 of them while 78 requests were being handled. With
the trim threshold at `HEAP_KEEP_BYTES` and blocks up to `HEAP_BLOCK_BYTES_MAX` taken from the
heap, a pile reuses the pages the last one touched, and `HEAP_PRETOUCH_BYTES` touched at start
serve the first piles too: the Python counterpart of the pre-touched Java heap RocketMQ's start
scripts ask for (`-XX:+AlwaysPreTouch`). The memory kept is bounded by the largest pile, which
the remoting server's in-flight byte budget bounds. Settings an operator gave glibc
(`MALLOC_TRIM_THRESHOLD_`, `MALLOC_MMAP_THRESHOLD_`) are left as they are, and on a C library
without `mallopt` this does nothing.

Only the broker's process entry point (`broker/__main__.py`) calls these: they change the whole
process (a test process running a broker in-line keeps Python's defaults).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
from typing import Final

log = logging.getLogger(__name__)

# (young, middle, old). Young: a collection per 10,000 net allocations (Python: 700); the
# others keep Python's ratios.
GC_THRESHOLDS: Final = (10_000, 10, 10)


def freeze_startup_heap() -> int:
    """Collect, freeze what survives, set `GC_THRESHOLDS`; returns the objects frozen."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    frozen = gc.get_freeze_count()
    log.info("start-up heap frozen objects=%d gc_thresholds=%s", frozen, GC_THRESHOLDS)
    return frozen


# The free top of the heap that malloc keeps instead of giving back to the kernel.
HEAP_KEEP_BYTES: Final = 256 * 1024 * 1024
# Blocks up to this size come from the heap (reused), larger ones from their own mapping
# (glibc's own upper bound for its moving threshold on 64-bit).
HEAP_BLOCK_BYTES_MAX: Final = 32 * 1024 * 1024
# Touched once at start and left free in the heap (four times the largest pile measured under
# the latency benchmark).
HEAP_PRETOUCH_BYTES: Final = 16 * 1024 * 1024
_M_TRIM_THRESHOLD: Final = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD: Final = -3
_OPERATOR_SETTINGS: Final = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def keep_freed_memory() -> bool:
    """Set malloc to keep freed memory (see the module docstring); False where it was not
    set: an operator's own glibc settings, or no glibc `mallopt`."""
    given = [name for name in _OPERATOR_SETTINGS if name in os.environ]
    if given:
        log.info("malloc settings left as given: %s", ", ".join(given))
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt, malloc, free = libc.mallopt, libc.malloc, libc.free
    except (OSError, AttributeError):
        log.info("no mallopt in this C library: the heap is trimmed as it decides")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if not (mallopt(_M_TRIM_THRESHOLD, HEAP_KEEP_BYTES)
            and mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCK_BYTES_MAX)):
        log.warning("mallopt refused the heap settings: the heap is trimmed as malloc decides")
        return False
    malloc.argtypes = (ctypes.c_size_t,)
    malloc.restype = ctypes.c_void_p
    free.argtypes = (ctypes.c_void_p,)
    free.restype = None
    block = malloc(HEAP_PRETOUCH_BYTES)
    if block:
        ctypes.memset(block, 0, HEAP_PRETOUCH_BYTES)
        free(block)  # back to the heap's free top, which is no longer trimmed
    log.info("malloc keeps freed memory keep_bytes=%d block_bytes_max=%d pretouched=%d",
             HEAP_KEEP_BYTES, HEAP_BLOCK_BYTES_MAX, HEAP_PRETOUCH_BYTES if block else 0)
    return True
