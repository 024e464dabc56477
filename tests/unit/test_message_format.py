"""Commitlog record codec: the golden vectors of docs/store-format.md §3.9, limits, and damage."""

from __future__ import annotations

import dataclasses
import mmap
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from store.errors import MessageIllegalError, RecordCorruptError
from store.host_port import HostPort, offset_msg_id
from store.message_batch import (
    BATCH_ENTRY_SPEC,
    EncodedBatch,
    decode_batch_body,
    prepare_batch,
    write_batch,
)
from store.message_crc import crc32
from store.message_decoder import decode_record, encode_record, make_record
from store.message_encoder import EncodedMessage, prepare_message, write_record
from store.message_properties import (
    MAX_PROPERTIES_BYTES,
    PROPERTY_CRC_RESERVED_BYTES,
    encode_properties,
    java_string_hash,
    normalize_properties,
    parse_properties,
    tags_code,
)
from store.message_sys_flag import SysFlag
from store.record_check import CheckStatus, RecordCheck, check_record
from store.record_layout import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    RECORD_SPEC,
    MessageRecord,
    read_store_timestamp,
    write_blank,
)

FIXTURES = Path(__file__).parent.parent / "fixtures"
MAX_MESSAGE_SIZE = 4 * 1024 * 1024


def dump(text: str) -> bytes:
    """Bytes of an offset-prefixed hex dump as printed in the spec ("0000: 00 01 ...")."""
    return bytes.fromhex("".join(line.split(":", 1)[1] for line in text.strip().splitlines()))


# --- docs/store-format.md §3.9
# ----------------------------------------------------------------------

VECTOR_1 = dump("""
0000: 00 00 00 6a da a3 20 a7 58 93 2a ac 00 00 00 00
0010: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0020: 00 00 00 00 00 00 00 00 00 00 01 8b cf e5 68 00
0030: 7f 00 00 01 00 00 c3 50 00 00 01 8b cf e5 68 01
0040: 7f 00 00 01 00 00 2a 9f 00 00 00 00 00 00 00 00
0050: 00 00 00 00 00 00 00 02 68 69 01 54 00 0c 55 4e
0060: 49 51 5f 4b 45 59 01 41 42 02
""")

VECTOR_2 = dump("""
0000: 00 00 00 c7 da a3 20 a7 69 c8 65 ed 00 00 00 01
0010: 00 00 00 00 00 00 00 00 00 00 00 11 00 00 00 00
0020: 00 00 0f 3c 00 00 00 00 00 00 01 8b cf e5 68 00
0030: c0 a8 00 01 00 00 d4 31 00 00 01 8b cf e5 68 05
0040: c0 a8 00 0a 00 00 2a 9f 00 00 00 00 00 00 00 00
0050: 00 00 00 00 00 00 00 0e 48 65 6c 6c 6f 20 52 6f
0060: 63 6b 65 74 4d 51 09 54 6f 70 69 63 54 65 73 74
0070: 00 55 55 4e 49 51 5f 4b 45 59 01 43 30 41 38 30
0080: 30 30 31 30 30 30 30 32 41 39 46 30 30 30 30 30
0090: 30 30 30 30 30 30 30 30 30 30 31 02 43 4c 55 53
00a0: 54 45 52 01 44 65 66 61 75 6c 74 43 6c 75 73 74
00b0: 65 72 02 54 41 47 53 01 54 61 67 41 02 57 41 49
00c0: 54 01 74 72 75 65 02
""")

VECTOR_3 = dump("""
0000: 00 00 00 db da a3 20 a7 69 c8 65 ed 00 00 00 01
0010: 00 00 00 00 00 00 00 00 00 00 00 11 00 00 00 00
0020: 00 00 0f 3c 00 00 00 00 00 00 01 8b cf e5 68 00
0030: c0 a8 00 01 00 00 d4 31 00 00 01 8b cf e5 68 05
0040: c0 a8 00 0a 00 00 2a 9f 00 00 00 00 00 00 00 00
0050: 00 00 00 00 00 00 00 0e 48 65 6c 6c 6f 20 52 6f
0060: 63 6b 65 74 4d 51 09 54 6f 70 69 63 54 65 73 74
0070: 00 69 55 4e 49 51 5f 4b 45 59 01 43 30 41 38 30
0080: 30 30 31 30 30 30 30 32 41 39 46 30 30 30 30 30
0090: 30 30 30 30 30 30 30 30 30 30 31 02 43 4c 55 53
00a0: 54 45 52 01 44 65 66 61 75 6c 74 43 6c 75 73 74
00b0: 65 72 02 54 41 47 53 01 54 61 67 41 02 57 41 49
00c0: 54 01 74 72 75 65 02 5f 5f 43 52 43 33 32 23 01
00d0: 36 33 30 38 36 33 32 32 31 31 02
""")

