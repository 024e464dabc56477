"""`freeze_startup_heap`: the start-up heap leaves the collector's scans; garbage made after it
is still collected. Run in a child process: freezing changes the whole process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import gc, weakref
    from broker.heap import GC_THRESHOLDS, freeze_startup_heap

    class Node:
        pass

    frozen = freeze_startup_heap()
    assert frozen > 1000, frozen
    assert gc.get_threshold() == GC_THRESHOLDS
    # A full collection now scans only what was allocated since the freeze.
    assert len(gc.get_objects(generation=2)) < frozen / 10
    cycle = Node()
    cycle.self = cycle
    alive = weakref.ref(cycle)
    del cycle
    gc.collect()
    assert alive() is None, "a cycle made after the freeze was not collected"
    print("ok", frozen)
""")


def test_freeze_moves_the_startup_heap_out_of_collections_and_still_collects() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")
