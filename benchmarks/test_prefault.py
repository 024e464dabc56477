"""Pre-faulting beside a busy event loop: the store's native call against its Python twin.

What the store's worker does ahead of the commitlog's writer (`CommitLog.warm_ahead`): each
2 MiB chunk gets zeros written (a hot huge page first, `store/hot_folio.py`) and is then faulted
in writable (`MappedFile.populate(zero_fill=True)`). The worker releases the GIL in each system
call and asks for it back after it; while another thread holds it, CPython 3.11 grants it only
after that thread has run its switch interval (5 ms) and then makes the holder wait until the
worker has taken it. `store._native.prefault` makes a chunk's calls with the GIL released once;
the Python twin (the reference, `_native` absent) releases it four times a chunk.

Each round pre-faults a fresh FILE_BYTES file chunk by chunk in a worker thread while the main
thread runs Python without pause (the event loop under load, which holds the GIL whenever it
runs). Native and twin rounds alternate. Printed per kind, medians over the rounds: the
pre-fault's wall time, the worker's voluntary context switches per chunk (each wait for the
GIL is one; so is any other sleep in the kernel), and the busy thread's time off its CPU (its
wall time less its CPU time: the GIL handed over, or the CPU taken); the ratio is twin time
over native time (above 1: native faster). No time is asserted.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from benchmarks.conftest import record
from store import _native, mapped_file
from store.mapped_file import MappedFile

FILE_BYTES: Final = 128 * 1024 * 1024
CHUNK_BYTES: Final = 2 * 1024 * 1024  # as CommitLog.warm_ahead (WARM_CHUNK_BYTES)
ROUNDS: Final = 5


def voluntary_switches() -> int:
    """The calling thread's voluntary context switches so far (/proc/thread-self/status)."""
    for line in Path("/proc/thread-self/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc/thread-self/status")


@dataclass(frozen=True)
class Round:
    seconds: float
    switches_per_chunk: float
    busy_off_cpu_s: float


def prefault_round(directory: Path) -> Round:
    """Pre-fault a fresh file in a worker while this thread keeps the GIL busy."""
    directory.mkdir()
    path = directory / f"{0:020d}"
    mapped = MappedFile.create(path, FILE_BYTES)
    done = threading.Event()
    figures: list[float] = []

    def worker() -> None:
        switches = voluntary_switches()
        started = time.perf_counter()
        for end in range(CHUNK_BYTES, FILE_BYTES + 1, CHUNK_BYTES):
            mapped.populate(end, zero_fill=True)
        figures.extend((time.perf_counter() - started, voluntary_switches() - switches))
        done.set()

    thread = threading.Thread(target=worker, name="prefault")
    began = time.perf_counter()
    began_cpu = time.thread_time()
    thread.start()
    while not done.is_set():
        for _ in range(100):  # a few microseconds of Python between two looks at the event
            pass
    off_cpu = (time.perf_counter() - began) - (time.thread_time() - began_cpu)
    thread.join()
    try:
        assert mapped.populated_to == FILE_BYTES
        assert mapped.buf[FILE_BYTES - 4096 :] == bytes(4096)
    finally:
        mapped.close()
        path.unlink()
    return Round(figures[0], figures[1] / (FILE_BYTES // CHUNK_BYTES), off_cpu)


def test_prefault_beside_a_busy_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rounds: dict[str, list[Round]] = {"native": [], "twin": []}
    for index in range(ROUNDS):
        for kind in ("native", "twin"):
            with monkeypatch.context() as patch:
                patch.setattr(mapped_file, "_native", _native if kind == "native" else None)
                rounds[kind].append(prefault_round(tmp_path / f"{index}-{kind}"))

    def summary(kind: str) -> str:
        got = rounds[kind]
        return (f"{statistics.median(r.seconds for r in got) * 1000:,.0f} ms, "
                f"{statistics.median(r.switches_per_chunk for r in got):.1f} GIL waits or "
                f"sleeps per chunk, the busy thread off its CPU "
                f"{statistics.median(r.busy_off_cpu_s for r in got) * 1000:.1f} ms")

    ratio = statistics.median(twin.seconds / native.seconds
                              for native, twin in zip(rounds["native"], rounds["twin"],
                                                      strict=True))
    record(f"pre-fault of {FILE_BYTES >> 20} MiB in 2 MiB chunks beside a busy loop: native "
           f"{summary('native')}; Python twin {summary('twin')}; ratio {ratio:.2f} (twin / "
           f"native time, median of {ROUNDS} adjacent round pairs)")