VECTOR_4 = dump("""
0000: 00 00 00 82 da a3 20 a7 58 93 2a ac 00 00 00 00
0010: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0020: 00 00 00 00 00 00 00 30 00 00 01 8b cf e5 68 00
0030: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01
0040: 00 00 c3 50 00 00 01 8b cf e5 68 01 00 00 00 00
0050: 00 00 00 00 00 00 00 00 00 00 00 01 00 00 2a 9f
0060: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02
0070: 68 69 01 54 00 0c 55 4e 49 51 5f 4b 45 59 01 41
0080: 42 02
""")

VECTOR_5 = dump("""
0000: 00 00 00 6b da a3 20 ab 58 93 2a ac 00 00 00 00
0010: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0020: 00 00 00 00 00 00 00 00 00 00 01 8b cf e5 68 00
0030: 7f 00 00 01 00 00 c3 50 00 00 01 8b cf e5 68 01
0040: 7f 00 00 01 00 00 2a 9f 00 00 00 00 00 00 00 00
0050: 00 00 00 00 00 00 00 02 68 69 00 01 54 00 0c 55
0060: 4e 49 51 5f 4b 45 59 01 41 42 02
""")

VECTOR_6_BLANK = bytes.fromhex("000000e0cbd43194")

# Vector 1 (and 4, 5): topic T, body hi, one property, born/stored at 1700000000000/1.
V1_PROPERTIES = b"UNIQ_KEY\x01AB\x02"
V1_BORN = HostPort.from_str("127.0.0.1:50000")
V1_STORE = HostPort.from_str("127.0.0.1:10911")
# Vector 2 (and 3): what a Java 5.x broker stores for a producer message with tag TagA.
V2_PROPERTIES = (
    b"UNIQ_KEY\x01C0A8000100002A9F0000000000000001\x02CLUSTER\x01DefaultCluster\x02"
    b"TAGS\x01TagA\x02WAIT\x01true\x02"
)
V2_BORN = HostPort.from_str("192.168.0.1:54321")
V2_STORE = HostPort.from_str("192.168.0.10:10911")


def vector_1_record(**changes: object) -> MessageRecord:
    fields: dict[str, object] = {
        "topic": "T",
        "body": b"hi",
        "properties": V1_PROPERTIES,
        "born_timestamp": 1700000000000,
        "born_host": V1_BORN,
        "store_timestamp": 1700000000001,
        "store_host": V1_STORE,
    }
    fields.update(changes)
    return make_record(**fields)  # type: ignore[arg-type]


def vector_2_record(*, append_prop_crc: bool = False) -> MessageRecord:
    return make_record(
        topic="TopicTest",
        body=b"Hello RocketMQ",
        properties=V2_PROPERTIES,
        queue_id=1,
        queue_offset=17,
        phy_offset=3900,
        born_timestamp=1700000000000,
        born_host=V2_BORN,
        store_timestamp=1700000000005,
        store_host=V2_STORE,
        append_prop_crc=append_prop_crc,
    )


def vector_2_prepared(*, append_prop_crc: bool) -> EncodedMessage:
    return prepare_message(
        topic="TopicTest",
        queue_id=1,
        flag=0,
        body=b"Hello RocketMQ",
        properties=V2_PROPERTIES,
        sys_flag=0,
        born_timestamp=1700000000000,
        born_host=V2_BORN,
        store_host=V2_STORE,
        append_prop_crc=append_prop_crc,
        max_message_size=MAX_MESSAGE_SIZE,
    )


def written(
    msg: EncodedMessage, *, queue_offset: int, phy_offset: int, store_timestamp: int
) -> bytes:
    """The record write_record puts into a dirty buffer, at an odd position."""
    buf = bytearray(b"\xee" * (msg.total_size + 13))
    size = write_record(
        buf,
        5,
        msg,
        queue_offset=queue_offset,
        phy_offset=phy_offset,
        store_timestamp=store_timestamp,
    )
    assert size == msg.total_size
    assert buf[:5] == b"\xee" * 5
    assert buf[5 + size :] == b"\xee" * 8
    return bytes(buf[5 : 5 + size])


def check(
    buf: bytes | bytearray,
    pos: int = 0,
    *,
    limit: int | None = None,
    expected_phy_offset: int | None = None,
    check_body_crc: bool = True,
    verify_prop_crc: bool = False,
) -> RecordCheck:
    return check_record(
        buf,
        pos,
        limit=len(buf) if limit is None else limit,
        expected_phy_offset=expected_phy_offset,
        check_body_crc=check_body_crc,
        verify_prop_crc=verify_prop_crc,
    )


def test_vector_1_minimal_record() -> None:
    record = vector_1_record()
    assert record.total_size == 106
    assert record.body_crc == 0x58932AAC == crc32(b"hi")
    assert encode_record(record) == VECTOR_1
    assert decode_record(VECTOR_1) == record
    result = check(VECTOR_1, expected_phy_offset=0)
    assert result.status is CheckStatus.VALID
    assert result.size == 106
    assert result.topic == "T"


