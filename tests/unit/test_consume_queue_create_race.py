"""A consume-queue file created ahead in a worker thread and the same file created inline by
dispatch on the event loop: whichever comes second uses the first one's file. (Before, the
second creation failed with "File exists", and the send waiting on it answered SYSTEM_ERROR:
seen in the 200,000-message HA run.)"""

from __future__ import annotations

from pathlib import Path

from store.consume_queue import ConsumeQueue

UNITS_PER_FILE = 10
FILE_BYTES = UNITS_PER_FILE * 20


def fill_first_file(queue: ConsumeQueue) -> None:
    for offset in range(UNITS_PER_FILE):
        queue.put(offset, offset * 100, 100, 0)


def test_inline_creation_maps_the_file_a_thread_made_and_the_thread_lets_it_go(
    tmp_path: Path,
) -> None:
    queue = ConsumeQueue(tmp_path, "T", 0, FILE_BYTES)
    fill_first_file(queue)
    prepared = queue.create_file_detached(FILE_BYTES)  # the worker thread finished...
    assert prepared is not None
    queue.put(UNITS_PER_FILE, UNITS_PER_FILE * 100, 100, 7)  # ...dispatch got there first
    queue.adopt_prepared(prepared)  # then the thread's result reaches the loop
    assert prepared.path.exists()  # not deleted: the queue writes into it
    assert queue.unit_at(UNITS_PER_FILE) == (UNITS_PER_FILE * 100, 100, 7)
    queue.put(UNITS_PER_FILE + 1, (UNITS_PER_FILE + 1) * 100, 100, 8)
    assert queue.max_offset == UNITS_PER_FILE + 2
    queue.close()
    reloaded = ConsumeQueue(tmp_path, "T", 0, FILE_BYTES)
    reloaded.load_and_recover()
    assert reloaded.max_offset == UNITS_PER_FILE + 2
    assert reloaded.unit_at(UNITS_PER_FILE + 1) == ((UNITS_PER_FILE + 1) * 100, 100, 8)
    reloaded.close()


def test_a_thread_finding_the_file_made_inline_creates_nothing(tmp_path: Path) -> None:
    queue = ConsumeQueue(tmp_path, "T", 0, FILE_BYTES)
    fill_first_file(queue)
    queue.put(UNITS_PER_FILE, UNITS_PER_FILE * 100, 100, 7)  # inline creation first
    assert queue.create_file_detached(FILE_BYTES) is None
    queue.adopt_prepared(None)
    assert queue.unit_at(UNITS_PER_FILE) == (UNITS_PER_FILE * 100, 100, 7)
    queue.close()


def test_prepare_for_takes_a_file_a_thread_made(tmp_path: Path) -> None:
    queue = ConsumeQueue(tmp_path, "T", 0, FILE_BYTES)
    fill_first_file(queue)
    prepared = queue.create_file_detached(FILE_BYTES)
    assert prepared is not None
    queue.prepare_for(UNITS_PER_FILE, 3)  # inline, blocking: must not loop or fail
    queue.adopt_prepared(prepared)
    assert prepared.path.exists()
    queue.put(UNITS_PER_FILE, UNITS_PER_FILE * 100, 100, 1)
    assert queue.max_offset == UNITS_PER_FILE + 1
    queue.close()


def test_a_file_made_ahead_is_without_read_ahead_while_it_is_written(tmp_path: Path) -> None:
    """The first unit in each new page of a queue file is written on the event loop; without
    read-ahead, that fault zero-fills the one page, not the device's read-around window. Once
    the queue writes a later file, the full ones get their read-ahead back (when the next
    file is made ahead)."""
    queue = ConsumeQueue(tmp_path, "T", 0, FILE_BYTES)
    fill_first_file(queue)
    made = []
    for index in (1, 2, 3):
        mapped = queue.create_file_detached(index * FILE_BYTES)
        assert mapped is not None
        assert not mapped.read_ahead
        made.append(mapped)
        queue.adopt_prepared(mapped)
        for offset in range(index * UNITS_PER_FILE, (index + 1) * UNITS_PER_FILE):
            queue.put(offset, offset * 100, 100, 0)
    assert made[0].read_ahead  # full, with a full file after it when the third was made
    assert not made[2].read_ahead  # the one written last
    queue.close()
