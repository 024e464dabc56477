"""Recovery time of a 1 GiB commitlog after a clean stop and after SIGKILL.

The peer is a plain sequential read of the same commitlog bytes with a CRC over them (the least
any verifying recovery must do), measured in the same run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from isal import isal_zlib

from benchmarks.conftest import median_seconds, record
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support.store_helpers import message

GIB = 1024 * 1024 * 1024
REPO = Path(__file__).resolve().parents[1]


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


def _read_peer(root: Path) -> float:
    path = next((root / "commitlog").iterdir())

    def read_all() -> None:
        crc = 0
        with path.open("rb", buffering=0) as f:
            while chunk := f.read(8 * 1024 * 1024):
                crc = isal_zlib.crc32(chunk, crc)

    return median_seconds(read_all, rounds=3)


def test_recovery_time_of_1gib_commitlog(tmp_path: Path) -> None:
    root = tmp_path / "store"
    count = _fill(root)
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=GIB)

    def reopen() -> MessageStore:
        store = MessageStore(config)
        store.open()
        return store

    clean_times: list[float] = []
    for _ in range(3):
        started = time.perf_counter()
        store = reopen()
        clean_times.append(time.perf_counter() - started)
        assert store.recovery is not None
        assert not store.recovery.abnormal
        store.close()
    clean = sorted(clean_times)[1]

    proc = subprocess.run([sys.executable, "-m", "benchmarks.recovery_child", str(root), str(GIB)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == -9, proc.stderr
    started = time.perf_counter()
    store = reopen()
    killed = time.perf_counter() - started
    assert store.recovery is not None
    assert store.recovery.abnormal
    assert store.recovery.records_scanned >= count
    max_phy = store.max_phy_offset
    store.close()
    peer = _read_peer(root)
    record(f"recovery, 1 GiB commitlog ({count:,} records, {max_phy / 2**20:,.0f} MiB) after "
           f"a clean stop: {clean:.2f} s; read+CRC of the file {peer:.2f} s; ratio "
           f"{clean / peer:.1f}x")
    record(f"recovery, same log after SIGKILL: {killed:.2f} s; ratio {killed / peer:.1f}x")
