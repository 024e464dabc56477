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

Only the broker's process entry point (`broker/__main__.py`) calls it: it changes the whole
process (a test process running a broker in-line keeps Python's defaults).
"""

from __future__ import annotations

import gc
import logging
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
