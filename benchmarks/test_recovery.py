"""Recovery time of a 1 GiB commitlog after a clean stop and after SIGKILL, hot and cold.

Each case is sampled several times (min/median/max printed): after a clean stop, and after a
SIGKILL of a process that appended a little more (a fresh kill per sample). A cold sample of each
first evicts the store's pages from the page cache (fsync, then posix_fadvise DONTNEED on every
file; `_resident_fraction` checks with mincore that they are gone), so recovery reads from disk.

The peer is a plain sequential read of the same commitlog bytes with a CRC over them (the least
any verifying recovery must do), measured in the same run, hot and cold.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from isal import isal_zlib

from benchmarks.conftest import median_seconds, record
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support.store_helpers import message

GIB = 1024 * 1024 * 1024
REPO = Path(__file__).resolve().parents[1]
SAMPLES = 3
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p


def _evict(root: Path) -> None:
    """Drop every store file's pages from the page cache (written back first)."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _resident_fraction(path: Path) -> float:
    """The fraction of `path`'s pages in the page cache (mincore over a read-only mapping)."""
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vector = (ctypes.c_ubyte * pages)()
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, ctypes.c_size_t(size), mmap.PROT_READ, mmap.MAP_SHARED, fd,
                             ctypes.c_long(0))
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            if _libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            _libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(size))
    finally:
        os.close(fd)
    return sum(byte & 1 for byte in vector) / pages


def _spread(times: list[float]) -> str:
    return (f"min {min(times):.2f} / median {statistics.median(times):.2f} / "
            f"max {max(times):.2f} s")


def _fill(root: Path) -> int:
    """Write about 1 GiB of 1 KiB messages into one segment; returns the record count."""
    store = MessageStore(StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=GIB))
    store.open()
    msg = message(os.urandom(1024), queue_id=0)
    count = 0
    store.append_message(msg)
    store.commitlog.files.files[-1].populate(GIB)
    limit = GIB - 2 * 1024 * 1024
    while store.max_phy_offset < limit:
        for queue_id in range(4):
            store.append_message(message(os.urandom(16) + msg.body[16:], queue_id=queue_id))
            count += 1
    store.close()
    return count


def _read_peer(root: Path, *, cold: bool) -> float:
    path = next((root / "commitlog").iterdir())

    def read_all() -> None:
        crc = 0
        with path.open("rb", buffering=0) as f:
            while chunk := f.read(8 * 1024 * 1024):
                crc = isal_zlib.crc32(chunk, crc)

    return median_seconds(read_all, rounds=3, setup=(lambda: _evict(root)) if cold else None)


def test_recovery_time_of_1gib_commitlog(tmp_path: Path) -> None:
    root = tmp_path / "store"
    count = _fill(root)
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=GIB)
    commitlog = next((root / "commitlog").iterdir())

    def reopen(*, abnormal: bool) -> float:
        started = time.perf_counter()
        store = MessageStore(config)
        store.open()
        seconds = time.perf_counter() - started
        assert store.recovery is not None
        assert store.recovery.abnormal is abnormal
        if abnormal:
            assert store.recovery.records_scanned >= count
        store.close()
        return seconds

    def kill_child() -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.recovery_child", str(root), str(GIB)],
            cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == -9, proc.stderr

    def evicted() -> None:
        _evict(root)
        resident = _resident_fraction(commitlog)
        assert resident < 0.05, f"{resident:.0%} of the commitlog still cached"

    def samples(before: Callable[[], None] | None, *, abnormal: bool, rounds: int
                ) -> list[float]:
        out = []
        for _ in range(rounds):
            if before is not None:
                before()
            out.append(reopen(abnormal=abnormal))
        return out

    clean = samples(None, abnormal=False, rounds=SAMPLES)
    clean_cold = samples(evicted, abnormal=False, rounds=1)
    killed = samples(kill_child, abnormal=True, rounds=SAMPLES)

    def kill_then_evict() -> None:
        kill_child()
        evicted()

    killed_cold = samples(kill_then_evict, abnormal=True, rounds=1)
    peer = _read_peer(root, cold=False)
    peer_cold = _read_peer(root, cold=True)
    record(f"recovery, 1 GiB commitlog ({count:,} records) after a clean stop, hot cache: "
           f"{_spread(clean)}; read+CRC of the file {peer:.2f} s; ratio "
           f"{statistics.median(clean) / peer:.1f}x")
    record(f"recovery, same log after SIGKILL, hot cache: {_spread(killed)}; ratio "
           f"{statistics.median(killed) / peer:.1f}x")
    record(f"recovery, cold cache (pages evicted): clean stop {clean_cold[0]:.2f} s, after "
           f"SIGKILL {killed_cold[0]:.2f} s; cold read+CRC of the file {peer_cold:.2f} s; "
           f"ratios {clean_cold[0] / peer_cold:.1f}x and {killed_cold[0] / peer_cold:.1f}x")
