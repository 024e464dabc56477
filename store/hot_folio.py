"""A 2 MiB block of memory the host has already backed, freed just before the page cache takes
it for its next 2 MiB folio.

Why: on a VM with free page reporting (virtio-balloon; this project's Firecracker VMs) the guest
hands its free 2 MiB blocks back to the host, and the first store to each 4 KiB page of such a
block costs a host fault. `MappedFile.zero_fill` writes zeros 2 MiB at a time so that the page
cache makes 2 MiB folios (mapped with one PMD), and the kernel fills such a folio in one copy it
does not preempt (PREEMPT_NONE): 4.7 ms per folio on that memory here, during which an event loop
woken on the same CPU waits. The same host faults taken while the kernel zeroes an anonymous
transparent huge page fall between its per-subpage reschedule points, under the mapping's own
lock rather than the process's mmap lock (a plain store faults it in); freeing that huge page at
once puts the block on this CPU's free list, and the very next 2 MiB allocation, the folio,
takes it: the copy then takes 0.3 ms (2026-11-28, 64 of 64 times).

Measured at 45,000 msg/s (the latency benchmark, `perf` over pyrmq's run): the event loop's
waits of 4 ms or more for a CPU fell from 96-199 per run (5 runs) to 26-33 (3 runs), and the
store's worker threads, first among what the loop waited behind, dropped out of that list.

Invariants:
- Best effort and harmless: without anonymous transparent huge pages of exactly FOLIO_BYTES
  (disabled, or another PMD size) `heat_next_folio` does nothing; when it runs, the block is
  free again before it returns (the process keeps no memory for it).
- Each thread has a slot of its own (the store's workers may zero-fill two files at once), made
  on first use and unmapped with the thread's state.
"""

from __future__ import annotations

import mmap
import threading
from pathlib import Path
from typing import Final

from store.libc import address_of
from store.libc import libc as _libc  # the memset below waits, without the GIL, for a zeroing

FOLIO_BYTES: Final = 2 * 1024 * 1024
_THP_DIR: Final = Path("/sys/kernel/mm/transparent_hugepage")
_MADV_DONTNEED: Final = 4



def anonymous_huge_pages(thp_dir: Path = _THP_DIR) -> bool:
    """Whether an anonymous mapping under MADV_HUGEPAGE gets FOLIO_BYTES huge pages here."""
    try:
        enabled = (thp_dir / "enabled").read_text()
        pmd_bytes = int((thp_dir / "hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return False
    return "[never]" not in enabled and pmd_bytes == FOLIO_BYTES


class _Slot(threading.local):
    """This thread's 2 MiB-aligned window into an anonymous mapping (None: not made yet)."""

    def __init__(self) -> None:
        self.mapping: mmap.mmap | None = None
        self.address = 0


_AVAILABLE: Final = anonymous_huge_pages()
_slot = _Slot()


def _slot_address() -> int:
    if _slot.mapping is None:
        # Twice the size, so that an aligned block fits whatever address the kernel picks.
        mapping = mmap.mmap(-1, 2 * FOLIO_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        start = address_of(mapping)
        aligned = -(-start // FOLIO_BYTES) * FOLIO_BYTES
        mapping.madvise(mmap.MADV_HUGEPAGE, aligned - start, FOLIO_BYTES)
        _slot.mapping, _slot.address = mapping, aligned
    return _slot.address


def slot_address() -> int:
    """This thread's 2 MiB-aligned slot, for a caller that heats it itself
    (`store._native.prefault`, which does what `heat_next_folio` does); 0 when there is nothing
    to do here (see the invariants)."""
    if not _AVAILABLE:
        return 0
    try:
        return _slot_address()
    except OSError:
        return 0


def heat_next_folio() -> bool:
    """Fault in one anonymous huge page and free it, for the 2 MiB page-cache folio this thread
    makes next (call it right before a FOLIO_BYTES write that makes one). Blocking, without the
    GIL: a worker thread's call. False when there is nothing to do here (see the invariants)."""
    address = slot_address()
    if not address:
        return False
    _libc.memset(address, 0, 1)  # one store: the whole huge page is allocated and zeroed
    _libc.madvise(address, FOLIO_BYTES, _MADV_DONTNEED)
    return True
