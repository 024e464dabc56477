"""Delay-level rules shared by the store and the broker (store/schedule.py), as Java's
ScheduleMessageService, HookUtils and CommitLog.checkMessageAndReturnSize apply them."""

from __future__ import annotations

import pytest

from store.schedule import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    SCHEDULE_TOPIC,
    DelayLevelError,
    corrected_deliver_timestamp,
    deliver_timestamp,
    parse_message_delay_level,
    schedule_tags_code,
    time_up_destination,
    transform_delay_level_message,
)

S, M, H = 1000, 60_000, 3_600_000
DELAYS = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)


def test_default_levels_are_javas_eighteen() -> None:
    assert DELAYS == (
        1 * S, 5 * S, 10 * S, 30 * S, 1 * M, 2 * M, 3 * M, 4 * M, 5 * M, 6 * M, 7 * M, 8 * M,
        9 * M, 10 * M, 20 * M, 30 * M, 1 * H, 2 * H,
    )
    assert parse_message_delay_level("1s 2d") == (S, 2 * 86_400_000)


@pytest.mark.parametrize("text", ["", "1s  5s", "1x", "s", "1.5s", " 1s", "1S"])
def test_bad_delay_level_lists_are_refused(text: str) -> None:
    with pytest.raises(DelayLevelError):
        parse_message_delay_level(text)


@pytest.mark.parametrize(
    ("level", "store_timestamp", "deliver"),
    [
        pytest.param(1, 1_000, 2_000, id="level-1-is-1s"),
        pytest.param(3, 0, 10 * S, id="level-3-is-10s"),
        pytest.param(18, 0, 2 * H, id="last-level"),
        pytest.param(99, 0, 2 * H, id="above-max-is-max"),
        pytest.param(0, 500, 1_500, id="no-level-is-1s-as-java"),
    ],
)
def test_deliver_timestamp(level: int, store_timestamp: int, deliver: int) -> None:
    assert deliver_timestamp(level, store_timestamp, DELAYS) == deliver


@pytest.mark.parametrize(
    ("topic", "delay", "tags_code"),
    [
        pytest.param(SCHEDULE_TOPIC, "2", 10_000 + 5 * S, id="deliver-time"),
        pytest.param(SCHEDULE_TOPIC, "40", 10_000 + 2 * H, id="capped-at-max"),
        pytest.param(SCHEDULE_TOPIC, "0", None, id="level-0-keeps-tag-hash"),
        pytest.param(SCHEDULE_TOPIC, "-1", None, id="negative-keeps-tag-hash"),
        pytest.param(SCHEDULE_TOPIC, None, None, id="no-delay-property"),
        pytest.param(SCHEDULE_TOPIC, "x", None, id="unparsable"),
        pytest.param("TopicTest", "2", None, id="other-topic"),
    ],
)
def test_schedule_tags_code(topic: str, delay: str | None, tags_code: int | None) -> None:
    assert schedule_tags_code(topic, delay, 10_000, DELAYS) == tags_code


@pytest.mark.parametrize(
    ("properties", "sys_flag", "expected_topic", "expected_queue", "expected_properties"),
    [
        pytest.param({"DELAY": "3"}, 0, SCHEDULE_TOPIC, 2,
                     {"DELAY": "3", "REAL_TOPIC": "T", "REAL_QID": "5"}, id="level-3-queue-2"),
        pytest.param({"DELAY": "30"}, 0, SCHEDULE_TOPIC, 17,
                     {"DELAY": "18", "REAL_TOPIC": "T", "REAL_QID": "5"}, id="capped"),
        pytest.param({"DELAY": "1"}, 0x8, SCHEDULE_TOPIC, 0,
                     {"DELAY": "1", "REAL_TOPIC": "T", "REAL_QID": "5"}, id="commit-type"),
        pytest.param({"DELAY": "1"}, 0x4, "T", 5, {"DELAY": "1"}, id="prepared-not-delayed"),
        pytest.param({"DELAY": "0"}, 0, "T", 5, {"DELAY": "0"}, id="level-0"),
        pytest.param({"DELAY": "-1"}, 0, "T", 5, {"DELAY": "-1"}, id="dlq-marker"),
        pytest.param({}, 0, "T", 5, {}, id="no-delay"),
    ],
)
def test_transform_delay_level_message(
    properties: dict[str, str], sys_flag: int, expected_topic: str, expected_queue: int,
    expected_properties: dict[str, str],
) -> None:
    topic, queue_id = transform_delay_level_message(
        "T", 5, properties, sys_flag=sys_flag, max_delay_level=len(DELAYS)
    )
    assert (topic, queue_id, properties) == (expected_topic, expected_queue, expected_properties)


@pytest.mark.parametrize("delay", ["abc", "1.0", " 1", ""])
def test_unparsable_delay_is_an_error_as_parse_int_is(delay: str) -> None:
    with pytest.raises(ValueError, match="DELAY"):
        transform_delay_level_message("T", 0, {"DELAY": delay}, sys_flag=0, max_delay_level=18)


def test_time_up_restores_the_real_destination_and_drops_delay() -> None:
    properties = {"DELAY": "3", "REAL_TOPIC": "T", "REAL_QID": "5", "KEYS": "k"}
    assert time_up_destination(properties) == ("T", 5)
    assert properties == {"REAL_TOPIC": "T", "REAL_QID": "5", "KEYS": "k"}
    with pytest.raises(ValueError, match="real destination"):
        time_up_destination({"DELAY": "3"})


@pytest.mark.parametrize(
    ("deliver", "now", "expected"),
    [
        pytest.param(1_500, 1_000, 1_500, id="in-the-future"),
        pytest.param(500, 1_000, 500, id="overdue"),
        pytest.param(1_000 + S, 1_000, 1_000 + S, id="exactly-one-delay-ahead"),
        pytest.param(1_001 + S, 1_000, 1_000, id="beyond-the-delay-is-now"),
    ],
)
def test_corrected_deliver_timestamp(deliver: int, now: int, expected: int) -> None:
    assert corrected_deliver_timestamp(deliver, now_ms=now, level_delay_ms=S) == expected
