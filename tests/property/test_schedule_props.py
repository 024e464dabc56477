"""Delay-level delivery rules for every input: the vectorised due check equals the per-unit rule,
and the time-up re-encoding equals Java's map round trip through the Python encoder."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from store.host_port import HostPort
from store.message_decoder import make_record
from store.message_encoder import prepare_message_python
from store.message_properties import PROPERTY_CRC_NAME, encode_properties
from store.schedule import (
    SCHEDULE_TOPIC,
    corrected_deliver_timestamp,
    due_head,
    time_up_destination,
    time_up_message,
)

NOW_MS = 1_700_000_000_000
HOST = HostPort(bytes([127, 0, 0, 1]), 10911)
HOST6 = HostPort(bytes(range(16)), 10911)


def naive_due_head(deliver_ms: list[int], *, now_ms: int,
                   level_delay_ms: int) -> tuple[int, int | None]:
    for index, tags_code in enumerate(deliver_ms):
        corrected = corrected_deliver_timestamp(tags_code, now_ms=now_ms,
                                                level_delay_ms=level_delay_ms)
        if corrected > now_ms:
            return index, corrected
    return len(deliver_ms), None


@given(
    offsets=st.lists(st.one_of(st.integers(-3_000, 6_000),
                               st.sampled_from([-1, 0, 1, 999, 1_000, 1_001, 5_000, 5_001])),
                     max_size=40),
    level_delay_ms=st.sampled_from([1, 1_000, 5_000]),
)
def test_due_head_is_the_per_unit_rule(offsets: list[int], level_delay_ms: int) -> None:
    deliver_ms = [NOW_MS + offset for offset in offsets]
    assert due_head(np.array(deliver_ms, dtype=np.int64), now_ms=NOW_MS,
                    level_delay_ms=level_delay_ms) == \
        naive_due_head(deliver_ms, now_ms=NOW_MS, level_delay_ms=level_delay_ms)


_NAMES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", PROPERTY_CRC_NAME, "a", "", "é"])
_VALUES = st.text(st.characters(blacklist_characters="\x02", blacklist_categories=["Cs"]),
                  max_size=6)


@st.composite
def scheduled_properties(draw: st.DrawFn) -> bytes:
    """Raw PROPERTIES as a client may have sent them (duplicates, empty names or values, stray
    bytes), with a real destination somewhere."""
    entries = draw(st.lists(st.tuples(_NAMES, _VALUES), max_size=6))
    entries.insert(draw(st.integers(0, len(entries))), ("REAL_TOPIC", "T"))
    entries.insert(draw(st.integers(0, len(entries))), ("REAL_QID", "3"))
    raw = b"".join(f"{name}\x01{value}\x02".encode() for name, value in entries)
    return raw + draw(st.sampled_from([b"", b"junk", b"\xff\x02", b"__CRC32#\x010000000042\x02"]))


@given(
    raw_properties=scheduled_properties(),
    append_prop_crc=st.booleans(),
    v6=st.booleans(),
    reconsume_times=st.integers(0, 20),
)
def test_time_up_message_is_the_map_round_trip(raw_properties: bytes, append_prop_crc: bool,
                                               v6: bool, reconsume_times: int) -> None:
    record = make_record(
        topic=SCHEDULE_TOPIC, body=b"body", properties=raw_properties, born_host=HOST,
        store_host=HOST6 if v6 else HOST, queue_id=2, flag=7, sys_flag=0, born_timestamp=5,
        store_timestamp=NOW_MS, reconsume_times=reconsume_times,
    )
    # The reference: Java's messageTimeUp as the broker wrote it before (the whole map, the
    # Python encoder, which drops the stored `__CRC32#` entry itself).
    properties = record.properties_map()
    topic, queue_id = time_up_destination(properties)
    expected = prepare_message_python(
        topic=topic, queue_id=queue_id, flag=record.flag, body=record.body,
        properties=encode_properties(properties), sys_flag=record.sys_flag,
        born_timestamp=record.born_timestamp, born_host=record.born_host,
        store_host=record.store_host, reconsume_times=record.reconsume_times,
        append_prop_crc=append_prop_crc, max_message_size=1 << 20,
    )
    assert time_up_message(record, append_prop_crc=append_prop_crc,
                           max_message_size=1 << 20) == expected
