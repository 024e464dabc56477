"""Commitlog record codec, for every input: hot path == cold path == construct spec."""

from __future__ import annotations

import dataclasses
import string
from typing import Any

import numpy as np
from hypothesis import assume, event, given
from hypothesis import strategies as st

from store.consume_queue import CQ_UNIT, CQ_UNIT_STRUCT
from store.errors import MessageIllegalError
from store.host_port import HostPort, offset_msg_id, offset_msg_ids
from store.message_batch import (
    BATCH_ENTRY_SPEC,
    EncodedBatch,
    decode_batch_body,
    prepare_batch,
    prepare_batch_body,
    write_batch,
    write_batch_python,
)
from store.message_decoder import decode_record, encode_record, make_record
from store.message_encoder import (
    EncodedMessage,
    encoded_topic,
    prepare_message,
    prepare_message_python,
    write_record,
    write_record_python,
)
from store.message_properties import (
    PROPERTY_CRC_NAME,
    encode_properties,
    encode_properties_python,
    java_string_hash,
    normalize_properties,
    parse_properties,
    tags_code,
)
from store.message_sys_flag import HOST_V6_FLAGS
from store.native import native
from store.record_check import CheckStatus, check_record
from store.record_layout import MAGIC_CODE_V1, MAGIC_CODE_V2, RECORD_SPEC, MessageRecord

