"""Append throughput of 1 KiB messages, single and batches of 32, against a raw mmap write.

The peer is a raw sequential write of the very same record bytes into a warm (pre-faulted)
file-backed mmap, in the same Python loop shape: one slice assignment per record for single
appends, one per batch for batches. The store's commitlog is pre-faulted the same way (its
warm-ahead does this in production), so both sides write to warm pages.
"""

from __future__ import annotations

import mmap
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from benchmarks.conftest import median_seconds, pedantic_median, record
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support.store_helpers import batch, message

MESSAGES = 100_000
BODY_BYTES = 1024
BATCH = 32
ROUNDS = 5


class WarmMmap:
    def __init__(self, path: Path, size: int) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.posix_fallocate(self.fd, 0, size)
        self.buf = mmap.mmap(self.fd, size)
        self.buf.madvise(23)  # MADV_POPULATE_WRITE: warm, like the store's commitlog

    def close(self) -> None:
        self.buf.close()
        os.close(self.fd)


class Fresh:
    """A fresh store per round, its first segment pre-faulted over the whole run."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.round = 0
        self.store: MessageStore | None = None

    def make(self) -> MessageStore:
        self.close()
        self.round += 1
        path = self.root / f"r{self.round}"
        store = MessageStore(StoreConfig(store_path_root_dir=path,
                                         mapped_file_size_commit_log=256 * 1024 * 1024))
        store.open()
        store.append_message(message(b"warm-up"))
        store.commitlog.files.files[-1].populate(256 * 1024 * 1024)
        for queue in store.consume_queues:
            for mapped in queue._files.files:
                mapped.populate(mapped.file_size)
        self.store = store
        return store

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            shutil.rmtree(self.store.config.store_path_root_dir)
            self.store = None


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Fresh]:
    holder = Fresh(tmp_path)
    yield holder
    holder.close()


def _figure(name: str, seconds: float, messages: int, nbytes: int, peer_seconds: float) -> None:
    rate = messages / seconds
    mb_s = nbytes / seconds / 1e6
    peer_mb_s = nbytes / peer_seconds / 1e6
    record(f"{name}: {rate:,.0f} msg/s, {mb_s:,.0f} MB/s; raw warm mmap write {peer_mb_s:,.0f} "
           f"MB/s; ratio {mb_s / peer_mb_s:.1%}")


def test_single_append_1kib(benchmark: BenchmarkFixture, fresh: Fresh, tmp_path: Path) -> None:
    msg = message(os.urandom(BODY_BYTES))

    def setup() -> tuple[tuple[object, ...], dict[str, object]]:
        return (fresh.make(),), {}

    def run(store: MessageStore) -> None:
        append = store.append_message
        for _ in range(MESSAGES):
            append(msg)

    seconds = pedantic_median(benchmark, run, setup=setup, rounds=ROUNDS)
    size = msg.total_size
    raw = WarmMmap(tmp_path / "raw", MESSAGES * size + 4096)
    payload = os.urandom(size)

    def raw_run() -> None:
        buf = raw.buf
        pos = 0
        for _ in range(MESSAGES):
            buf[pos:pos + size] = payload
            pos += size

    peer = median_seconds(raw_run, rounds=ROUNDS)
    raw.close()
    _figure("append, single 1 KiB", seconds, MESSAGES, MESSAGES * size, peer)


def test_batch_append_32x1kib(benchmark: BenchmarkFixture, fresh: Fresh, tmp_path: Path) -> None:
    encoded = batch([os.urandom(BODY_BYTES) for _ in range(BATCH)])
    batches = MESSAGES // BATCH

    def setup() -> tuple[tuple[object, ...], dict[str, object]]:
        return (fresh.make(),), {}

    def run(store: MessageStore) -> None:
        append = store.append_batch
        for _ in range(batches):
            append(encoded)

    seconds = pedantic_median(benchmark, run, setup=setup, rounds=ROUNDS)
    size = encoded.total_size
    raw = WarmMmap(tmp_path / "raw", batches * size + 4096)
    payload = os.urandom(size)

    def raw_run() -> None:
        buf = raw.buf
        pos = 0
        for _ in range(batches):
            buf[pos:pos + size] = payload
            pos += size

    peer = median_seconds(raw_run, rounds=ROUNDS)
    raw.close()
    _figure("append, batches of 32 x 1 KiB", seconds, batches * BATCH, batches * size, peer)
