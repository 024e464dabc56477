"""MessageStore on real files: appends, rolls, reads, recovery, truncation, flush policies."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from store import testhooks
from store.config import FlushDiskType
from store.consume_queue import WARM_AHEAD_BYTES
from store.errors import DataInvariantError, RecordCorruptError, WriteRefusedError
from store.message_decoder import decode_record
from store.message_encoder import EncodedMessage
from store.message_store import AppendResult, GetStatus, MessageStore, PutStatus
from store.record_layout import BLANK_MAGIC_CODE
from tests.support.store_helpers import batch, crash_image, message, read_all, small_config


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore(small_config(tmp_path / "store"))
    s.open()
    yield s
    s.close()


@contextlib.asynccontextmanager
async def running(store: MessageStore) -> AsyncIterator[MessageStore]:
    task = asyncio.create_task(store.run())
    try:
        yield store
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_append_then_read_back_in_queue_order(store: MessageStore) -> None:
    for i in range(60):
        store.append_message(message(f"m{i}".encode(), queue_id=i % 3))
    for queue_id in range(3):
        records = read_all(store, "TopicTest", queue_id)
        assert [r.body for r in records] == [f"m{i}".encode() for i in range(queue_id, 60, 3)]
        assert [r.queue_offset for r in records] == list(range(20))
        assert store.max_offset_in_queue("TopicTest", queue_id) == 20


def test_roll_pads_the_old_file_with_a_blank_record(store: MessageStore) -> None:
    body = b"x" * 3000
    results = [store.append_message(message(body)) for _ in range(30)]
    files = store.commitlog.files.files
    assert len(files) >= 2
    first = files[0]
    last_in_first = max((r for r in results if r.phy_offset < first.file_end_offset),
                        key=lambda r: r.phy_offset)
    blank_at = last_in_first.end_offset
    size, magic = int.from_bytes(first.buf[blank_at:blank_at + 4], "big", signed=True), \
        int.from_bytes(first.buf[blank_at + 4:blank_at + 8], "big", signed=True)
    assert magic == BLANK_MAGIC_CODE
    assert size == first.file_size - blank_at
    assert files[1].path.name == f"{first.file_size:020d}"
    assert [r.body for r in read_all(store, "TopicTest", 0)] == [body] * 30


def test_batch_gets_consecutive_queue_offsets_and_contiguous_records(
    store: MessageStore,
) -> None:
    store.append_message(message(b"single"))
    result = store.append_batch(batch([f"b{i}".encode() for i in range(32)]))
    assert result.queue_offset == 1
    assert result.msg_count == 32
    records = read_all(store, "TopicTest", 0)
    assert [r.queue_offset for r in records] == list(range(33))
    assert [r.body for r in records[1:]] == [f"b{i}".encode() for i in range(32)]
    phys = [r.phy_offset for r in records[1:]]
    assert phys[0] == result.phy_offset
    assert all(b.phy_offset == a.phy_offset + a.total_size
               for a, b in itertools.pairwise(records))
    assert records[-1].phy_offset + records[-1].total_size == result.end_offset


def test_clean_reopen_is_normal_recovery_and_continues_offsets(tmp_path: Path) -> None:
    config = small_config(tmp_path / "s")
    store = MessageStore(config)
    store.open()
    for i in range(200):
        store.append_message(message(os.urandom(500), queue_id=i % 2))
    end = store.max_phy_offset
    store.close()
    assert not (config.store_path_root_dir / "abort").exists()

    again = MessageStore(config)
    report = again.open()
    try:
        assert not report.abnormal
        assert not report.lost_committed
        assert report.max_phy_offset == end == again.max_phy_offset
        assert again.append_message(message(b"next", queue_id=1)).queue_offset == 100
    finally:
        again.close()


def test_crash_image_recovers_every_appended_record(store: MessageStore, tmp_path: Path) -> None:
    bodies = [os.urandom(100 + i * 37 % 2500) for i in range(150)]
    for i, body in enumerate(bodies):
        store.append_message(message(body, queue_id=i % 3))
    image = crash_image(store.config.store_path_root_dir, tmp_path / "crash")
    recovered = MessageStore(small_config(image))
    report = recovered.open()
    try:
        assert report.abnormal
        assert recovered.max_phy_offset == store.max_phy_offset
        for queue_id in range(3):
            assert [r.body for r in read_all(recovered, "TopicTest", queue_id)] == \
                bodies[queue_id::3]
    finally:
        recovered.close()


def test_truncate_then_short_append_never_resurrects_the_old_tail(
    store: MessageStore, tmp_path: Path
) -> None:
    """RocketMQ #10666: after a cut, a shorter record must not make stale records reappear."""
    results = [store.append_message(message(b"a" * 200)) for _ in range(10)]
    cut = results[4].phy_offset
    store.truncate_to_blocking(cut)
    assert store.max_phy_offset == cut
    assert store.next_queue_offset("TopicTest", 0) == 4
    # A shorter record, then crash: the old records 5..9 lie after it unless zeroed.
    store.append_message(message(b"new"))
    image = crash_image(store.config.store_path_root_dir, tmp_path / "crash")
    recovered = MessageStore(small_config(image))
    recovered.open()
    try:
        bodies = [r.body for r in read_all(recovered, "TopicTest", 0)]
        assert bodies == [b"a" * 200] * 4 + [b"new"]
    finally:
        recovered.close()


