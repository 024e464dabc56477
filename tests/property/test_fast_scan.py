"""`scan_file_fast` gives exactly `scan_file`'s answer, on valid and on damaged logs, with its
common-record check in C (`store._native`) and in numpy (the fallback)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import store.native
import store.recovery
from store.host_port import HostPort
from store.message_encoder import prepare_message, write_record
from store.message_properties import encode_properties
from store.record_check import RecordCheck
from store.record_layout import write_blank
from store.recovery import RecordBatch, scan_file, scan_file_fast

FILE_SIZE = 16 * 1024
FILE_FROM = 5 * FILE_SIZE
V4 = HostPort.from_str("10.0.0.1:1234")
V6 = HostPort.from_str("[2001:db8::1]:1234")

topics = st.sampled_from(["T", "TopicTest", "Topic_é", "%RETRY%" + "g" * 130])
messages = st.tuples(
    topics,
    st.binary(max_size=700),
    st.booleans(),  # IPv6 born host
    st.booleans(),  # property CRC
    st.sampled_from([None, "TagA", "TagB", "", "Tag\u00e9", "a||b"]),
    st.sampled_from([b"", b"TAGS\x01Early\x02", b"XTAGS\x01NotASegment\x02",
                     b"KEYS\x01k1 k2\x02TAGS\x01\x02"]),
)


@st.composite
def logs(draw: st.DrawFn) -> tuple[bytearray, list[int]]:
    buf = bytearray(FILE_SIZE)
    pos = 0
    starts: list[int] = []
    for topic, body, v6, prop_crc, tags, extra in draw(st.lists(messages, max_size=30)):
        props = extra + encode_properties({"TAGS": tags} if tags else {})
        msg = prepare_message(
            topic=topic, queue_id=1, flag=0, body=body, properties=props, sys_flag=0,
            born_timestamp=1, born_host=V6 if v6 else V4, store_host=V4,
            append_prop_crc=prop_crc, max_message_size=1 << 20,
        )
        if pos + msg.total_size + 8 > FILE_SIZE:
            write_blank(buf, pos, FILE_SIZE - pos)
            break
        starts.append(pos)
        pos += write_record(buf, pos, msg, queue_offset=len(starts) - 1,
                            phy_offset=FILE_FROM + pos, store_timestamp=7)
    return buf, starts


damage = st.one_of(
    st.none(),
    st.tuples(st.just("flip"), st.integers(0, FILE_SIZE - 1), st.integers(0, 7)),
    st.tuples(st.just("zero"), st.integers(0, FILE_SIZE - 1), st.integers(1, 600)),
    st.tuples(st.just("random"), st.integers(0, FILE_SIZE - 1), st.binary(min_size=1,
                                                                            max_size=64)),
    st.tuples(st.just("copy"), st.integers(0, 40), st.integers(0, 40)),
    # A flip inside record n at byte k of it: headers are covered only by the record CRC.
    st.tuples(st.just("flip_in"), st.integers(0, 40), st.integers(0, 120), st.integers(0, 7)),
)


@contextlib.contextmanager
def common_check_in(language: str) -> Iterator[None]:
    """Run scan_file_fast's common-record check in "c" or in "numpy"."""
    assert store.native.native is not None, "store._native is not built"
    if language == "c":
        yield
    else:
        with mock.patch.object(store.recovery, "_native", None):
            yield


def _apply(buf: bytearray, starts: list[int], hurt: Any) -> None:
    match hurt:
        case ("flip", at, bit):
            buf[at] ^= 1 << bit
        case ("zero", at, length):
            buf[at:at + length] = bytes(len(buf[at:at + length]))
        case ("random", at, data):
            buf[at:at + len(data)] = data[: len(buf) - at]
        case ("flip_in", n, k, bit) if starts:
            at = starts[n % len(starts)] + k
            if at < len(buf):
                buf[at] ^= 1 << bit
        case ("copy", src, dst) if len(starts) > max(src, dst) + 1:
            a, b = starts[src], starts[src + 1]
            buf[starts[dst]:starts[dst] + (b - a)] = bytes(buf[a:b])
        case _:
            pass


@settings(max_examples=300)
@given(log=logs(), hurt=damage, check_body=st.booleans(), verify_prop=st.booleans(),
       known_every=st.integers(0, 3), language=st.sampled_from(["c", "numpy"]))
def test_fast_scan_equals_exact_scan(
    log: tuple[bytearray, list[int]], hurt: Any, check_body: bool, verify_prop: bool,
    known_every: int, language: str,
) -> None:
    with common_check_in(language):
        _fast_scan_equals_exact_scan(log, hurt, check_body, verify_prop, known_every)