MAX_MESSAGE_SIZE = 1024 * 1024

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
ports = st.integers(0, 65535)
hosts = st.one_of(
    st.builds(HostPort, st.binary(min_size=4, max_size=4), ports),
    st.builds(HostPort, st.binary(min_size=16, max_size=16), ports),
)
TOPIC_CHARS = string.ascii_letters + string.digits + "%|_-"
# Any character UTF-8 can encode (no lone surrogates).
unicode_chars = st.characters(codec="utf-8")
topics = st.one_of(
    st.text(TOPIC_CHARS, min_size=1, max_size=127),
    # Unicode topics: V1, or V2 once the UTF-8 bytes exceed 127.
    st.text(unicode_chars, min_size=1, max_size=127),
    st.text(unicode_chars, min_size=64, max_size=127),
    # POP retry topics beyond 127 chars: V2.
    st.text(TOPIC_CHARS, min_size=121, max_size=248).map(lambda t: "%RETRY%" + t),
)
bodies = st.one_of(st.just(b""), st.binary(max_size=2000))
property_names = st.text(
    unicode_chars.filter(lambda c: c not in "\x01\x02"), min_size=1, max_size=12
)
property_values = st.text(unicode_chars.filter(lambda c: c != "\x02"), min_size=1, max_size=40)
property_maps = st.dictionaries(
    st.one_of(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", PROPERTY_CRC_NAME]), property_names),
    property_values,
    max_size=6,
)
# Raw property strings made of the pieces that matter to the parsing rules.
raw_properties = st.lists(
    st.sampled_from(
        [b"TAGS", b"__CRC32#", b"\x01", b"\x02", b"a", b"B", "\u00e9".encode(), b"\xff"]
    ),
    max_size=16,
).map(b"".join)
properties = st.one_of(property_maps.map(encode_properties), raw_properties)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments of prepare_message, without the limits."""
    return {
        "topic": draw(topics),
        "queue_id": draw(i32),
        "flag": draw(i32),
        "body": draw(bodies),
        "properties": draw(properties),
        "sys_flag": draw(i32),
        "born_timestamp": draw(i64),
        "born_host": draw(hosts),
        "store_host": draw(hosts),
        "reconsume_times": draw(i32),
        "prepared_transaction_offset": draw(i64),
    }


def written(buf_size_extra: int, write: Any, size: int) -> bytes:
    buf = bytearray(b"\xee" * (size + buf_size_extra))
    assert write(buf, 7) == size
    assert buf[:7] == b"\xee" * 7
    assert buf[7 + size :] == b"\xee" * (buf_size_extra - 7)
    return bytes(buf[7 : 7 + size])


def spec_fields(record: MessageRecord) -> dict[str, Any]:
    return dataclasses.asdict(record)


def expected_record(
    message: dict[str, Any],
    *,
    append_prop_crc: bool,
    queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
) -> MessageRecord:
    """The record the broker should store, built on the cold path."""
    fields = dict(message)
    raw = fields.pop("properties")
    return make_record(
        **fields,
        properties=normalize_properties(raw) if append_prop_crc else raw,
        queue_offset=queue_offset,
        phy_offset=phy_offset,
        store_timestamp=store_timestamp,
        append_prop_crc=append_prop_crc,
    )


@given(
    message=messages(),
    append_prop_crc=st.booleans(),
    queue_offset=i64,
    phy_offset=i64,
    store_timestamp=i64,
)
def test_write_record_equals_make_record_and_the_spec(
    message: dict[str, Any],
    append_prop_crc: bool,
    queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
) -> None:
    msg = prepare_message(
        **message, append_prop_crc=append_prop_crc, max_message_size=MAX_MESSAGE_SIZE
    )
    got = written(
        20,
        lambda buf, pos: write_record(
            buf,
            pos,
            msg,
            queue_offset=queue_offset,
            phy_offset=phy_offset,
            store_timestamp=store_timestamp,
        ),
        msg.total_size,
    )
    record = expected_record(
        message,
        append_prop_crc=append_prop_crc,
        queue_offset=queue_offset,
        phy_offset=phy_offset,
        store_timestamp=store_timestamp,
    )
    assert got == encode_record(record)
    assert got == RECORD_SPEC.build(spec_fields(record))
    assert decode_record(got) == record
    expected_magic = (
        MAGIC_CODE_V2
        if len(message["topic"]) > 127 or len(message["topic"].encode()) > 127
        else MAGIC_CODE_V1
    )
    assert record.magic_code == expected_magic
    assert (
        record.sys_flag & 0x30 == message["born_host"].is_v6 << 4 | message["store_host"].is_v6 << 5
    )
    result = check_record(
        got,
        0,
        limit=len(got),
        expected_phy_offset=phy_offset,
        check_body_crc=True,
        verify_prop_crc=append_prop_crc,
    )
    assert result.status is CheckStatus.VALID, result.reason
    assert (result.size, result.topic, result.queue_id, result.queue_offset) == (
        msg.total_size,
        message["topic"],
        message["queue_id"],
        queue_offset,
    )
    assert (result.store_timestamp, result.sys_flag, result.phy_offset) == (
        store_timestamp,
        msg.sys_flag,
        phy_offset,
    )
    expected_tags_code = tags_code(parse_properties(record.properties).get("TAGS"))
    assert result.tags_code == msg.tags_code == expected_tags_code


@st.composite
def records(draw: st.DrawFn, *, append_prop_crc: bool | None = None) -> MessageRecord:
    """Consistent records, either magic code where the topic fits V1."""
    message = draw(messages())
    topic_bytes = len(message["topic"].encode())
    magic_code = draw(
        st.sampled_from([MAGIC_CODE_V1, MAGIC_CODE_V2] if topic_bytes <= 127 else [MAGIC_CODE_V2])
    )
    if append_prop_crc is None:
        append_prop_crc = draw(st.booleans())
    if append_prop_crc:
        message["properties"] = normalize_properties(message["properties"])
    return make_record(
        **message,
        magic_code=magic_code,
        queue_offset=draw(i64),
        phy_offset=draw(i64),
        store_timestamp=draw(i64),
        append_prop_crc=append_prop_crc,
    )


@given(record=records())
def test_decode_inverts_encode(record: MessageRecord) -> None:
    encoded = encode_record(record)
    assert decode_record(encoded) == record
    assert decode_record(b"xyz" + encoded, 3) == record
    parsed = RECORD_SPEC.parse(encoded)
    assert parsed.body == record.body
    assert parsed.topic == record.topic
    assert parsed.properties == record.properties
    assert HostPort(parsed.store_host.ip, parsed.store_host.port) == record.store_host


@given(
    topic=st.text(TOPIC_CHARS, min_size=1, max_size=127),
    inner=st.lists(st.tuples(i32, bodies, properties), min_size=1, max_size=6),
    sys_flag=i32,
    born_timestamp=i64,
    born_host=hosts,
    store_host=hosts,
    reconsume_times=i32,
    append_prop_crc=st.booleans(),
    first_queue_offset=st.integers(0, 2**40),
    phy_offset=st.integers(0, 2**50),
)
def test_write_batch_equals_the_single_records_back_to_back(
    topic: str,
    inner: list[tuple[int, bytes, bytes]],
    sys_flag: int,
    born_timestamp: int,
    born_host: HostPort,
    store_host: HostPort,
    reconsume_times: int,
    append_prop_crc: bool,
    first_queue_offset: int,
    phy_offset: int,
) -> None:
    common: dict[str, Any] = {
        "topic": topic,
        "queue_id": 3,
        "sys_flag": sys_flag,
        "born_timestamp": born_timestamp,
        "born_host": born_host,
        "store_host": store_host,
        "reconsume_times": reconsume_times,
        "append_prop_crc": append_prop_crc,
        "max_message_size": MAX_MESSAGE_SIZE,
    }
    batch = prepare_batch(inner=inner, **common)
    got = written(
        9,
        lambda buf, pos: write_batch(
            buf,
            pos,
            batch,
            first_queue_offset=first_queue_offset,
            phy_offset=phy_offset,
            store_timestamp=5,
        ),
        batch.total_size,
    )
    expected = []
    offset = phy_offset
    for index, (flag, body, props) in enumerate(inner):
        msg = prepare_message(flag=flag, body=body, properties=props, **common)
        record = written(
            7,
            lambda buf, pos, msg=msg, offset=offset, index=index: write_record(
                buf,
                pos,
                msg,
                queue_offset=first_queue_offset + index,
                phy_offset=offset,
                store_timestamp=5,
            ),
            msg.total_size,
        )
        assert batch.tags_codes[index] == msg.tags_code
        expected.append(record)
        offset += len(record)
    assert got == b"".join(expected)
    assert batch.sizes.tolist() == [len(r) for r in expected]
    assert batch.count == len(inner)
    assert batch.total_size == offset - phy_offset


def java_properties_twin(text: str) -> dict[str, str]:
    """`string2messageProperties` transcribed index by index (the naive twin of the parser)."""
    result: dict[str, str] = {}
    index = 0
    while index < len(text):
        new_index = text.find("\x02", index)
        if new_index < 0:
            new_index = len(text)
        if new_index - index >= 3:
            kv_index = text.find("\x01", index)
            if index < kv_index < new_index - 1:
                result[text[index:kv_index]] = text[kv_index + 1 : new_index]
        index = new_index + 1
    return result


@given(raw=st.one_of(raw_properties, st.binary(max_size=60)))
def test_parse_properties_matches_the_java_loop(raw: bytes) -> None:
    assert parse_properties(raw) == java_properties_twin(raw.decode("utf-8", "replace"))


@given(props=property_maps.filter(lambda m: PROPERTY_CRC_NAME not in m))
def test_parse_inverts_encode_properties(props: dict[str, str]) -> None:
    assert parse_properties(encode_properties(props)) == props


@given(raw=st.one_of(raw_properties, property_maps.map(encode_properties)))
def test_normalize_properties_drops_only_the_crc_property(raw: bytes) -> None:
    normalized = normalize_properties(raw)
    expected = {k: v for k, v in parse_properties(raw).items() if k != PROPERTY_CRC_NAME}
    assert parse_properties(normalized) == expected
    assert normalized == b"" or normalized.endswith(b"\x02")
    assert not any(s.startswith(b"__CRC32#\x01") for s in normalized.split(b"\x02"))
    assert normalize_properties(normalized) == normalized


@given(raw=raw_properties, append_prop_crc=st.booleans())
def test_tags_code_is_the_hash_of_the_tags_java_parses(raw: bytes, append_prop_crc: bool) -> None:
    msg = prepare_message(
        topic="T",
        queue_id=0,
        flag=0,
        body=b"",
        properties=raw,
        sys_flag=0,
        born_timestamp=0,
        born_host=HostPort(bytes(4), 1),
        store_host=HostPort(bytes(4), 2),
        append_prop_crc=append_prop_crc,
        max_message_size=MAX_MESSAGE_SIZE,
    )
    expected = tags_code(parse_properties(msg.properties).get("TAGS"))
    assert msg.tags_code == expected
    buf = bytearray(msg.total_size)
    write_record(buf, 0, msg, queue_offset=0, phy_offset=0, store_timestamp=0)
    result = check_record(
        buf, 0, limit=len(buf), expected_phy_offset=0, check_body_crc=True, verify_prop_crc=False
    )
    assert result.tags_code == expected


@given(text=st.text(unicode_chars, max_size=30))
def test_java_string_hash_matches_the_polynomial(text: str) -> None:
    units = text.encode("utf-16-be")
    codes = [int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2)]
    value = sum(c * 31 ** (len(codes) - 1 - i) for i, c in enumerate(codes)) % 2**32
    assert java_string_hash(text) == (value - 2**32 if value >= 2**31 else value)


@given(
    data=st.binary(max_size=400),
    pos=st.integers(0, 400),
    limit_cut=st.integers(0, 400),
    check_body_crc=st.booleans(),
    verify_prop_crc=st.booleans(),
    expected_phy_offset=st.one_of(st.none(), i64),
)
def test_check_record_never_raises_on_arbitrary_bytes(
    data: bytes,
    pos: int,
    limit_cut: int,
    check_body_crc: bool,
    verify_prop_crc: bool,
    expected_phy_offset: int | None,
) -> None:
    assume(pos <= len(data))
    limit = max(pos, len(data) - limit_cut)
    result = check_record(
        data,
        pos,
        limit=limit,
        expected_phy_offset=expected_phy_offset,
        check_body_crc=check_body_crc,
        verify_prop_crc=verify_prop_crc,
    )
    assert (result.size == 0) == (result.status is CheckStatus.INVALID)
    assert pos + result.size <= limit


def check_all(buf: bytes | bytearray, *, verify_prop_crc: bool) -> CheckStatus:
    return check_record(
        buf,
        0,
        limit=len(buf),
        expected_phy_offset=None,
        check_body_crc=True,
        verify_prop_crc=verify_prop_crc,
    ).status


@given(
    record=records(append_prop_crc=True),
    damage=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_damaged_records_never_raise_and_fail_the_record_crc(
    record: MessageRecord, damage: list[tuple[int, int]]
) -> None:
    encoded = encode_record(record)
    assert check_all(encoded, verify_prop_crc=True) is CheckStatus.VALID
    damaged = bytearray(encoded)
    for where, value in damage:
        damaged[where % len(damaged)] = value
    assume(damaged != encoded)
    check_all(damaged, verify_prop_crc=False)  # may pass: only the body is covered then
    assert check_all(damaged, verify_prop_crc=True) is CheckStatus.INVALID


@given(inner=st.lists(st.tuples(i32, st.binary(max_size=50), properties), max_size=5))
def test_decode_batch_body_inverts_the_spec(inner: list[tuple[int, bytes, bytes]]) -> None:
    body = b"".join(
        BATCH_ENTRY_SPEC.build(
            {
                "total_size": 22 + len(b) + len(p),
                "magic_code": 0,
                "body_crc": 0,
                "flag": f,
                "body": b,
                "properties": p,
            }
        )
        for f, b, p in inner
    )
    assert decode_batch_body(body) == inner


@given(data=st.binary(max_size=120))
def test_decode_batch_body_on_arbitrary_bytes_returns_or_refuses(data: bytes) -> None:
    try:
        messages_ = decode_batch_body(data)
    except MessageIllegalError:
        return
    assert sum(22 + len(b) + len(p) for _, b, p in messages_) == len(data)


# ---------------------------------------------------------------- C writers == Python writers

CRC_IMPLEMENTATIONS = (
    native.supported_crc32_implementations() if native is not None else ("python",)
)


@given(
    message=messages(),
    append_prop_crc=st.booleans(),
    queue_offset=i64,
    phy_offset=i64,
    store_timestamp=i64,
    implementation=st.sampled_from(CRC_IMPLEMENTATIONS),
)
def test_write_record_in_c_equals_python(
    message: dict[str, Any],
    append_prop_crc: bool,
    queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
    implementation: str,
) -> None:
    assert native is not None, "store._native is not built"
    msg = prepare_message(
        **message, append_prop_crc=append_prop_crc, max_message_size=MAX_MESSAGE_SIZE
    )
    offsets = {"queue_offset": queue_offset, "phy_offset": phy_offset,
               "store_timestamp": store_timestamp}
    previous = native.set_crc32_implementation(implementation)
    try:
        got = written(20, lambda buf, pos: native.write_record(
            buf, pos, msg.template, queue_offset, phy_offset, store_timestamp,
            msg.store_timestamp_at, append_prop_crc), msg.total_size)
    finally:
        native.set_crc32_implementation(previous)
    assert got == written(
        20, lambda buf, pos: write_record_python(buf, pos, msg, **offsets), msg.total_size)


@given(
    message=messages(),
    append_prop_crc=st.booleans(),
    out_of_range=st.sampled_from([None, "queue_id", "flag", "sys_flag", "reconsume_times",
                                  "born_timestamp", "prepared_transaction_offset"]),
    implementation=st.sampled_from(CRC_IMPLEMENTATIONS),
)
def test_prepare_message_in_c_equals_python(
    message: dict[str, Any], append_prop_crc: bool, out_of_range: str | None,
    implementation: str,
) -> None:
    """The C encoding (`_native.encode_message`, or its hand-back to Python) gives the same
    EncodedMessage, template bytes included, or the same refusal."""
    assert native is not None, "store._native is not built"
    if out_of_range is not None:
        wide = out_of_range in ("born_timestamp", "prepared_transaction_offset")
        message = {**message, out_of_range: (1 << 63) if wide else -(1 << 31) - 1}
    kwargs = {**message, "append_prop_crc": append_prop_crc,
              "max_message_size": MAX_MESSAGE_SIZE}
    previous = native.set_crc32_implementation(implementation)
    try:
        got: EncodedMessage | str = prepare_message(**kwargs)
    except MessageIllegalError as err:
        got = str(err)
    finally:
        native.set_crc32_implementation(previous)
    try:
        expected: EncodedMessage | str = prepare_message_python(**kwargs)
    except MessageIllegalError as err:
        expected = str(err)
    assert got == expected
    assert isinstance(got, str) == (out_of_range is not None)


@given(
    message=messages(),
    append_prop_crc=st.booleans(),
    out_of_range=st.one_of(st.none(), st.sampled_from([
        "queue_id", "flag", "sys_flag", "reconsume_times", "born_timestamp",
        "prepared_transaction_offset"])),
    queue_offset=i64,
    phy_offset=i64,
    store_timestamp=i64,
    room=st.integers(-8, 40),
    with_unit=st.booleans(),
    implementation=st.sampled_from(CRC_IMPLEMENTATIONS),
)
def test_append_message_in_c_equals_prepare_and_write_in_python(
    message: dict[str, Any], append_prop_crc: bool, out_of_range: str | None,
    queue_offset: int, phy_offset: int, store_timestamp: int, room: int, with_unit: bool,
    implementation: str,
) -> None:
    """`_native.append_message` (a send's one call) writes the record `prepare_message_python`
    and `write_record_python` write, and the unit `ConsumeQueue.put` writes; or it answers None
    having written nothing, exactly where `encode_message` leaves the message to Python or the
    record and the 8-byte end-of-file minimum do not fit (`room` < 0); the clock is read
    once for a record written, never for one left to the caller."""
    assert native is not None, "store._native is not built"
    if out_of_range is not None:
        wide = out_of_range in ("born_timestamp", "prepared_transaction_offset")
        message = {**message, out_of_range: (1 << 63) if wide else -(1 << 31) - 1}
    try:
        expected: EncodedMessage | None = prepare_message_python(
            **message, append_prop_crc=append_prop_crc, max_message_size=MAX_MESSAGE_SIZE)
    except MessageIllegalError:
        expected = None
    magic_code, topic_part = encoded_topic(message["topic"], False)
    born, store = message["born_host"], message["store_host"]
    stored_sys_flag = (message["sys_flag"] & ~HOST_V6_FLAGS) | \
        (len(born.ip) == 16) << 4 | (len(store.ip) == 16) << 5
    fields = (message["body"], message["properties"], topic_part, magic_code,
              message["queue_id"], message["flag"])
    rest = (message["born_timestamp"], born.packed, store.packed, message["reconsume_times"],
            message["prepared_transaction_offset"], append_prop_crc)
    c_encodes = native.encode_message(*fields, stored_sys_flag, *rest) is not None
    size = expected.total_size if expected is not None else 200
    buf = bytearray(b"\xee" * max(7, 7 + size + 8 + room))
    cq = bytearray(b"\xdd" * 26)
    clock_reads: list[int] = []

    def clock() -> int:
        clock_reads.append(store_timestamp)
        return store_timestamp

    previous = native.set_crc32_implementation(implementation)
    try:
        got = native.append_message(
            buf, 7, *fields, message["sys_flag"], *rest, queue_offset, phy_offset, clock,
            -(2**63), cq if with_unit else None, 3)
    finally:
        native.set_crc32_implementation(previous)
    event("left to the caller" if not c_encodes or room < 0 else "written by C")
    if not c_encodes or room < 0:
        assert got is None
        assert clock_reads == []
        assert buf == b"\xee" * len(buf)
        assert cq == b"\xdd" * len(cq)
        return
    assert expected is not None  # what C encodes, Python encodes
    assert got == (expected.total_size, expected.tags_code, store_timestamp)
    assert clock_reads == [store_timestamp]
    assert buf[:7] == b"\xee" * 7
    assert buf[7 + size :] == b"\xee" * (8 + room)
    assert bytes(buf[7 : 7 + size]) == written(20, lambda out, pos: write_record_python(
        out, pos, expected, queue_offset=queue_offset, phy_offset=phy_offset,
        store_timestamp=store_timestamp), size)
    unit = CQ_UNIT_STRUCT.pack(phy_offset, size, expected.tags_code) if with_unit else \
        b"\xdd" * 20
    assert cq == b"\xdd" * 3 + unit + b"\xdd" * 3


# Strings made of what the encoding rules care about: separators, multi-byte UTF-8, and a lone
# surrogate (which UTF-8 cannot encode).
property_texts = st.lists(
    st.sampled_from(["a", "TAGS", "\x01", "\x02", "\u00e9", "\U0001f600", "\ud800", ""]),
    max_size=5,
).map("".join)


@given(props=st.one_of(property_maps, st.dictionaries(property_texts, property_texts,
                                                      max_size=5)))
def test_encode_properties_in_c_equals_python(props: dict[str, str]) -> None:
    """`_native.encode_properties` gives Python's bytes, and None exactly where Python refuses
    (a separator in a name or value, a string UTF-8 cannot encode); `encode_properties` then
    refuses as Python does."""
    assert native is not None, "store._native is not built"
    expected: bytes | str
    try:
        expected = encode_properties_python(props)
    except (MessageIllegalError, UnicodeEncodeError) as err:
        expected = repr(err)
    got = native.encode_properties(props)
    assert got == (expected if isinstance(expected, bytes) else None)
    try:
        via_wrapper: bytes | str = encode_properties(props)
    except (MessageIllegalError, UnicodeEncodeError) as err:
        via_wrapper = repr(err)
    assert via_wrapper == expected


@given(
    inner=st.lists(st.tuples(i32, st.one_of(bodies, st.sampled_from([b"x" * 1024, b"y" * 300])),
                             properties), min_size=1, max_size=8),
    born_host=hosts,
    store_host=hosts,
    append_prop_crc=st.booleans(),
    first_queue_offset=i64.filter(lambda n: n < 2**63 - 8),
    phy_offset=st.integers(0, 2**60),
    store_timestamp=i64,
    implementation=st.sampled_from(CRC_IMPLEMENTATIONS),
)
def test_write_batch_in_c_equals_python(
    inner: list[tuple[int, bytes, bytes]],
    born_host: HostPort,
    store_host: HostPort,
    append_prop_crc: bool,
    first_queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
    implementation: str,
) -> None:
    assert native is not None, "store._native is not built"
    batch = prepare_batch(
        topic="T", queue_id=0, inner=inner, sys_flag=0, born_timestamp=1, born_host=born_host,
        store_host=store_host, append_prop_crc=append_prop_crc, max_message_size=1 << 20,
    )
    offsets = {"first_queue_offset": first_queue_offset, "phy_offset": phy_offset,
               "store_timestamp": store_timestamp}
    previous = native.set_crc32_implementation(implementation)
    try:
        got = written(9, lambda buf, pos: native.write_batch(
            buf, pos, batch.template, batch.sizes, first_queue_offset, phy_offset,
            store_timestamp, batch.store_timestamp_at, append_prop_crc), batch.total_size)
    finally:
        native.set_crc32_implementation(previous)
    assert got == written(
        9, lambda buf, pos: write_batch_python(buf, pos, batch, **offsets), batch.total_size)


@given(
    sizes=st.lists(st.integers(1, 2**31 - 1), min_size=1, max_size=40),
    tags_codes=st.lists(i64, min_size=40, max_size=40),
    phy_offset=st.integers(0, 2**62),
)
def test_put_cq_units_in_c_equals_numpy(sizes: list[int], tags_codes: list[int],
                                        phy_offset: int) -> None:
    assert native is not None, "store._native is not built"
    size_array = np.array(sizes, np.int32)
    tags = np.array(tags_codes[: len(sizes)], np.int64)
    buf = bytearray(b"\xee" * (len(sizes) * 20 + 7))
    end = native.put_cq_units(buf, 3, phy_offset, size_array, tags)
    assert end == phy_offset + sum(sizes)
    expected = np.zeros(len(sizes), CQ_UNIT)
    expected["phy_offset"] = phy_offset + np.concatenate(([0], np.cumsum(sizes)[:-1]))
    expected["size"] = sizes
    expected["tags_code"] = tags
    assert buf[:3] == b"\xee" * 3
    assert bytes(buf[3 : 3 + len(sizes) * 20]) == expected.tobytes()
    assert buf[3 + len(sizes) * 20 :] == b"\xee" * 4


def _batch_body(inner: list[tuple[int, bytes, bytes]]) -> bytes:
    return b"".join(
        BATCH_ENTRY_SPEC.build({"total_size": 22 + len(b) + len(p), "magic_code": 0,
                                "body_crc": 0, "flag": f, "body": b, "properties": p})
        for f, b, p in inner
    )


def _outcome(prepare: Any, **kwargs: Any) -> tuple[Any, ...]:
    try:
        batch = prepare(**kwargs)
    except MessageIllegalError as err:
        return ("refused", str(err))
    return (batch.topic, batch.queue_id, batch.count, batch.total_size, batch.sizes.tolist(),
            batch.tags_codes.tolist(), batch.sys_flag, batch.append_prop_crc, batch.bounds,
            batch.template, batch.store_timestamp_at)


ascii_tags = st.text(string.ascii_letters + string.digits + "|| *", min_size=1, max_size=20)
batch_properties = st.one_of(
    properties,
    st.dictionaries(st.sampled_from(["TAGS", "KEYS", "a"]), ascii_tags, max_size=3)
    .map(encode_properties),
)


@given(
    inner=st.lists(st.tuples(i32, st.one_of(bodies, st.sampled_from([b"z" * 1024])),
                             batch_properties), max_size=6),
    damage=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                     st.integers(0, 10**6)),
    queue_id=st.one_of(i32, st.sampled_from([2**31, -(2**31) - 1])),
    sys_flag=i32,
    born_timestamp=i64,
    born_host=hosts,
    store_host=hosts,
    reconsume_times=st.one_of(i32, st.just(2**31)),
    append_prop_crc=st.booleans(),
    max_message_size=st.sampled_from([MAX_MESSAGE_SIZE, 3000]),
)
def test_prepare_batch_body_equals_decode_then_prepare(
    inner: list[tuple[int, bytes, bytes]],
    damage: tuple[int, int] | int | None,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: HostPort,
    store_host: HostPort,
    reconsume_times: int,
    append_prop_crc: bool,
    max_message_size: int,
) -> None:
    """The C path of a batch body takes the common case and leaves the rest (malformed bodies,
    properties to normalise, non-ASCII tags, out-of-range fields) to Python: either way the
    same batch, or the same refusal."""
    body = _batch_body(inner)
    if isinstance(damage, tuple) and body:
        at, byte = damage
        body = body[: at % len(body)] + bytes([byte]) + body[at % len(body) + 1 :]
    elif isinstance(damage, int):
        body = body[: damage % (len(body) + 1)]  # truncated
    common: dict[str, Any] = {
        "topic": "TopicTest", "queue_id": queue_id, "sys_flag": sys_flag,
        "born_timestamp": born_timestamp, "born_host": born_host, "store_host": store_host,
        "reconsume_times": reconsume_times, "append_prop_crc": append_prop_crc,
        "max_message_size": max_message_size,
    }

    def reference(**kwargs: Any) -> EncodedBatch:
        return prepare_batch(inner=decode_batch_body(kwargs.pop("body")), **kwargs)

    assert _outcome(prepare_batch_body, body=body, **common) == _outcome(
        reference, body=body, **common)


@given(inner=st.lists(st.tuples(i32, bodies, batch_properties), min_size=1, max_size=6),
       append_prop_crc=st.booleans())
def test_batch_body_is_plain_only_for_what_encode_batch_takes(
    inner: list[tuple[int, bytes, bytes]], append_prop_crc: bool
) -> None:
    assert native is not None, "store._native is not built"
    body = _batch_body(inner)
    stored_as_sent = all(
        not append_prop_crc or ((not p or p[-1] == 2) and b"__CRC32#\x01" not in p)
        for _, _, p in inner
    )
    assert native.batch_body_is_plain(body, append_prop_crc) == stored_as_sent
    assert native.batch_body_is_plain(body[:-1], append_prop_crc) is False  # truncated


@given(store_host=hosts, offsets=st.lists(st.integers(0, 2**63 - 1), max_size=40))
def test_offset_msg_ids_joins_offset_msg_id(store_host: HostPort, offsets: list[int]) -> None:
    assert offset_msg_ids(store_host, offsets) == ",".join(
        offset_msg_id(store_host, offset) for offset in offsets)


@given(
    message=messages(),
    append_prop_crc=st.booleans(),
    ascii_topic=st.booleans(),
    v4_hosts=st.booleans(),
    damage=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    size_delta=st.sampled_from([0, 0, 0, -1, 1]),
    verify_prop_crc=st.booleans(),
)
def test_records_surely_valid_only_when_check_record_finds_them_valid(
    message: dict[str, Any], append_prop_crc: bool, ascii_topic: bool, v4_hosts: bool,
    damage: list[tuple[int, int]], size_delta: int, verify_prop_crc: bool,
) -> None:
    """The C check a pull runs first: "surely valid" implies check_record's VALID with that
    size; an intact record of the common layout is surely valid."""
    assert native is not None, "store._native is not built"
    if ascii_topic:
        message["topic"] = "TopicTest"
    if v4_hosts:
        message["born_host"] = message["store_host"] = HostPort(bytes([127, 0, 0, 1]), 10911)
    if append_prop_crc:
        message["properties"] = normalize_properties(message["properties"])
    record = make_record(**message, magic_code=MAGIC_CODE_V1 if ascii_topic else MAGIC_CODE_V2,
                         queue_offset=1, phy_offset=5, store_timestamp=2,
                         append_prop_crc=append_prop_crc)
    intact = encode_record(record)
    encoded = bytearray(b"\xee" * 5 + intact + b"\xee")
    for where, value in damage:
        encoded[5 + where % len(intact)] = value
    size = len(intact) + size_delta
    surely = native.records_surely_valid(
        encoded, np.array([5], np.int64), np.array([size], np.int64), 0, verify_prop_crc)
    check = check_record(encoded, 5, limit=5 + size, expected_phy_offset=5, check_body_crc=True,
                         verify_prop_crc=verify_prop_crc)
    if surely == b"\x01":
        assert check.status is CheckStatus.VALID
        assert check.size == size
    common = ascii_topic and v4_hosts and (append_prop_crc or not verify_prop_crc)
    if not damage and size_delta == 0 and common:
        assert surely == b"\x01"
