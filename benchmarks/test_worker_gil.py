"""A store worker's kernel calls beside a busy event loop: the store's native calls against their
Python twins.

A worker thread releases the GIL in each system call and asks for it back after it; while
another thread holds it, CPython 3.11 grants it only after that thread has run its switch
interval (5 ms) and then makes the holder wait until the worker has taken it. So each call made
from Python costs the loop a hand-over while it is busy. Two of the store's worker jobs make
their calls in a row in one native call, the GIL taken back once:
- pre-faulting ahead of the commitlog's writer (`CommitLog.warm_ahead`): per 2 MiB chunk, a hot
  huge page (`store/hot_folio.py`), the zero `pwrite` and `MADV_POPULATE_WRITE`
  (`store._native.prefault`; four calls from Python);
- a flush (`MappedFile.flush`): the writeback started 1 MiB per `sync_file_range`, then the
  `msync` (`store._native.sync_range`; one call per MiB from Python).

Each round runs the job on a fresh FILE_BYTES file in a worker thread while the main thread runs
Python without pause (the event loop under load, which holds the GIL whenever it runs). Native
and twin rounds alternate. Printed per kind, medians over the rounds: the job's wall time, the
worker's voluntary context switches per MiB (each wait for the GIL is one; so is any other
sleep in the kernel, such as a wait for the disk), and the busy thread's time off its CPU (its
wall time less its CPU time: the GIL handed over, or the CPU taken); the ratio is twin time
over native time (above 1: native faster). No time is asserted.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
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
MIB: Final = 1024 * 1024


def voluntary_switches() -> int:
    """The calling thread's voluntary context switches so far (/proc/thread-self/status)."""
    for line in Path("/proc/thread-self/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc/thread-self/status")


@dataclass(frozen=True)
class Round:
    seconds: float
    switches_per_mib: float
    busy_off_cpu_s: float


def beside_a_busy_loop(job: Callable[[], object]) -> Round:
    """Run `job` in a worker while this thread keeps the GIL busy."""
    done = threading.Event()
    figures: list[float] = []

    def worker() -> None:
        switches = voluntary_switches()
        started = time.perf_counter()
        job()
        figures.extend((time.perf_counter() - started, voluntary_switches() - switches))
        done.set()

    thread = threading.Thread(target=worker, name="store-job")
    began, began_cpu = time.perf_counter(), time.thread_time()
    thread.start()
    while not done.is_set():
        for _ in range(100):  # a few microseconds of Python between two looks at the event
            pass
    off_cpu = (time.perf_counter() - began) - (time.thread_time() - began_cpu)
    thread.join()
    return Round(figures[0], figures[1] / (FILE_BYTES / MIB), off_cpu)


def prefault_round(mapped: MappedFile) -> Round:
    def job() -> None:
        for end in range(CHUNK_BYTES, FILE_BYTES + 1, CHUNK_BYTES):
            mapped.populate(end, zero_fill=True)

    result = beside_a_busy_loop(job)
    assert mapped.populated_to == FILE_BYTES
    assert mapped.buf[FILE_BYTES - 4096 :] == bytes(4096)
    return result


def flush_round(mapped: MappedFile) -> Round:
    mapped.populate(FILE_BYTES, zero_fill=True)
    os.fsync(mapped._fd)  # the zeros on disk: the round's flush writes only its own bytes
    block = os.urandom(MIB)
    for pos in range(0, FILE_BYTES, MIB):
        mapped.buf[pos : pos + MIB] = block
    mapped.wrote_position = FILE_BYTES
    result = beside_a_busy_loop(mapped.flush)
    assert mapped.flushed_position == FILE_BYTES
    return result


@pytest.mark.parametrize(("what", "run_round"), [
    pytest.param(f"pre-fault of {FILE_BYTES // MIB} MiB in 2 MiB chunks", prefault_round,
                 id="prefault"),
    pytest.param(f"flush of {FILE_BYTES // MIB} MiB written through the mapping", flush_round,
                 id="flush"),
])
def test_a_store_job_beside_a_busy_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       what: str, run_round: Callable[[MappedFile], Round]
                                       ) -> None:
    rounds: dict[str, list[Round]] = {"native": [], "twin": []}
    for index in range(ROUNDS):
        for kind in ("native", "twin"):
            directory = tmp_path / f"{index}-{kind}"
            directory.mkdir()
            with monkeypatch.context() as patch:
                patch.setattr(mapped_file, "_native", _native if kind == "native" else None)
                mapped = MappedFile.create(directory / f"{0:020d}", FILE_BYTES)
                try:
                    rounds[kind].append(run_round(mapped))
                finally:
                    mapped.close()
                    mapped.path.unlink()

    def summary(kind: str) -> str:
        got = rounds[kind]
        return (f"{statistics.median(r.seconds for r in got) * 1000:,.0f} ms, "
                f"{statistics.median(r.switches_per_mib for r in got):.2f} GIL waits or "
                f"sleeps per MiB, the busy thread off its CPU "
                f"{statistics.median(r.busy_off_cpu_s for r in got) * 1000:.1f} ms")

    ratio = statistics.median(twin.seconds / native.seconds
                              for native, twin in zip(rounds["native"], rounds["twin"],
                                                      strict=True))
    record(f"{what} beside a busy loop: native {summary('native')}; Python twin "
           f"{summary('twin')}; ratio {ratio:.2f} (twin / native time, median of {ROUNDS} "
           f"adjacent round pairs)")