def test_vector_2_matches_the_fixture_file() -> None:
    assert (FIXTURES / "vector2.bin").read_bytes() == VECTOR_2


def test_vector_2_java_broker_record() -> None:
    record = vector_2_record()
    assert encode_record(record) == VECTOR_2
    assert decode_record(VECTOR_2) == record
    assert record.body_crc == 0x69C865ED
    assert record.total_size == 199
    assert record.tags == "TagA"
    assert record.uniq_key == "C0A8000100002A9F0000000000000001"
    assert record.keys is None
    assert record.properties_map() == {
        "UNIQ_KEY": "C0A8000100002A9F0000000000000001",
        "CLUSTER": "DefaultCluster",
        "TAGS": "TagA",
        "WAIT": "true",
    }


def test_vector_2_hot_path_without_prop_crc_writes_the_golden_bytes() -> None:
    msg = vector_2_prepared(append_prop_crc=False)
    assert msg.total_size == 199
    assert msg.tags_code == 2598919
    assert msg.sys_flag == 0
    assert written(msg, queue_offset=17, phy_offset=3900, store_timestamp=1700000000005) == (
        VECTOR_2
    )


def test_vector_2_derived_values() -> None:
    assert tags_code("TagA") == 2598919 == 0x27A807
    assert offset_msg_id(V2_STORE, 3900) == "C0A8000A00002A9F0000000000000F3C"
    result = check(VECTOR_2, expected_phy_offset=3900)
    assert result == RecordCheck(
        status=CheckStatus.VALID,
        size=199,
        topic="TopicTest",
        queue_id=1,
        queue_offset=17,
        store_timestamp=1700000000005,
        tags_code=2598919,
        sys_flag=0,
        phy_offset=3900,
    )
    # What the dispatcher writes into the consume queue from the check (§4.2 example).
    cq_unit = struct.pack(">qiq", result.phy_offset, result.size, result.tags_code)
    assert cq_unit == bytes.fromhex("0000000000000f3c000000c7000000000027a807")


def test_vector_3_prop_crc_digits_are_least_significant_first() -> None:
    assert crc32(VECTOR_3[:199]) == 1122368036 == 0x42E5FA24
    assert VECTOR_3[-20:] == b"__CRC32#\x016308632211\x02"
    assert encode_record(vector_2_record(append_prop_crc=True)) == VECTOR_3
    msg = vector_2_prepared(append_prop_crc=True)
    assert msg.total_size == 219
    assert written(msg, queue_offset=17, phy_offset=3900, store_timestamp=1700000000005) == (
        VECTOR_3
    )
    record = decode_record(VECTOR_3)
    assert record.properties == V2_PROPERTIES + b"__CRC32#\x016308632211\x02"
    assert record.properties_map()["__CRC32#"] == "6308632211"
    result = check(VECTOR_3, expected_phy_offset=3900, verify_prop_crc=True)
    assert result.status is CheckStatus.VALID
    assert result.size == 219
    assert result.tags_code == 2598919


def test_vector_4_ipv6_hosts_set_the_v6_flags() -> None:
    record = vector_1_record(
        born_host=HostPort.from_str("[::1]:50000"), store_host=HostPort.from_str("[::1]:10911")
    )
    assert record.sys_flag == 0x30 == SysFlag.BORNHOST_V6_FLAG | SysFlag.STOREHOSTADDRESS_V6_FLAG
    assert encode_record(record) == VECTOR_4
    assert decode_record(VECTOR_4) == record
    assert str(record.born_host) == "[::1]:50000"
    # STORETIMESTAMP sits at 68, not 56, after an IPv6 BORNHOST.
    assert read_store_timestamp(VECTOR_4, 0) == 1700000000001
    result = check(VECTOR_4, expected_phy_offset=0)
    assert result.status is CheckStatus.VALID
    assert result.size == 130
    assert result.store_timestamp == 1700000000001
    assert result.sys_flag == 0x30


def test_vector_5_v2_magic_is_decoded_from_the_magic_alone() -> None:
    record = decode_record(VECTOR_5)
    assert record.magic_code == MAGIC_CODE_V2
    assert record.topic == "T"
    assert record.total_size == 107
    assert record.properties == V1_PROPERTIES
    assert (
        encode_record(record)
        == VECTOR_5
        == encode_record(vector_1_record(magic_code=MAGIC_CODE_V2))
    )
    assert check(VECTOR_5).status is CheckStatus.VALID