def test_truncate_must_land_on_a_record_boundary(store: MessageStore) -> None:
    results = [store.append_message(message(b"abc")) for _ in range(3)]
    with pytest.raises(DataInvariantError, match="record boundary"):
        store.truncate_to_blocking(results[1].phy_offset + 5)
    assert store.max_phy_offset == results[-1].end_offset


def test_units_dispatched_after_their_append_are_reported_per_queue(tmp_path: Path) -> None:
    """Controller mode dispatches up to confirmOffset later than the append: the arrival
    listener hears of each queue that got units (the broker wakes pulls held on it)."""
    store = MessageStore(small_config(tmp_path / "s", enable_controller_mode=True))
    store.open()
    heard: list[tuple[str, int, int]] = []
    store.arrival_listener = lambda topic, queue_id, max_offset: heard.append(
        (topic, queue_id, max_offset))
    try:
        results = [store.append_message(message(b"m", queue_id=i % 2)) for i in range(5)]
        assert heard == []
        store.set_confirm_offset(results[2].end_offset)  # queue 0: offsets 0, 1; queue 1: 0
        assert sorted(heard) == [("TopicTest", 0, 2), ("TopicTest", 1, 1)]
        heard.clear()
        store.set_confirm_offset(results[4].end_offset)
        assert sorted(heard) == [("TopicTest", 0, 3), ("TopicTest", 1, 2)]
    finally:
        store.close()


