"""`freeze_startup_heap`: the start-up heap leaves the collector's scans; garbage made after it
is still collected. Run in a child process: freezing changes the whole process."""

from __future__ import annotations

import os
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


# One pile of requests as the broker gets them: 256 KiB reads, 32 KiB bodies sliced from them,
# a task per body; all freed, again and again. Prints the page faults of the first pile and of
# the five after it.
PILES = textwrap.dedent("""
    import asyncio, resource, sys
    from broker.heap import keep_freed_memory

    if sys.argv[1] == "keep":
        assert keep_freed_memory()

    async def handle(body):
        await asyncio.sleep(0)
        return [bytes(body[at:at + 1024]) for at in range(0, len(body), 1024)]

    async def piles():
        faults = []
        for _ in range(6):
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            reads = [bytes(256 * 1024) for _ in range(12)]
            bodies = [read[at:at + 32768] for read in reads for at in range(0, len(read), 32768)]
            done = await asyncio.gather(*(handle(body) for body in bodies))
            del reads, bodies, done
            await asyncio.sleep(0.005)
            faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
        print(faults[0], sum(faults[1:]))

    asyncio.run(piles())
""")


def pile_faults(mode: str) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-c", PILES, mode], capture_output=True, text=True,
                          timeout=60, check=False,
                          env={key: value for key, value in os.environ.items()
                               if not key.startswith("MALLOC_")})
    assert done.returncode == 0, done.stderr
    first, then = done.stdout.split()
    return int(first), int(then)


def test_kept_memory_serves_the_next_pile_without_page_faults() -> None:
    # Each pile is 3 MiB of bodies (768 pages): with malloc's defaults the heap is trimmed after
    # each and the next one faults its pages in again; kept, the first pile finds them touched
    # at start and the others reuse them.
    (_, trimmed), (kept_first, kept) = pile_faults("default"), pile_faults("keep")
    assert trimmed > 1000, f"the default heap refaulted only {trimmed} pages in 5 piles"
    assert kept < trimmed / 10, (kept, trimmed)
    assert kept_first < 768 / 4, kept_first


def test_an_operators_malloc_settings_are_left_alone() -> None:
    child = ("import sys; from broker.heap import keep_freed_memory; "
             "sys.exit(0 if keep_freed_memory() is False else 1)")
    done = subprocess.run([sys.executable, "-c", child], timeout=60, check=False,
                          env={**os.environ, "MALLOC_TRIM_THRESHOLD_": "131072"})
    assert done.returncode == 0
