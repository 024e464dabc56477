"""Append throughput of 1 KiB messages, single and batches of 32, against a raw mmap write.

Single messages are timed as the broker's send handles them, per message: `encode_properties`
of the message's properties (TAGS, KEYS, a fresh UNIQ_KEY each, WAIT), then
`MessageStore.append_message_fields`, the call the send processor makes: validation, the record
encoded with its body CRC and whole-record `__CRC32#` into the commitlog mapping, the write
position, queue offset, store timestamp and confirm/dispatch bookkeeping, and the record's
consume-queue unit (one C call for the encoding, both CRCs and the unit; issue 13: the append
alone left out half of the store's work). Batches are timed from the encoded batch, as before
(the broker encodes a batch body in one C call, benchmarked with the broker).

The peer is a raw sequential write of the very same record bytes into a warm (pre-faulted)
file-backed mmap, in the same Python loop shape: one slice assignment per record for single
appends, one per batch for batches. The store's commitlog is pre-faulted the same way (its
warm-ahead does this in production), so both sides write to warm pages.

Rounds alternate, a peer round right before each store round, and the ratio printed is the
median of the per-round ratios: this machine's speed drifts by tens of percent between runs,
and a pair of adjacent rounds sees the same machine.
"""

from __future__ import annotations

import mmap
import os
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from benchmarks.conftest import record
from store.config import StoreConfig
from store.message_encoder import prepare_message
from store.message_properties import encode_properties
from store.message_store import MessageStore
from tests.support.store_helpers import BORN_HOST, STORE_HOST, batch, message

MESSAGES = 100_000
BODY_BYTES = 1024
BATCH = 32
ROUNDS = 7


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


class RawPeer:
    """The raw write, one round of it run before each store round (see the module doc)."""

    def __init__(self, path: Path, payload: bytes, count: int) -> None:
        self.raw = WarmMmap(path, count * len(payload) + 4096)
        self.payload = payload
        self.count = count
        self.seconds: list[float] = []

    def run_round(self) -> None:
        buf = self.raw.buf
        payload = self.payload
        size = len(payload)
        pos = 0
        started = time.perf_counter()
        for _ in range(self.count):
            buf[pos:pos + size] = payload
            pos += size
        self.seconds.append(time.perf_counter() - started)

    def close(self) -> None:
        self.raw.close()


def _figure(name: str, benchmark: BenchmarkFixture, peer: RawPeer, messages: int,
            nbytes: int) -> None:
    stats = benchmark.stats
    assert stats is not None
    store_seconds = list(stats.stats.data)
    assert len(store_seconds) == len(peer.seconds)
    seconds = statistics.median(store_seconds)
    peer_seconds = statistics.median(peer.seconds)
    ratio = statistics.median(p / s for s, p in zip(store_seconds, peer.seconds, strict=True))
    record(f"{name}: {messages / seconds:,.0f} msg/s, {nbytes / seconds / 1e6:,.0f} MB/s; raw "
           f"warm mmap write {nbytes / peer_seconds / 1e6:,.0f} MB/s; ratio {ratio:.1%} "
           f"(median of {len(store_seconds)} adjacent round pairs)")


def test_single_encode_and_append_1kib(benchmark: BenchmarkFixture, fresh: Fresh,
                                      tmp_path: Path) -> None:
    body = os.urandom(BODY_BYTES)
    # Java's uniq keys: 32 hex digits, a fresh one per message (made before the clock starts).
    uniq_keys = [f"7F000001{index:024X}" for index in range(MESSAGES)]
    sample = prepare_message(
        topic="TopicTest", queue_id=0, flag=0, body=body, sys_flag=0,
        properties=encode_properties({"TAGS": "TagA", "KEYS": "order-1",
                                      "UNIQ_KEY": uniq_keys[0], "WAIT": "true"}),
        born_timestamp=1_700_000_000_000, born_host=BORN_HOST, store_host=STORE_HOST,
        max_message_size=4 * 1024 * 1024)
    peer = RawPeer(tmp_path / "raw", os.urandom(sample.total_size), MESSAGES)

    def setup() -> tuple[tuple[object, ...], dict[str, object]]:
        store = fresh.make()
        peer.run_round()
        return (store,), {}

    def run(store: MessageStore) -> None:
        append = store.append_message_fields
        for uniq_key in uniq_keys:
            append(
                topic="TopicTest", queue_id=0, flag=0, body=body, sys_flag=0,
                properties=encode_properties({"TAGS": "TagA", "KEYS": "order-1",
                                              "UNIQ_KEY": uniq_key, "WAIT": "true"}),
                born_timestamp=1_700_000_000_000, born_host=BORN_HOST, store_host=STORE_HOST)
        assert store.next_queue_offset("TopicTest", 0) == MESSAGES + 1  # and the warm-up one

    benchmark.pedantic(run, setup=setup, rounds=ROUNDS, iterations=1)  # type: ignore[no-untyped-call]
    peer.close()
    _figure("encode + append, single 1 KiB (goal >= 300,000 msg/s)", benchmark, peer, MESSAGES,
            MESSAGES * sample.total_size)


def test_batch_append_32x1kib(benchmark: BenchmarkFixture, fresh: Fresh, tmp_path: Path) -> None:
    encoded = batch([os.urandom(BODY_BYTES) for _ in range(BATCH)])
    batches = MESSAGES // BATCH
    peer = RawPeer(tmp_path / "raw", os.urandom(encoded.total_size), batches)

    def setup() -> tuple[tuple[object, ...], dict[str, object]]:
        store = fresh.make()
        peer.run_round()
        return (store,), {}

    def run(store: MessageStore) -> None:
        append = store.append_batch
        for _ in range(batches):
            append(encoded)

    benchmark.pedantic(run, setup=setup, rounds=ROUNDS, iterations=1)  # type: ignore[no-untyped-call]
    peer.close()
    _figure("append, batches of 32 x 1 KiB", benchmark, peer, batches * BATCH,
            batches * encoded.total_size)