def test_vector_6_blank_record_at_the_end_of_a_file() -> None:
    # A 300-byte record does not fit the last 224 bytes of a file: BLANK claims them.
    tail = bytearray(b"\xab" * 224)
    write_blank(tail, 0, 224)
    assert bytes(tail[:8]) == VECTOR_6_BLANK
    assert tail[8:] == b"\xab" * 216  # only 8 bytes are written
    assert check(tail) == RecordCheck(CheckStatus.BLANK, 224)
    assert struct.unpack(">ii", VECTOR_6_BLANK) == (224, BLANK_MAGIC_CODE)


def test_write_blank_refuses_less_than_eight_bytes() -> None:
    with pytest.raises(ValueError, match="BLANK size=7"):
        write_blank(bytearray(16), 0, 7)


def test_record_spec_builds_and_parses_the_golden_vectors() -> None:
    for vector in (VECTOR_1, VECTOR_2, VECTOR_3, VECTOR_4, VECTOR_5):
        parsed = RECORD_SPEC.parse(vector)
        assert RECORD_SPEC.build(parsed) == vector
        record = decode_record(vector)
        assert parsed.topic == record.topic
        assert parsed.body == record.body
        assert parsed.born_host.ip == record.born_host.ip
        assert parsed.store_timestamp == record.store_timestamp


def test_write_record_into_an_mmap() -> None:
    msg = vector_2_prepared(append_prop_crc=True)
    with mmap.mmap(-1, 4096) as buf:
        write_record(
            buf, 1000, msg, queue_offset=17, phy_offset=3900, store_timestamp=1700000000005
        )
        assert buf[1000 : 1000 + 219] == VECTOR_3
        assert (
            check_record(
                buf,
                1000,
                limit=4096,
                expected_phy_offset=3900,
                check_body_crc=True,
                verify_prop_crc=True,
            ).size
            == 219
        )


# --- Java String.hashCode ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", 0, id="empty"),
        pytest.param("TagA", 2598919, id="TagA"),
        pytest.param("hello", 99162322, id="hello"),
        pytest.param("Aa", 2112, id="Aa"),
        pytest.param("BB", 2112, id="BB-collides-with-Aa"),
        pytest.param("polygenelubricants", -(2**31), id="wraps-to-int-min"),
        pytest.param("\u00e9", 0xE9, id="bmp-non-ascii"),
        # U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00.
        pytest.param("\U0001f600", 0xD83D * 31 + 0xDE00, id="non-bmp-surrogates"),
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_tags_code_is_zero_without_tags() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0


# --- properties (§3.4) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(b"", {}, id="empty"),
        pytest.param(b"a\x01b\x02", {"a": "b"}, id="one"),
        pytest.param(b"a\x01b", {"a": "b"}, id="no-trailing-separator"),
        pytest.param(b"\x01b\x02", {}, id="empty-name-dropped"),
        pytest.param(b"a\x01\x02", {}, id="empty-value-dropped"),
        pytest.param(b"ab\x02", {}, id="no-name-value-separator"),
        pytest.param(b"a\x01b\x02a\x01c\x02", {"a": "c"}, id="duplicate-last-wins"),
        pytest.param(b"a\x01b\x02a\x01\x02", {"a": "b"}, id="empty-duplicate-does-not-erase"),
        pytest.param(b"a\x01b\x01c\x02", {"a": "b\x01c"}, id="value-keeps-later-0x01"),
        pytest.param(b"\x02\x02a\x01b\x02\x02", {"a": "b"}, id="empty-segments"),
        pytest.param("t\x01\u00e9\U0001f600\x02".encode(), {"t": "\u00e9\U0001f600"}, id="utf8"),
    ],
)
def test_parse_properties(raw: bytes, expected: dict[str, str]) -> None:
    assert parse_properties(raw) == expected


def test_encode_properties_refuses_separators() -> None:
    assert (
        encode_properties({"TAGS": "TagA", "KEYS": "k1 k2"}) == b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    )
    with pytest.raises(MessageIllegalError, match="name"):
        encode_properties({"a\x01b": "c"})
    with pytest.raises(MessageIllegalError, match="contains 0x02"):
        encode_properties({"a": "b\x02"})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(b"", b"", id="empty-stays-empty"),
        pytest.param(b"a\x01b\x02", b"a\x01b\x02", id="unchanged"),
        pytest.param(b"a\x01b", b"a\x01b\x02", id="separator-appended"),
        pytest.param(b"__CRC32#\x011234567890\x02a\x01b\x02", b"a\x01b\x02", id="client-crc-first"),
        pytest.param(
            b"a\x01b\x02__CRC32#\x01x\x02c\x01d\x02", b"a\x01b\x02c\x01d\x02", id="middle"
        ),
        pytest.param(b"a\x01b\x02__CRC32#\x011", b"a\x01b\x02", id="last-without-separator"),
        pytest.param(b"__CRC32#\x011\x02", b"", id="only-crc"),
        pytest.param(b"x\x01__CRC32#\x011\x02", b"x\x01__CRC32#\x011\x02", id="inside-a-value"),
        pytest.param(b"X__CRC32#\x011\x02", b"X__CRC32#\x011\x02", id="other-name"),
    ],
)
def test_normalize_properties(raw: bytes, expected: bytes) -> None:
    assert normalize_properties(raw) == expected


