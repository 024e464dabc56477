"""Replication's file I/O on real files. A slave's appends of replicated bytes
(`MessageStore.append_replicated_run`): runs of TRANSFER bodies written a file at a time with
pwritev, and no pre-faulting or read-ahead of a file fed that way. A master's views of the
mapping (what it sends from) do not stop retention from deleting a file."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.mapped_file import MappedFile, offset_to_file_name
from store.message_store import MessageStore
from tests.support.store_helpers import message, small_config

FILE_BYTES = 1024 * 1024
RUN = 256 * 1024  # a catching-up read's worth


@pytest.fixture
def master_log(tmp_path: Path) -> bytes:
    """A real commitlog of three and a bit files (records, BLANK ends)."""
    master = MessageStore(small_config(tmp_path / "master", mapped_file_size_commit_log=FILE_BYTES))
    master.open()
    try:
        while master.commitlog.max_phy_offset < 3 * FILE_BYTES + 5000:
            master.append_message(message(os.urandom(random.randint(100, 3000))))
        end = master.commitlog.max_phy_offset
        return b"".join(master.commitlog.read(pos, min(FILE_BYTES, end - pos))
                        for pos in range(0, end, FILE_BYTES))
    finally:
        master.close()


@pytest.fixture
def slave(tmp_path: Path) -> Iterator[MessageStore]:
    store = MessageStore(small_config(tmp_path / "slave", enable_controller_mode=True,
                                      mapped_file_size_commit_log=FILE_BYTES))
    store.open()
    store.fenced = True
    yield store
    store.close()


def runs(log: bytes, *, body: int, per_run: int) -> Iterator[tuple[int, list[memoryview]]]:
    """The bodies a master ships (each <= `body` bytes, never across a file), `per_run` to a
    run (one read's worth), as (offset of the run, bodies)."""
    bodies: list[tuple[int, memoryview]] = []
    pos = 0
    while pos < len(log):
        size = min(body, FILE_BYTES - pos % FILE_BYTES, len(log) - pos)
        bodies.append((pos, memoryview(log)[pos : pos + size]))
        pos += size
    for first in range(0, len(bodies), per_run):
        chunk = bodies[first : first + per_run]
        yield chunk[0][0], [view for _, view in chunk]


@pytest.mark.parametrize(
    ("body", "per_run"),
    [
        pytest.param(32 * 1024, 10, id="large-runs-cross-files"),
        pytest.param(1000, 3, id="small-runs"),
        pytest.param(RUN, 1, id="one-body-a-run"),
    ],
)
def test_runs_append_the_masters_bytes_exactly(slave: MessageStore, master_log: bytes,
                                               body: int, per_run: int) -> None:
    for offset, bodies in runs(master_log, body=body, per_run=per_run):
        slave.append_replicated_run(offset, bodies)
    assert slave.max_phy_offset == len(master_log)
    got = b"".join(slave.commitlog.read(pos, min(FILE_BYTES, len(master_log) - pos))
                   for pos in range(0, len(master_log), FILE_BYTES))
    assert got == master_log
    # What the mapping shows is what is in the file (pwritev and the mapping share pages).
    for mapped in slave.commitlog.files.files:
        with open(mapped.path, "rb") as file:
            assert file.read(mapped.wrote_position) == bytes(mapped.buf[: mapped.wrote_position])


def test_a_body_across_a_file_end_is_refused_after_the_bodies_before_it(
    slave: MessageStore, master_log: bytes,
) -> None:
    good = memoryview(master_log)[: FILE_BYTES - 100]
    bad = memoryview(master_log)[FILE_BYTES - 100 : FILE_BYTES + 100]
    with pytest.raises(ValueError, match="cross the end"):
        slave.append_replicated_run(0, [good, bad])
    assert slave.max_phy_offset == FILE_BYTES - 100


def test_a_run_not_at_the_end_of_the_log_appends_nothing(slave: MessageStore,
                                                         master_log: bytes) -> None:
    slave.append_replicated_run(0, [memoryview(master_log)[:RUN]])
    with pytest.raises(ValueError, match="ends at"):
        slave.append_replicated_run(RUN + 1,
                                    [memoryview(master_log)[:RUN]])
    assert slave.max_phy_offset == RUN


def test_a_file_fed_by_pwritev_is_neither_pre_faulted_nor_read_ahead_until_complete(
    slave: MessageStore, master_log: bytes,
) -> None:
    log = slave.commitlog
    assert not log.raw_writes
    slave.append_replicated_run(0, [memoryview(master_log)[: FILE_BYTES // 2]])
    first = log.files.last
    assert first is not None
    assert log.raw_writes
    assert not log.warm_ahead_wanted()
    assert not first.read_ahead
    slave.append_replicated_run(FILE_BYTES // 2,
                                [memoryview(master_log)[FILE_BYTES // 2 : FILE_BYTES]])
    assert first.wrote_position == FILE_BYTES
    assert first.read_ahead  # complete: read ahead again (reads may come from the disk)
    slave.append_replicated_run(FILE_BYTES, [memoryview(master_log)[FILE_BYTES : FILE_BYTES
                                                                     + RUN]])
    second = log.files.last
    assert second is not None
    assert second is not first
    assert not second.read_ahead
    log.end_raw_writes()  # what becoming master does first
    assert not log.raw_writes
    assert second.read_ahead
    assert second.populated_to <= second.wrote_position  # pre-faulted ahead of appends again


def test_write_at_takes_more_parts_than_one_pwritev_does(tmp_path: Path) -> None:
    mapped = MappedFile.create(tmp_path / offset_to_file_name(0), 1 << 20)
    try:
        parts = [os.urandom(random.randint(0, 300)) for _ in range(3000)]
        mapped.write_at(7, parts)
        joined = b"".join(parts)
        assert bytes(mapped.buf[7 : 7 + len(joined)]) == joined
    finally:
        mapped.close()


def test_a_file_deleted_while_a_view_of_it_is_held_stays_readable_through_the_view(
    tmp_path: Path,
) -> None:
    mapped = MappedFile.create(tmp_path / offset_to_file_name(0), 1 << 16)
    mapped.write_at(0, [b"still here"])
    with memoryview(mapped.buf) as whole:
        held = whole[:10]  # as an HA master's transport holds the bodies not yet sent
    mapped.destroy()
    assert not mapped.path.exists()
    assert bytes(held) == b"still here"
    held.release()  # the mapping goes with the last view (the mmap object unmaps itself)


@pytest.mark.parametrize("into_record", [3, 50, -10], ids=["size-only", "header", "body"])
def test_a_slave_whose_bytes_end_inside_a_record_becomes_master_without_it(
        slave: MessageStore, master_log: bytes, into_record: int) -> None:
    """TRANSFER bodies end anywhere, so a slave elected mid-backlog holds a partial record at
    its end (its unwritten rest reads as zeros): becoming master cuts exactly that record and
    starts the new epoch at the last whole one."""
    boundary = 0
    for _ in range(5):
        boundary += int.from_bytes(master_log[boundary : boundary + 4], "big")
    size = int.from_bytes(master_log[boundary : boundary + 4], "big")
    end = boundary + into_record % size  # (-10: all but the last 10 bytes)
    slave.append_replicated_run(0, [memoryview(master_log)[:end]])
    assert slave.commitlog.max_phy_offset == end
    assert slave.become_master_blocking(2) == boundary
    assert slave.commitlog.max_phy_offset == boundary
    assert slave.commitlog.read(0, boundary) == master_log[:boundary]
    assert [(e.epoch, e.start_offset) for e in slave.epoch_cache] == [(2, boundary)]
