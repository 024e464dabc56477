"""The checkpoint's sixth field, logicsPhysicalOffset (RocketMQ 5.5.0; docs/store-format.md §7,
§9.3): pyrmq writes it as 5.5.0 does (the start of the last record dispatched before a consume-queue
flush), never leaves it naming a record that is gone, and an abnormal recovery starts no later
than the file it points into."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store.checkpoint import CHECKPOINT_FILE_NAME, load_checkpoint
from store.message_store import MessageStore
from store.recovery import FirstRecord, start_file_abnormal
from tests.support.store_helpers import crash_image, message, read_all, small_config


def _stored_logics_physical_offset(root: Path) -> int:
    loaded = load_checkpoint(root / CHECKPOINT_FILE_NAME)
    assert not loaded.bad, loaded.reason
    return loaded.checkpoint.logics_physical_offset


async def test_a_consume_queue_flush_stores_the_start_of_the_last_dispatched_record(
    tmp_path: Path,
) -> None:
    store = MessageStore(small_config(tmp_path / "s"))
    store.open()
    try:
        results = [store.append_message(message(b"x" * 100, queue_id=i % 3)) for i in range(30)]
        assert store.dispatch_behind_bytes == 0
        await store.flush_consume_queues()
        await store.write_checkpoint()
        assert _stored_logics_physical_offset(store.config.store_path_root_dir) == \
            results[-1].phy_offset
        # Appends after the flush are not in it until the next flush.
        store.append_message(message(b"later"))
        await store.write_checkpoint()
        assert _stored_logics_physical_offset(store.config.store_path_root_dir) == \
            results[-1].phy_offset
    finally:
        store.close()


def test_close_stores_it_and_a_reopen_without_appends_keeps_it(tmp_path: Path) -> None:
    config = small_config(tmp_path / "s")
    store = MessageStore(config)
    store.open()
    last = [store.append_message(message(os.urandom(300), queue_id=i % 2)) for i in range(50)][-1]
    store.close()
    assert _stored_logics_physical_offset(config.store_path_root_dir) == last.phy_offset > 0
    again = MessageStore(config)
    again.open()
    again.close()
    assert _stored_logics_physical_offset(config.store_path_root_dir) == last.phy_offset


def test_a_truncation_below_it_zeroes_it_on_disk_at_once(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s"))
    store.open()
    try:
        results = [store.append_message(message(b"a" * 200)) for _ in range(10)]
        store.close()
        store = MessageStore(small_config(tmp_path / "s"))
        store.open()
        root = store.config.store_path_root_dir
        assert _stored_logics_physical_offset(root) == results[-1].phy_offset
        store.truncate_to_blocking(results[4].phy_offset)
        # A crash right after the cut must not find a value naming a record that is gone.
        assert _stored_logics_physical_offset(root) == 0
        image = crash_image(root, tmp_path / "crash")
    finally:
        store.close()
    recovered = MessageStore(small_config(image))
    recovered.open()
    try:
        assert [r.body for r in read_all(recovered, "TopicTest", 0)] == [b"a" * 200] * 4
    finally:
        recovered.close()


def _firsts(*timestamps: int) -> list[FirstRecord]:
    """Files of 1000 bytes whose first records carry these store timestamps (0 = not valid)."""
    return [FirstRecord(ts != 0, index * 1000, ts) for index, ts in enumerate(timestamps)]


@pytest.mark.parametrize(
    ("firsts", "min_timestamp", "logics_physical_offset", "expected"),
    [
        pytest.param(_firsts(10, 20, 30, 40), 35, 0, 2, id="unknown-offset-5.3.3-rule-alone"),
        pytest.param(_firsts(10, 20, 30, 40), 35, 1500, 1, id="offset-rule-earlier-wins"),
        pytest.param(_firsts(10, 20, 30, 40), 15, 3500, 0, id="timestamp-rule-earlier-wins"),
        pytest.param(_firsts(10, 20, 30, 40), 99, 3000, 3, id="offset-at-a-file-start"),
        pytest.param(_firsts(10, 0, 30, 40), 99, 1999, 0, id="invalid-first-record-skipped"),
        pytest.param(_firsts(10, 20, 30, 40), 0, 3500, 0, id="bad-checkpoint-from-the-start"),
        pytest.param(_firsts(*range(1, 30)), 99, 1500, 1, id="no-10-file-look-back-cap"),
    ],
)
def test_abnormal_recovery_starts_at_the_earlier_of_the_two_rules(
    firsts: list[FirstRecord], min_timestamp: int, logics_physical_offset: int, expected: int
) -> None:
    assert start_file_abnormal(
        firsts, min_timestamp=min_timestamp, logics_physical_offset=logics_physical_offset
    ) == expected