# --- prepare_message -----------------------------------------------------------------------------


def prepare(**changes: object) -> EncodedMessage:
    fields: dict[str, object] = {
        "topic": "T",
        "queue_id": 0,
        "flag": 0,
        "body": b"hi",
        "properties": V1_PROPERTIES,
        "sys_flag": 0,
        "born_timestamp": 1700000000000,
        "born_host": V1_BORN,
        "store_host": V1_STORE,
        "max_message_size": MAX_MESSAGE_SIZE,
    }
    fields.update(changes)
    return prepare_message(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        pytest.param({"topic": ""}, "topic is empty", id="empty-topic"),
        pytest.param({"topic": "t" * 128}, "128 chars exceeds the limit of 127", id="topic-128"),
        pytest.param(
            {"topic": "%DLQ%" + "g" * 123}, "128 chars exceeds the limit of 127", id="dlq-128"
        ),
        pytest.param(
            {"topic": "%RETRY%" + "g" * 249}, "256 chars exceeds the limit of 255", id="retry-256"
        ),
        pytest.param(
            {"body": b"x" * 11, "max_message_size": 10},
            "body_size=11 exceeds max_message_size=10",
            id="body",
        ),
        pytest.param(
            {"properties": b"a\x01" + b"b" * (MAX_PROPERTIES_BYTES - 22) + b"\x02"},
            "properties_size=32768 .*20-byte __CRC32# reservation.* limit of 32767",
            id="properties-with-crc",
        ),
        pytest.param(
            {"properties": b"a" * (MAX_PROPERTIES_BYTES + 1), "append_prop_crc": False},
            "properties_size=32768 exceeds the limit of 32767",
            id="properties-without-crc",
        ),
        pytest.param({"queue_id": 2**31}, "queue_id=2147483648 does not fit", id="queue-id"),
        pytest.param({"flag": -(2**31) - 1}, "flag=-2147483649 does not fit", id="flag"),
        pytest.param({"born_timestamp": 2**63}, "born_timestamp=.* does not fit", id="born"),
        pytest.param({"reconsume_times": 2**31}, "reconsume_times=.* does not fit", id="reconsume"),
    ],
)
def test_prepare_message_limits(changes: dict[str, object], match: str) -> None:
    with pytest.raises(MessageIllegalError, match=match):
        prepare(**changes)


def test_prepare_message_limits_are_inclusive() -> None:
    assert prepare(topic="t" * 127).total_size == 91 + 2 + 127 + len(V1_PROPERTIES) + 20
    assert prepare(body=b"x" * 10, max_message_size=10).total_size > 0
    assert prepare(properties=b"a" * MAX_PROPERTIES_BYTES, append_prop_crc=False).total_size > 0
    at_limit = b"a\x01" + b"b" * (MAX_PROPERTIES_BYTES - 23) + b"\x02"
    assert len(at_limit) + PROPERTY_CRC_RESERVED_BYTES == MAX_PROPERTIES_BYTES
    assert prepare(properties=at_limit).total_size > 0


def test_long_retry_topic_is_stored_as_v2() -> None:
    topic = "%RETRY%" + "g" * 200
    msg = prepare(topic=topic)
    record = decode_record(written(msg, queue_offset=0, phy_offset=0, store_timestamp=1))
    assert record.magic_code == MAGIC_CODE_V2
    assert record.topic == topic
    short = written(prepare(topic="t" * 127), queue_offset=0, phy_offset=0, store_timestamp=1)
    assert decode_record(short).magic_code == MAGIC_CODE_V1


def test_topic_over_127_utf8_bytes_is_stored_as_v2() -> None:
    # 100 chars, 200 bytes: a V1 length byte would overflow (Java would write a corrupt record).
    topic = "\u00e9" * 100
    record = decode_record(
        written(prepare(topic=topic), queue_offset=0, phy_offset=0, store_timestamp=1)
    )
    assert record.magic_code == MAGIC_CODE_V2
    assert record.topic == topic


def test_prepare_message_replaces_client_v6_bits_with_the_real_hosts() -> None:
    client_flags = SysFlag.BORNHOST_V6_FLAG | SysFlag.STOREHOSTADDRESS_V6_FLAG | 0x1
    assert prepare(sys_flag=client_flags).sys_flag == 0x1
    v6_born = prepare(sys_flag=0, born_host=HostPort.from_str("[2001:db8::1]:40000"))
    assert v6_born.sys_flag == SysFlag.BORNHOST_V6_FLAG
    record = decode_record(written(v6_born, queue_offset=3, phy_offset=7, store_timestamp=9))
    assert record.born_host == HostPort.from_str("[2001:db8::1]:40000")
    assert record.store_timestamp == 9
    assert record.store_host == V1_STORE


