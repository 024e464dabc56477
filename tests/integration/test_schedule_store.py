"""Schedule-topic units hold deliver times: live, after recovery and after re-dispatch.

`SCHEDULE_TOPIC_XXXX` queue q holds delay level q + 1; its consume-queue tagsCode is the record's
store timestamp + that level's delay (capped at the last level), as Java's
`checkMessageAndReturnSize` computes it; every other unit keeps its tag hash.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

import store.commitlog
import store.consume_queue
import store.message_batch
import store.message_encoder
import store.recovery
from store.message_properties import tags_code
from store.message_store import MessageStore
from store.schedule import DEFAULT_MESSAGE_DELAY_LEVEL, SCHEDULE_TOPIC, parse_message_delay_level
from tests.support.store_helpers import crash_image, message, small_config

QUEUES = (0, 2, 17, 25)  # levels 1, 3, 18 and 26 (above the last: counts as 18)


def append_mixed(store: MessageStore) -> None:
    for i in range(160):
        queue_id = QUEUES[i % len(QUEUES)]
        store.append_message(message(b"s%d" % i, topic=SCHEDULE_TOPIC, queue_id=queue_id,
                                     tags="TagA"))
        store.append_message(message(b"n%d" % i, queue_id=i % 2, tags="TagA"))


def units(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, int]]:
    queue = store.queue(topic, queue_id)
    assert queue is not None
    return [(phy, tags) for phy, _, tags in queue.units(0, 1000).tolist()]


def expected_units(store: MessageStore, queue_id: int, delays: tuple[int, ...]
                   ) -> list[tuple[int, int]]:
    level = min(queue_id + 1, len(delays))
    return [
        (phy, store.store_timestamp_at(phy, size) + delays[level - 1])
        for phy, size, _ in store.queue(SCHEDULE_TOPIC, queue_id).units(0, 1000).tolist()  # type: ignore[union-attr]
    ]


@pytest.mark.parametrize("with_c", [True, False], ids=["c-scan", "python-scan"])
@pytest.mark.parametrize("delay_levels", [DEFAULT_MESSAGE_DELAY_LEVEL, "2s 3m"])
def test_schedule_units_hold_deliver_times_live_and_after_recovery(
    tmp_path: Path, delay_levels: str, with_c: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not with_c:  # recovery then re-dispatches record by record, not in vectorised batches
        for module in (store.commitlog, store.consume_queue, store.message_encoder,
                       store.message_batch, store.recovery):
            monkeypatch.setattr(module, "_native", None)
    config = dataclasses.replace(small_config(tmp_path / "store"), message_delay_level=delay_levels)
    delays = parse_message_delay_level(delay_levels)
    live_store = MessageStore(config)
    live_store.open()
    try:
        append_mixed(live_store)
        live = {q: units(live_store, SCHEDULE_TOPIC, q) for q in QUEUES}
        for queue_id in QUEUES:
            assert live[queue_id] == expected_units(live_store, queue_id, delays)
            assert len(live[queue_id]) == 40
        assert {tags for _, tags in units(live_store, "TopicTest", 0)} == {tags_code("TagA")}
        image = crash_image(config.store_path_root_dir, tmp_path / "crash")
    finally:
        live_store.close()
    # A crash that also lost the schedule topic's consume queues: recovery re-dispatches them.
    shutil.rmtree(image / "consumequeue" / SCHEDULE_TOPIC)
    recovered = MessageStore(dataclasses.replace(config, store_path_root_dir=image))
    report = recovered.open()
    try:
        assert report.abnormal
        for queue_id in QUEUES:
            assert units(recovered, SCHEDULE_TOPIC, queue_id) == live[queue_id]
        assert {tags for _, tags in units(recovered, "TopicTest", 1)} == {tags_code("TagA")}
    finally:
        recovered.close()


def test_schedule_units_dispatched_at_confirm_offset_hold_deliver_times(tmp_path: Path) -> None:
    # Controller mode dispatches record by record once confirmOffset passes them (dispatch_live).
    live_store = MessageStore(small_config(tmp_path / "s", enable_controller_mode=True))
    live_store.open()
    try:
        append_mixed(live_store)
        live_store.set_confirm_offset(live_store.max_phy_offset)
        delays = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
        for queue_id in QUEUES:
            assert units(live_store, SCHEDULE_TOPIC, queue_id) == expected_units(
                live_store, queue_id, delays
            )
    finally:
        live_store.close()