def _fast_scan_equals_exact_scan(
    log: tuple[bytearray, list[int]], hurt: Any, check_body: bool, verify_prop: bool,
    known_every: int,
) -> None:
    buf, starts = log
    _apply(buf, starts, hurt)
    exact_records: list[RecordCheck] = []
    exact = scan_file(buf, file_from_offset=FILE_FROM, file_size=FILE_SIZE,
                      check_body_crc=check_body, verify_prop_crc=verify_prop,
                      on_record=exact_records.append)
    known = np.array(sorted(r.phy_offset for i, r in enumerate(exact_records)
                            if known_every and i % known_every == 0), dtype=np.int64)
    fast_records: list[RecordCheck] = []
    fast = scan_file_fast(buf, file_from_offset=FILE_FROM, file_size=FILE_SIZE,
                          check_body_crc=check_body, verify_prop_crc=verify_prop,
                          on_record=fast_records.append, known_phy_offsets=known)
    assert fast.scan == exact
    assert [int(p) for p in fast.positions] == [r.phy_offset - FILE_FROM for r in exact_records]
    assert [int(s) for s in fast.sizes] == [r.size for r in exact_records]
    assert fast_records == [r for r in exact_records if r.phy_offset not in set(known.tolist())]
    # Bulk mode: batches plus single records give the same fields, in log order.
    rows: list[tuple[object, ...]] = []

    def single(check: RecordCheck) -> None:
        rows.append((check.topic, check.queue_id, check.queue_offset, check.phy_offset,
                     check.size, check.sys_flag, check.store_timestamp, check.tags_code))

    def bulk(batch: RecordBatch) -> None:
        rows.extend(
            (batch.topics[batch.topic_index[i]], int(batch.queue_id[i]),
             int(batch.queue_offset[i]), int(batch.phy_offset[i]), int(batch.size[i]),
             int(batch.sys_flag[i]), int(batch.store_timestamp[i]), int(batch.tags_code[i]))
            for i in range(len(batch.phy_offset))
        )

    bulk_scan = scan_file_fast(buf, file_from_offset=FILE_FROM, file_size=FILE_SIZE,
                               check_body_crc=check_body, verify_prop_crc=verify_prop,
                               on_record=single, on_records=bulk, known_phy_offsets=known)
    assert bulk_scan.scan == exact
    assert rows == [(r.topic, r.queue_id, r.queue_offset, r.phy_offset, r.size, r.sys_flag,
                     r.store_timestamp, r.tags_code)
                    for r in exact_records if r.phy_offset not in set(known.tolist())]


def test_fast_scan_equals_exact_scan_for_every_single_bit_flip() -> None:
    """Exhaustive: every bit of a small mixed log (v4/v6, prop CRC on/off, V2), every flag."""
    buf = bytearray(2048)
    pos = 0
    kinds = [(V4, True, "TopicTest"), (V6, True, "T"), (V4, False, "TagTopic"),
             (V4, True, "%RETRY%" + "g" * 130), (V4, True, "Topic_é")]
    for index, (born, prop_crc, topic) in enumerate(kinds):
        msg = prepare_message(
            topic=topic, queue_id=index, flag=index, body=bytes([index]) * 40,
            properties=encode_properties({"TAGS": "TagA"}), sys_flag=0, born_timestamp=1,
            born_host=born, store_host=V4, append_prop_crc=prop_crc, max_message_size=1 << 20,
        )
        pos += write_record(buf, pos, msg, queue_offset=index, phy_offset=FILE_FROM + pos,
                            store_timestamp=7)
    write_blank(buf, pos, len(buf) - pos)
    flags = [(a, b) for a in (False, True) for b in (False, True)]
    for at in range(pos + 8):
        for bit in range(8):
            buf[at] ^= 1 << bit
            for check_body, verify_prop in flags:
                exact = scan_file(buf, file_from_offset=FILE_FROM, file_size=len(buf),
                                  check_body_crc=check_body, verify_prop_crc=verify_prop)
                for language in ("c", "numpy"):
                    with common_check_in(language):
                        fast = scan_file_fast(buf, file_from_offset=FILE_FROM,
                                              file_size=len(buf), check_body_crc=check_body,
                                              verify_prop_crc=verify_prop)
                    assert fast.scan == exact, (at, bit, check_body, verify_prop, language)
            buf[at] ^= 1 << bit