def test_prepare_message_drops_a_client_crc_and_adds_the_last_separator() -> None:
    msg = prepare(properties=b"__CRC32#\x010000000042\x02TAGS\x01TagA")
    assert msg.properties == b"TAGS\x01TagA\x02"
    record = decode_record(written(msg, queue_offset=0, phy_offset=0, store_timestamp=1))
    assert record.properties.startswith(b"TAGS\x01TagA\x02__CRC32#\x01")
    assert record.tags == "TagA"
    assert msg.tags_code == 2598919


def test_prepare_message_without_prop_crc_stores_properties_as_sent() -> None:
    raw = b"__CRC32#\x010000000042\x02TAGS\x01TagA"
    msg = prepare(properties=raw, append_prop_crc=False)
    assert msg.properties == raw
    assert (
        decode_record(written(msg, queue_offset=0, phy_offset=0, store_timestamp=1)).properties
        == raw
    )


# --- batches -------------------------------------------------------------------------------------

# docs/remoting-protocol.md §6.3: (flag 0, body A, UNIQ_KEY=AB) and (flag 5, body BC, no
# properties).
BATCH_BODY = dump("""
0000: 00 00 00 23 00 00 00 00 00 00 00 00 00 00 00 00
0010: 00 00 00 01 41 00 0c 55 4e 49 51 5f 4b 45 59 01
0020: 41 42 02 00 00 00 18 00 00 00 00 00 00 00 00 00
0030: 00 00 05 00 00 00 02 42 43 00 00
""")
BATCH_INNER = [(0, b"A", b"UNIQ_KEY\x01AB\x02"), (5, b"BC", b"")]


def test_decode_batch_body_vector() -> None:
    assert decode_batch_body(BATCH_BODY) == BATCH_INNER
    assert decode_batch_body(b"") == []
    built = b"".join(
        BATCH_ENTRY_SPEC.build(
            {
                "total_size": 22 + len(body) + len(props),
                "magic_code": 0,
                "body_crc": 0,
                "flag": flag,
                "body": body,
                "properties": props,
            }
        )
        for flag, body, props in BATCH_INNER
    )
    assert built == BATCH_BODY


@pytest.mark.parametrize(
    ("body", "match"),
    [
        pytest.param(BATCH_BODY[:-1], "message 1 at 35: BODYLENGTH=2 outside", id="cut"),
        pytest.param(
            BATCH_BODY[:40], "message 1 at 35: 5 bytes left, an entry needs 22", id="header"
        ),
        pytest.param(
            struct.pack(">iiiii", 22, 0, 0, 0, -1) + b"\x00\x00",
            "message 0 at 0: BODYLENGTH=-1 outside",
            id="negative-body",
        ),
        pytest.param(
            struct.pack(">iiiii", 22, 0, 0, 0, 100) + b"\x00\x00",
            "BODYLENGTH=100 outside",
            id="body-past-end",
        ),
        pytest.param(
            struct.pack(">iiiii", 22, 0, 0, 0, 0) + struct.pack(">h", -2),
            "PROPERTIESLENGTH=-2 outside",
            id="negative-properties",
        ),
        pytest.param(
            struct.pack(">iiiii", 22, 0, 0, 0, 0) + struct.pack(">h", 3) + b"ab",
            "PROPERTIESLENGTH=3 outside",
            id="properties-past-end",
        ),
    ],
)
def test_decode_batch_body_refuses_inconsistent_lengths(body: bytes, match: str) -> None:
    with pytest.raises(MessageIllegalError, match=match):
        decode_batch_body(body)


def batch(**changes: object) -> EncodedBatch:
    fields: dict[str, object] = {
        "topic": "T",
        "queue_id": 2,
        "inner": BATCH_INNER,
        "sys_flag": 0,
        "born_timestamp": 1700000000000,
        "born_host": V1_BORN,
        "store_host": V1_STORE,
        "max_message_size": MAX_MESSAGE_SIZE,
    }
    fields.update(changes)
    return prepare_batch(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        pytest.param({"inner": []}, "batch has no messages", id="empty"),
        pytest.param({"topic": "%RETRY%" + "g" * 121}, "limit of 127", id="long-retry-topic"),
        pytest.param({"max_message_size": 58}, "batch body_size=59 exceeds", id="too-big"),
        pytest.param(
            {"inner": [(2**31, b"", b"")]}, "message 0: flag=2147483648 does not", id="flag"
        ),
        pytest.param({"queue_id": -(2**31) - 1}, "queue_id=-2147483649 does not", id="queue-id"),
        pytest.param(
            {"inner": [(0, b"", b""), (0, b"", b"a" * MAX_PROPERTIES_BYTES)]},
            "batch message 1: properties_size=32788",
            id="properties",
        ),
    ],
)
def test_prepare_batch_limits(changes: dict[str, object], match: str) -> None:
    with pytest.raises(MessageIllegalError, match=match):
        batch(**changes)


