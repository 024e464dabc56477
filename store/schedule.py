"""Delay levels: RocketMQ's ScheduleMessageService rules that the store and the broker share.

A message with the `DELAY` property (a delay level, 1-based) is stored in `SCHEDULE_TOPIC_XXXX`,
queue `level - 1`, with its real topic and queue id in the `REAL_TOPIC` / `REAL_QID`
properties. Its consume-queue unit's tagsCode is not a tag hash but its deliver time:
store timestamp + the level's delay (`CommitLog.checkMessageAndReturnSize`, also on recovery
and re-dispatch). The broker's schedule service delivers each level's queue in order when the
head unit's deliver time has come.

`messageDelayLevel` (a MessageStoreConfig key) lists the levels' delays: numbers with a unit
`s`, `m`, `h` or `d`, separated by single spaces; Java's default has 18 levels. A level above
the last is the last (`maxDelayLevel`); a level <= 0 means no delay.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

import numpy as np
import numpy.typing as npt

from store.message_encoder import EncodedMessage, prepare_message
from store.message_properties import PROPERTY_CRC_NAME, encode_properties
from store.record_layout import MessageRecord
from store.transaction_type import takes_queue_offset

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
PROPERTY_DELAY_TIME_LEVEL: Final = "DELAY"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
DEFAULT_MESSAGE_DELAY_LEVEL: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
UNKNOWN_LEVEL_DELAY_MS: Final = 1000  # computeDeliverTimestamp for a level without a delay

_UNIT_MS: Final = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY: Final = re.compile(r"([0-9]{1,12})([smhd])")
_JAVA_INT: Final = re.compile(r"[+-]?[0-9]{1,10}")  # Integer.parseInt, ASCII digits only


class DelayLevelError(ValueError):
    """`messageDelayLevel` does not parse (Java's broker then refuses to start)."""


def parse_message_delay_level(text: str) -> tuple[int, ...]:
    """The delays in ms of levels 1, 2, ... from a `messageDelayLevel` value such as
    "1s 5s 10s 30s 1m". Raises DelayLevelError naming the bad item."""
    delays = []
    for item in text.split(" "):
        match = _DELAY.fullmatch(item)
        if match is None:
            raise DelayLevelError(f"messageDelayLevel item {item!r} is not <number><s|m|h|d>")
        delays.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
    return tuple(delays)


def delay_level_of(properties: Mapping[str, str]) -> int:
    """The `DELAY` property as Java's `getDelayTimeLevel()` reads it: 0 when absent; raises
    ValueError when it is not an integer (Java's NumberFormatException)."""
    text = properties.get(PROPERTY_DELAY_TIME_LEVEL)
    if text is None:
        return 0
    if _JAVA_INT.fullmatch(text) is None or not -(2**31) <= int(text) < 2**31:
        raise ValueError(f"DELAY={text!r} is not an int32")
    return int(text)


def queue_id_of_level(delay_level: int) -> int:
    """`delayLevel2QueueId`: level 1 is queue 0."""
    return delay_level - 1


def deliver_timestamp(delay_level: int, store_timestamp: int, delays_ms: tuple[int, ...]) -> int:
    """`computeDeliverTimestamp`: when a level-`delay_level` message stored at
    `store_timestamp` (ms) is due. Levels above the last count as the last."""
    level = min(delay_level, len(delays_ms))
    if level <= 0:
        return store_timestamp + UNKNOWN_LEVEL_DELAY_MS
    return store_timestamp + delays_ms[level - 1]


def schedule_tags_code(
    topic: str, delay_text: str | None, store_timestamp: int, delays_ms: tuple[int, ...]
) -> int | None:
    """The tagsCode a record's consume-queue unit gets instead of its tag hash, or None to keep
    the tag hash: a `SCHEDULE_TOPIC_XXXX` record with a positive `DELAY` gets its deliver time.
    A `DELAY` that is not an integer keeps the tag hash (Java would refuse the record)."""
    if topic != SCHEDULE_TOPIC or delay_text is None:
        return None
    try:
        level = min(delay_level_of({PROPERTY_DELAY_TIME_LEVEL: delay_text}), len(delays_ms))
    except ValueError:
        return None
    if level <= 0:
        return None
    return deliver_timestamp(level, store_timestamp, delays_ms)


def corrected_deliver_timestamp(deliver_ms: int, *, now_ms: int, level_delay_ms: int) -> int:
    """`correctDeliverTimestamp`: a deliver time further away than the level's whole delay
    (the clock went back, or the delays were shortened) is due now."""
    return now_ms if deliver_ms > now_ms + level_delay_ms else deliver_ms


def due_head(
    deliver_ms: npt.NDArray[np.int64], *, now_ms: int, level_delay_ms: int
) -> tuple[int, int | None]:
    """How many leading units of a level's queue are due at `now_ms`, given their deliver
    times (tagsCodes) in queue order, and when the first unit that is not due will be (None
    when all are due). A unit is due when its `corrected_deliver_timestamp` is not after
    `now_ms`; one call for a whole read of units, no Python per unit."""
    not_due = (deliver_ms > now_ms) & (deliver_ms <= now_ms + level_delay_ms)
    if not not_due.any():
        return len(deliver_ms), None
    head = int(np.argmax(not_due))
    return head, int(deliver_ms[head])


def transform_delay_level_message(
    topic: str, queue_id: int, properties: dict[str, str], *, sys_flag: int, max_delay_level: int
) -> tuple[str, int]:
    """`HookUtils.handleScheduleMessage` for delay levels: where a message is stored.

    A non-transactional (or committed) message with `DELAY` > 0 goes to `SCHEDULE_TOPIC_XXXX`,
    queue `level - 1`, its level capped at `max_delay_level`; `properties` gets `REAL_TOPIC`,
    `REAL_QID` (and the capped `DELAY`) in place. Anything else keeps (topic, queue_id).
    Raises ValueError for a `DELAY` that is not an int32, as Java's parseInt does.
    """
    if not takes_queue_offset(sys_flag):  # Java: TRANSACTION_NOT or COMMIT only
        return topic, queue_id
    level = delay_level_of(properties)
    if level <= 0:
        return topic, queue_id
    if level > max_delay_level:
        level = max_delay_level
        properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    properties[PROPERTY_REAL_TOPIC] = topic
    properties[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return SCHEDULE_TOPIC, queue_id_of_level(level)


def time_up_destination(properties: dict[str, str]) -> tuple[str, int]:
    """`messageTimeUp`: the real topic and queue id of a due message; removes `DELAY` from
    `properties` in place (REAL_TOPIC and REAL_QID stay, as in Java). Raises ValueError if
    either property is missing or REAL_QID is not a number."""
    properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    topic = properties.get(PROPERTY_REAL_TOPIC)
    queue_text = properties.get(PROPERTY_REAL_QUEUE_ID)
    if not topic or queue_text is None or _JAVA_INT.fullmatch(queue_text) is None:
        raise ValueError(f"scheduled message without a real destination: {topic!r} {queue_text!r}")
    return topic, int(queue_text)


def time_up_message(
    record: MessageRecord, *, append_prop_crc: bool, max_message_size: int
) -> EncodedMessage:
    """`messageTimeUp`: the message a due `SCHEDULE_TOPIC_XXXX` record becomes under its real
    topic and queue: same body, flag, sys flag, born timestamp and host, store host and
    reconsume times; its properties re-encoded from their map (as Java does) without `DELAY`.
    Raises ValueError (no real destination, `time_up_destination`) or MessageIllegalError.

    With the property CRC on, the stored `__CRC32#` entry is dropped from the map before the
    encoding: `prepare_message` would drop that segment anyway (`normalize_properties`), and
    without it the message takes the one-call C encoder instead of the Python path.
    """
    properties = record.properties_map()
    topic, queue_id = time_up_destination(properties)
    if append_prop_crc:
        properties.pop(PROPERTY_CRC_NAME, None)
    return prepare_message(
        topic=topic, queue_id=queue_id, flag=record.flag, body=record.body,
        properties=encode_properties(properties), sys_flag=record.sys_flag,
        born_timestamp=record.born_timestamp, born_host=record.born_host,
        store_host=record.store_host, reconsume_times=record.reconsume_times,
        append_prop_crc=append_prop_crc, max_message_size=max_message_size,
    )


def unit_tags_code(
    topic: str, queue_id: int, store_timestamp: int, tags_code: int, delays_ms: tuple[int, ...]
) -> int:
    """The tagsCode of a record's consume-queue unit: its tag hash `tags_code`, except in
    `SCHEDULE_TOPIC_XXXX`, where it is the deliver time.

    Java derives the level from the record's `DELAY` property; every schedule-topic record
    holds DELAY = queue id + 1 (`transform_delay_level_message` caps the level, then picks the
    queue; clients may not send to the topic), so the level is read from the queue id, which
    the record check already has, with the same cap at the last level.
    """
    if topic != SCHEDULE_TOPIC:
        return tags_code
    return deliver_timestamp(queue_id + 1, store_timestamp, delays_ms)


DEFAULT_DELAYS_MS: Final = parse_message_delay_level(DEFAULT_MESSAGE_DELAY_LEVEL)