def test_controller_mode_hides_records_past_confirm_offset(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s", enable_controller_mode=True))
    store.open()
    try:
        results = [store.append_message(message(f"m{i}".encode())) for i in range(5)]
        assert store.get_messages("TopicTest", 0, 0, max_count=10).status in (
            GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE)
        store.set_confirm_offset(results[2].end_offset)
        assert [decode_record(m).body for m in
                store.get_messages("TopicTest", 0, 0, max_count=10).messages] == \
            [b"m0", b"m1", b"m2"]
        with pytest.raises(DataInvariantError, match="below confirm_offset"):
            store.truncate_to_blocking(results[1].phy_offset)
        with pytest.raises(DataInvariantError, match="> max_phy_offset"):
            store.set_confirm_offset(results[-1].end_offset + 1)
        # Queue offsets count the undispatched records too (M5).
        assert store.append_message(message(b"m5")).queue_offset == 5
    finally:
        store.close()


def test_read_of_a_damaged_record_raises_and_serves_nothing(store: MessageStore) -> None:
    result = store.append_message(message(b"precious"))
    mapped = store.commitlog.files.files[0]
    mapped.buf[result.phy_offset + 90] ^= 0xFF
    with pytest.raises(RecordCorruptError, match="commitlog record at 0"):
        store.get_messages("TopicTest", 0, 0, max_count=1)


def test_a_pull_across_batches_is_its_records_in_order_and_damage_in_a_run_raises(
    store: MessageStore,
) -> None:
    # Batches of 5 to queue 0 with queue 1's between them: a pull of 12 is three runs.
    for n in range(3):
        store.append_batch(batch([f"q0-{n}-{i}".encode() for i in range(5)], queue_id=0))
        store.append_batch(batch([b"other"] * 3, queue_id=1))
    result = store.get_messages("TopicTest", 0, 1, max_count=12)
    assert result.status is GetStatus.FOUND
    assert result.queue_offsets == list(range(1, 13))
    assert [decode_record(m).body for m in result.messages] == \
        [f"q0-{n}-{i}".encode() for n in range(3) for i in range(5)][1:13]
    queue = store.queue("TopicTest", 0)
    assert queue is not None
    units = queue.units(1, 12)
    assert result.body == b"".join(store.commitlog.read_record(phy, size)
                                   for phy, size, _ in units.tolist())
    assert result.sizes == units["size"].tolist()
    # One byte of a record in the middle of the second run: the pull serves nothing.
    phy, size, _ = units[7].tolist()
    store.commitlog.files.files[0].buf[phy + size - 3] ^= 0xFF
    with pytest.raises(RecordCorruptError, match=f"commitlog record at {phy}"):
        store.get_messages("TopicTest", 0, 1, max_count=12)


def test_offset_by_time_finds_the_first_message_at_or_after(tmp_path: Path) -> None:
    clock = [1_000]
    store = MessageStore(small_config(tmp_path / "s"), wall_ms=lambda: clock[0])
    store.open()
    try:
        for i in range(50):
            clock[0] = 1_000 + i * 10
            store.append_message(message(b"t"))
        assert store.offset_by_time("TopicTest", 0, 0) == 0
        assert store.offset_by_time("TopicTest", 0, 1_000 + 25 * 10) == 25
        assert store.offset_by_time("TopicTest", 0, 1_000 + 25 * 10 - 3) == 25
        assert store.offset_by_time("TopicTest", 0, 10_000) == 50
    finally:
        store.close()


def test_tag_filter_skips_other_tags(store: MessageStore) -> None:
    from store.message_properties import tags_code

    for i in range(10):
        store.append_message(message(f"{i}".encode(), tags="TagA" if i % 2 else "TagB"))
    result = store.get_messages("TopicTest", 0, 0, max_count=10,
                                tags_codes=frozenset({tags_code("TagA")}))
    assert [decode_record(m).body for m in result.messages] == [b"1", b"3", b"5", b"7", b"9"]
    assert result.queue_offsets == [1, 3, 5, 7, 9]


def test_fenced_store_refuses_writes(store: MessageStore) -> None:
    store.fenced = True
    with pytest.raises(WriteRefusedError, match="fenced"):
        store.append_message(message(b"x"))
    assert store.max_phy_offset == 0


async def test_sync_flush_group_commit_shares_msyncs(tmp_path: Path) -> None:
    events: list[str] = []
    testhooks.configure_journal(tmp_path, events.append)
    try:
        store = MessageStore(small_config(tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH))
        store.open()
        async with running(store):
            async with asyncio.timeout(10):
                results = await asyncio.gather(
                    *(store.put_message(message(os.urandom(200))) for _ in range(200))
                )
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert store.commitlog.flushed_where >= max(r.append.end_offset for r in results)
        syncs = [e for e in events if e.startswith("S ") and "commitlog" in e]
        assert 1 <= len(syncs) < 100, f"{len(syncs)} msyncs for 200 appends: no group commit"
        store.close()
    finally:
        testhooks.configure_journal(None)


async def test_async_flush_put_returns_before_disk(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s", flush_interval_commit_log_ms=50,
                                      flush_commit_log_least_pages=0))
    store.open()
    async with running(store):
        result = await store.put_message(message(b"x" * 100))
        assert result.status is PutStatus.PUT_OK
        deadline = time.monotonic() + 5
        while store.commitlog.flushed_where < result.append.end_offset:
            assert time.monotonic() < deadline, "async flush never ran"
            await asyncio.sleep(0.01)
    store.close()