def test_batch_records_are_the_single_records_back_to_back() -> None:
    encoded = batch(max_message_size=59)
    assert encoded.count == 2
    buf = bytearray(encoded.total_size + 3)
    total = write_batch(
        buf, 3, encoded, first_queue_offset=10, phy_offset=1003, store_timestamp=1700000000009
    )
    first = written(
        prepare(queue_id=2, flag=0, body=b"A", properties=b"UNIQ_KEY\x01AB\x02"),
        queue_offset=10,
        phy_offset=1003,
        store_timestamp=1700000000009,
    )
    second = written(
        prepare(queue_id=2, flag=5, body=b"BC", properties=b""),
        queue_offset=11,
        phy_offset=1003 + len(first),
        store_timestamp=1700000000009,
    )
    assert bytes(buf[3:]) == first + second
    assert total == len(first + second)
    assert encoded.sizes.tolist() == [len(first), len(second)]
    assert encoded.tags_codes.tolist() == [0, 0]
    second_check = check(
        buf, 3 + len(first), expected_phy_offset=1003 + len(first), verify_prop_crc=True
    )
    assert second_check.status is CheckStatus.VALID
    assert second_check.queue_offset == 11


# --- check_record --------------------------------------------------------------------------------


def small_record(*, v6: bool) -> bytes:
    host = "[fe80::7]" if v6 else "10.0.0.7"
    msg = prepare(
        topic="Tp",
        body=b"body!",
        properties=b"TAGS\x01a\x02",
        born_host=HostPort.from_str(f"{host}:5"),
        store_host=HostPort.from_str(f"{host}:6"),
    )
    return written(msg, queue_offset=3, phy_offset=4096, store_timestamp=1700000000000)


@pytest.mark.parametrize("v6", [False, True], ids=["v4", "v6"])
@pytest.mark.parametrize("check_body_crc", [True, False], ids=["body-crc", "prop-crc-only"])
def test_every_single_bit_flip_is_invalid(v6: bool, check_body_crc: bool) -> None:
    # BODYCRC covers the body and the record CRC covers bytes [0, size - 20); its own 20 bytes
    # must parse to exactly the computed digits, so every byte is covered.
    record = small_record(v6=v6)
    assert check(record, verify_prop_crc=True).status is CheckStatus.VALID
    for index in range(len(record)):
        for bit in range(8):
            damaged = bytearray(record)
            damaged[index] ^= 1 << bit
            result = check(damaged, check_body_crc=check_body_crc, verify_prop_crc=True)
            assert result.status is CheckStatus.INVALID, (index, bit, result)
            assert result.size == 0
            assert result.reason


def test_wrong_phy_offset_is_invalid() -> None:
    record = small_record(v6=False)
    assert check(record, expected_phy_offset=4096, verify_prop_crc=True).status is CheckStatus.VALID
    result = check(record, expected_phy_offset=4097, verify_prop_crc=True)
    assert result.status is CheckStatus.INVALID
    assert "PHYSICALOFFSET=4096 != expected 4097" in result.reason


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        pytest.param(lambda r: bytes(len(r)), "zeros", id="zeros"),
        pytest.param(lambda r: r[:7], "7 bytes left", id="short"),
        pytest.param(
            lambda r: r[:4] + b"\x00\x00\x00\x01" + r[8:], "MAGICCODE=0x00000001", id="magic"
        ),
        pytest.param(lambda r: r[:-1], "TOTALSIZE=", id="torn"),
        pytest.param(lambda r: struct.pack(">i", 90) + r[4:], "TOTALSIZE=90", id="too-small"),
        pytest.param(lambda r: struct.pack(">i", len(r) - 1) + r[4:], "half message", id="half"),
        pytest.param(lambda r: r[:-11] + b"0000000000\x02", "__CRC32# digits", id="digits"),
        pytest.param(lambda r: r[:-20] + b"__CRC32$" + r[-12:], "no __CRC32# property", id="name"),
    ],
)
def test_check_record_names_the_failure(damage: Callable[[bytes], bytes], reason: str) -> None:
    damaged = damage(small_record(v6=False))
    result = check(damaged, verify_prop_crc=True)
    assert result.status is CheckStatus.INVALID
    assert reason in result.reason


def test_java_record_without_prop_crc_fails_prop_crc_verification() -> None:
    result = check(VECTOR_2, verify_prop_crc=True)
    assert result.status is CheckStatus.INVALID
    assert "no __CRC32# property" in result.reason


def test_prop_crc_must_start_a_segment() -> None:
    # A string without its last 0x02 glues the CRC property onto the previous value (Java would
    # not see it): refused, even with the right digits.
    record = make_record(
        topic="T",
        body=b"",
        properties=b"a\x01b",
        born_host=V1_BORN,
        store_host=V1_STORE,
        append_prop_crc=True,
    )
    result = check(encode_record(record), verify_prop_crc=True)
    assert result.status is CheckStatus.INVALID
    assert "no __CRC32# property" in result.reason


def test_empty_body_crc_must_be_zero() -> None:
    record = dataclasses.replace(vector_1_record(body=b""), body_crc=1)
    assert check(encode_record(record)).status is CheckStatus.INVALID
    assert check(encode_record(record), check_body_crc=False).status is CheckStatus.VALID


def test_blank_size_must_fit() -> None:
    buf = bytearray(64)
    write_blank(buf, 8, 100)
    result = check(buf, 8)
    assert result.status is CheckStatus.INVALID
    assert "BLANK TOTALSIZE=100 outside [8, 56]" in result.reason


def test_check_record_refuses_a_limit_past_the_buffer() -> None:
    with pytest.raises(ValueError, match="limit=11"):
        check(bytes(10), limit=11)


# --- decode_record errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "match"),
    [
        pytest.param(VECTOR_1[:7], "only 7 bytes left", id="short"),
        pytest.param(
            VECTOR_6_BLANK + bytes(216), "MAGICCODE=0xcbd43194 is not V1 or V2", id="blank"
        ),
        pytest.param(VECTOR_1[:-1], "TOTALSIZE=106 outside", id="torn"),
        pytest.param(
            VECTOR_1[:84] + struct.pack(">i", 16) + VECTOR_1[88:],
            "BODYLENGTH=16 does not fit",
            id="body",
        ),
        pytest.param(
            VECTOR_1[:90] + b"\x7f" + VECTOR_1[91:], "TOPICLENGTH=127 does not fit", id="topic"
        ),
        pytest.param(
            VECTOR_1[:92] + b"\x00\x0b" + VECTOR_1[94:], "PROPERTIESLENGTH=11", id="props"
        ),
        pytest.param(VECTOR_1[:91] + b"\xff" + VECTOR_1[92:], "TOPIC is not UTF-8", id="utf8"),
    ],
)
def test_decode_record_names_the_corrupt_field(data: bytes, match: str) -> None:
    with pytest.raises(RecordCorruptError, match=match):
        decode_record(data)


def test_encode_record_refuses_a_host_disagreeing_with_sysflag() -> None:
    record = dataclasses.replace(vector_1_record(), sys_flag=SysFlag.BORNHOST_V6_FLAG)
    with pytest.raises(ValueError, match="BORNHOST"):
        encode_record(record)


# --- hosts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ip", "port", "shown"),
    [
        pytest.param("127.0.0.1:10911", b"\x7f\x00\x00\x01", 10911, "127.0.0.1:10911", id="v4"),
        pytest.param("[::1]:10911", bytes(15) + b"\x01", 10911, "[::1]:10911", id="v6"),
        pytest.param("[::ffff:10.1.2.3]:80", b"\x0a\x01\x02\x03", 80, "10.1.2.3:80", id="mapped"),
    ],
)
def test_host_port_from_str(text: str, ip: bytes, port: int, shown: str) -> None:
    host = HostPort.from_str(text)
    assert host == HostPort(ip, port)
    assert str(host) == shown
    assert host.is_v6 == (len(ip) == 16)
    assert host.packed == ip + struct.pack(">i", port)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        pytest.param("127.0.0.1", "not host:port", id="no-port"),
        pytest.param("127.0.0.1:x", "not host:port", id="bad-port"),
        pytest.param("nohost:1", "does not appear to be an IPv4 or IPv6 address", id="name"),
        pytest.param("[::1]:70000", "port 70000 is outside", id="port-range"),
    ],
)
def test_host_port_from_str_refuses(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HostPort.from_str(text)


def test_offset_msg_id_of_an_ipv6_store_host_has_56_chars() -> None:
    msg_id = offset_msg_id(HostPort.from_str("[::1]:10911"), 3900)
    assert msg_id == "0" * 30 + "01" + "00002A9F" + "0000000000000F3C"
    assert len(msg_id) == 56


def test_sysflag_values_are_rocketmq_s() -> None:
    assert [int(f) for f in (SysFlag.COMPRESSED_FLAG, SysFlag.MULTI_TAGS_FLAG)] == [1, 2]
    assert SysFlag.TRANSACTION_ROLLBACK_TYPE == SysFlag.TRANSACTION_PREPARED_TYPE | 0x8 == 0xC
    assert int(SysFlag.NEED_UNWRAP_FLAG) == 0x40
    assert int(SysFlag.INNER_BATCH_FLAG) == 0x80
    assert int(SysFlag.COMPRESSION_ZLIB_TYPE) == 0x300
    assert MAGIC_CODE_V1 == 0xDAA320A7 - 2**32
    assert MAGIC_CODE_V2 == 0xDAA320AB - 2**32