async def test_put_messages_appends_in_order_and_waits_for_one_group_commit(
    tmp_path: Path,
) -> None:
    store = MessageStore(small_config(tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH))
    store.open()
    msgs = [message(f"m{i:03d}".encode() * 400, queue_id=i % 3) for i in range(120)]  # 3 files
    async with running(store):
        async with asyncio.timeout(10):
            result = await store.put_messages(msgs)
    assert result.status is PutStatus.PUT_OK
    assert result.refused is None
    assert [a.queue_offset for a in result.appended] == [i // 3 for i in range(120)]
    assert store.commitlog.flushed_where >= result.appended[-1].end_offset
    assert len(store.commitlog.files.files) >= 3
    for queue_id in range(3):
        got = read_all(store, "TopicTest", queue_id)
        assert [r.body for r in got] == [m.body for m in msgs[queue_id::3]]
    store.close()


async def test_put_messages_stops_at_the_first_refusal(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    append = store.append_message

    def fence_after_two(msg: EncodedMessage) -> AppendResult:
        result = append(msg)
        store.fenced = len(read_all(store, "TopicTest", 0)) >= 2
        return result

    monkeypatch.setattr(store, "append_message", fence_after_two)
    result = await store.put_messages([message(f"m{i}".encode()) for i in range(5)])
    assert len(result.appended) == 2
    assert isinstance(result.refused, WriteRefusedError)
    assert [r.body for r in read_all(store, "TopicTest", 0)] == [b"m0", b"m1"]


async def test_retention_deletes_expired_files_and_moves_min_offsets(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s", file_reserved_time_h=1))
    store.open()
    try:
        for _ in range(100):
            store.append_message(message(b"r" * 3000))
        files = store.commitlog.files.files
        assert len(files) >= 4
        old = time.time() - 2 * 3600
        for mapped in files[:-1]:
            os.utime(mapped.path, (old, old))
        now_ms = int(time.time() * 1000)
        deleted = await store.clean_expired_files(now_ms=now_ms, current_hour=4)
        assert deleted == len(files) - 1 or deleted > 0
        assert store.min_phy_offset == store.commitlog.files.files[0].file_from_offset > 0
        low = store.min_offset_in_queue("TopicTest", 0)
        assert low > 0
        assert store.get_messages("TopicTest", 0, 0, max_count=1).status is \
            GetStatus.OFFSET_TOO_SMALL
        first = store.get_messages("TopicTest", 0, low, max_count=1)
        assert decode_record(first.messages[0]).phy_offset >= store.min_phy_offset
        # Outside deleteWhen hours and with free disk, nothing expires.
        assert await store.clean_expired_files(now_ms=now_ms, current_hour=5) == 0
    finally:
        store.close()


def test_epoch_entries_beyond_the_recovered_log_are_dropped(tmp_path: Path) -> None:
    from store.epoch_file import read_epoch_file

    config = small_config(tmp_path / "s")
    store = MessageStore(config)
    store.open()
    store.append_epoch_blocking(1, 0)
    end = store.append_message(message(b"a" * 100)).end_offset
    store.append_epoch_blocking(2, end)
    store.append_message(message(b"b" * 100))
    # Epoch 3 claims bytes the log never got (as after a power loss took the tail).
    store.append_epoch_blocking(3, store.max_phy_offset + 1000)
    store.close()
    again = MessageStore(config)
    again.open()
    try:
        assert [(e.epoch, e.start_offset) for e in again.epoch_cache] == [(1, 0), (2, end)]
        on_disk = read_epoch_file(again.epoch_file_path).entries
        assert [(e.epoch, e.start_offset) for e in on_disk] == [(1, 0), (2, end)]
        # Truncation cuts the epoch suffix after the commitlog: an epoch starting at or after
        # the cut has no bytes left (RocketMQ's truncateSuffixByOffset).
        again.truncate_to_blocking(end)
        assert [(e.epoch, e.start_offset) for e in again.epoch_cache] == [(1, 0)]
        assert [(e.epoch, e.start_offset) for e in
                read_epoch_file(again.epoch_file_path).entries] == [(1, 0)]
    finally:
        again.close()


def test_unreadable_epoch_file_and_bak_refuse_to_open(tmp_path: Path) -> None:
    from store.errors import EpochFileUnreadableError

    config = small_config(tmp_path / "s")
    store = MessageStore(config)
    store.open()
    store.append_epoch_blocking(1, 0)
    store.append_epoch_blocking(2, 0)
    store.close()
    (config.store_path_root_dir / "epochFileCheckpoint").write_text("2\n1\n1-0\n2-0\n")
    (config.store_path_root_dir / "epochFileCheckpoint.bak").write_text("1\n999\n1-0\n")
    with pytest.raises(EpochFileUnreadableError):
        MessageStore(config).open()
    # The failed open released the lock: a fixed file opens.
    (config.store_path_root_dir / "epochFileCheckpoint.bak").unlink()
    (config.store_path_root_dir / "epochFileCheckpoint").write_text("1\n0\n1-0\n")
    fixed = MessageStore(config)
    fixed.open()
    assert fixed.epoch_cache.last_epoch() == 1
    fixed.close()


def test_batch_crossing_a_consume_queue_file_boundary(tmp_path: Path) -> None:
    """A batch whose units spill into the next consume-queue file (100 units per file here)."""
    config = small_config(tmp_path / "s")
    store = MessageStore(config)
    store.open()
    for _ in range(3):
        store.append_batch(batch([b"x"] * 30))
    assert store.max_offset_in_queue("TopicTest", 0) == 90
    result = store.append_batch(batch([b"y"] * 32))  # units 90..121 cross offset 100
    assert result.queue_offset == 90
    assert store.max_offset_in_queue("TopicTest", 0) == 122
    records = read_all(store, "TopicTest", 0)
    assert [r.queue_offset for r in records] == list(range(122))
    store.close()
    again = MessageStore(config)
    again.open()
    try:
        assert again.max_offset_in_queue("TopicTest", 0) == 122
        assert [r.body for r in read_all(again, "TopicTest", 0)][-32:] == [b"y"] * 32
    finally:
        again.close()


async def test_puts_create_files_off_the_event_loop(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """New queues, consume-queue file boundaries and commitlog rolls: every file a put needs
    is created in a worker thread, never on the loop (fallocate and a dir fsync block)."""
    import threading

    from store.mapped_file import MappedFile

    loop_thread = threading.get_ident()
    creators: list[int] = []
    real_create = MappedFile.create.__func__  # type: ignore[attr-defined]

    def spy(cls: type[MappedFile], path: Path, file_size: int) -> MappedFile:
        creators.append(threading.get_ident())
        created: MappedFile = real_create(cls, path, file_size)
        return created

    monkeypatch.setattr(MappedFile, "create", classmethod(spy))
    store = MessageStore(small_config(tmp_path / "s"))
    store.open()
    try:
        for i in range(150):
            await store.put_message(message(b"p" * 1500, queue_id=i % 3))
        await store.put_batch(batch([b"q" * 100] * 60, queue_id=5))
        assert len(store.commitlog.files.files) > 3
        assert store.max_offset_in_queue("TopicTest", 0) == 50
        assert store.max_offset_in_queue("TopicTest", 5) == 60
        assert creators, "no file was created at all"
        assert loop_thread not in creators
    finally:
        store.close()


async def test_close_waits_for_disk_work_still_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush cancelled on the loop keeps running in its thread: close() must not unmap the
    files under it (it waits for the store's worker threads first)."""
    import threading

    from store.commitlog import CommitLog

    events: list[str] = []
    started, release = threading.Event(), threading.Event()
    real_flush, real_close = CommitLog.flush, CommitLog.close

    def slow_flush(self: CommitLog, least_pages: int = 0) -> int:
        if not started.is_set():
            started.set()
            release.wait(10)
            events.append("background flush done")
        return real_flush(self, least_pages)

    def recording_close(self: CommitLog) -> None:
        events.append("unmapped")
        real_close(self)

    monkeypatch.setattr(CommitLog, "flush", slow_flush)
    monkeypatch.setattr(CommitLog, "close", recording_close)
    store = MessageStore(small_config(tmp_path / "s"))
    store.open()
    store.append_message(message(b"x" * 100))
    flushing = asyncio.create_task(store.flush())
    await asyncio.to_thread(started.wait, 10)
    flushing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await flushing
    threading.Timer(0.2, release.set).start()
    await asyncio.to_thread(store.close)
    assert events == ["background flush done", "unmapped"]


def test_new_files_and_directories_are_made_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new segment is fsynced after its allocation (its size must survive a power loss) and
    every new directory is synced into its parent."""
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    root = tmp_path / "s"
    store = MessageStore(small_config(root))
    store.open()
    try:
        store.append_message(message(b"x", topic="NewTopic", queue_id=3))
    finally:
        store.close()
    segment = str(root / "commitlog" / f"{0:020d}")
    unit_file = str(root / "consumequeue" / "NewTopic" / "3" / f"{0:020d}")
    for path in (segment, unit_file):
        assert path in synced, f"{path} never fsynced"
    for parent in (root, root / "consumequeue", root / "consumequeue" / "NewTopic",
                   root / "consumequeue" / "NewTopic" / "3", root / "commitlog"):
        assert str(parent) in synced, f"directory {parent} never fsynced"


def test_read_record_at_a_message_id_offset(store: MessageStore) -> None:
    first = store.append_message(message(b"first"))
    second = store.append_message(message(b"second"))
    raw = store.read_record_at(second.phy_offset)
    assert raw is not None
    assert decode_record(raw).body == b"second"
    assert store.read_record_at(second.end_offset) is None  # nothing written there yet
    assert store.read_record_at(10**12) is None
    assert store.read_record_at(first.phy_offset + 4) is None  # MAGICCODE: a negative size
    store.commitlog.files.files[0].buf[second.end_offset - 20] ^= 0xFF  # damage "second"
    with pytest.raises(RecordCorruptError):
        store.read_record_at(second.phy_offset)
    assert store.read_record_at(first.phy_offset) is not None


async def test_files_are_prepared_ahead_so_puts_crossing_into_them_create_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the store running, the next consume-queue file of a queue past the middle of its
    last file and the next commitlog segment are created ahead of need (in worker threads);
    the puts that then cross into them wait on no file creation (fallocate, fsyncs)."""
    from store.mapped_file import MappedFile
    from tests.remoting.support import wait_until

    store = MessageStore(small_config(tmp_path / "s"))
    store.open()
    cq_dir = tmp_path / "s" / "consumequeue" / "TopicTest" / "0"
    commitlog_dir = tmp_path / "s" / "commitlog"
    try:
        async with running(store):
            # 100 units per consume-queue file, 64 KiB commitlog segments (~40 of these).
            for _ in range(70):
                await store.put_message(message(b"p" * 1500))
            await wait_until(lambda: len(list(cq_dir.iterdir())) == 2, timeout_s=5,
                             what="the second consume-queue file created ahead")
            await wait_until(
                lambda: len(list(commitlog_dir.iterdir())) == len(store.commitlog.files.files) + 1,
                timeout_s=5, what="the next commitlog segment created ahead")
            files_before = len(store.commitlog.files.files)

            def refuse(cls: type[MappedFile], path: Path, file_size: int) -> MappedFile:
                raise AssertionError(f"a put created {path} itself")

            monkeypatch.setattr(MappedFile, "create", classmethod(refuse))
            for _ in range(35):  # queue offsets 70..104: into the prepared files
                result = await store.put_message(message(b"p" * 1500))
                assert result.status is PutStatus.PUT_OK
            monkeypatch.undo()
        assert store.max_offset_in_queue("TopicTest", 0) == 105
        assert len(store.commitlog.files.files) == files_before + 1
        assert [r.queue_offset for r in read_all(store, "TopicTest", 0)] == list(range(105))
    finally:
        store.close()


async def test_consume_queue_pages_are_faulted_in_ahead_of_dispatch(tmp_path: Path) -> None:
    """A worker thread keeps a queue file's pages faulted in WARM_AHEAD_BYTES ahead of its
    writer, from the first put on, and a file made ahead of need has its first pages so:
    dispatch, on the event loop, then writes into pages that are there. (Before, each new page
    cost dispatch a major fault: 220 a second at 45,000 msg/s in the latency benchmark,
    eighteenth session.) Only a window: a queue that got one message does not have its whole
    file's zeros dirtied."""
    units = (4 * WARM_AHEAD_BYTES) // 20
    file_bytes = units * 20
    store = MessageStore(small_config(tmp_path / "store", mapped_file_size_consume_queue=file_bytes,
                                      mapped_file_size_commit_log=4 * 1024 * 1024))
    store.open()

    async def warm_to(index: int, least: int) -> None:
        async with asyncio.timeout(10):
            while True:
                queue = store.consume_queues.get("TopicTest", 0)
                files = queue.mapped_files if queue is not None else ()
                if len(files) > index and files[index].populated_to >= least:
                    return
                await asyncio.sleep(0.005)

    sent = 0

    async def send(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            await store.put_message(message(f"m{sent}".encode()))
            sent += 1

    try:
        async with running(store):
            await send(1)
            await warm_to(0, WARM_AHEAD_BYTES)  # the first file: made for that put
            first = store.consume_queues.get("TopicTest", 0).mapped_files[0]  # type: ignore[union-attr]
            assert first.populated_to < file_bytes  # a window, not the whole file
            await send(WARM_AHEAD_BYTES // 20)  # a window on: the pages ahead follow
            await warm_to(0, first.wrote_position + WARM_AHEAD_BYTES // 2)
            await send(units // 2 - sent + 1)  # past the middle: a spare, its first pages
            await warm_to(1, WARM_AHEAD_BYTES)
            await send(units - sent + 10)  # into the spare
        records = read_all(store, "TopicTest", 0)
        assert [r.body for r in records] == [f"m{i}".encode() for i in range(sent)]
    finally:
        store.close()
