"""`pull_to_batch`'s columnar decoding equals the per-record decoder's batch (`decode_record` +
`records_to_batch`) for any pull body, takes the records below the end offset and with the tags
asked for, and reports a corrupt record as the per-record decoder does. No Spark needed."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_rocketmq.arrow import pull_to_batch, records_to_batch
from store.errors import RecordCorruptError
from store.host_port import HostPort
from store.message_decoder import decode_record, encode_record, make_record
from store.message_properties import encode_properties

V4 = HostPort.from_str("10.1.2.3:50000")
V4_OTHER = HostPort.from_str("192.168.200.7:1")
STORE = HostPort.from_str("127.0.0.1:10911")
V6 = HostPort.from_str("[::1]:10911")
UNIQ = "7F0000010001B4A3000000000000002A"


def body_of(*records: bytes) -> bytes:
    return b"".join(records)


def record(queue_offset: int, *, body: bytes = b"hello", properties: bytes | None = None,
           topic: str = "T", born: HostPort = V4, store: HostPort = STORE, flag: int = 0,
           reconsume_times: int = 0, sys_flag: int = 0) -> bytes:
    if properties is None:
        properties = encode_properties({"TAGS": "A", "KEYS": "k1 k2", "UNIQ_KEY": UNIQ})
    return encode_record(make_record(
        topic=topic, body=body, properties=properties, born_host=born, store_host=store,
        queue_id=3, queue_offset=queue_offset, phy_offset=1000 + 200 * queue_offset,
        born_timestamp=1_700_000_000_123, store_timestamp=1_700_000_000_456, flag=flag,
        reconsume_times=reconsume_times, sys_flag=sys_flag))


def per_record(body: bytes, end: int, include_properties: bool = False) -> pa.RecordBatch:
    records = []
    pos = 0
    while pos < len(body):
        rec = decode_record(body, pos)
        pos += rec.total_size
        if rec.queue_offset < end:
            records.append(rec)
    return records_to_batch(records, "broker-a", include_properties=include_properties)


CASES = [
    ("plain", body_of(record(0), record(1), record(2))),
    ("no UNIQ_KEY: the offsetMsgId", body_of(record(0, properties=b"TAGS\x01A\x02"),
                                             record(1))),
    ("no properties", body_of(record(0, properties=b""))),
    ("the last non-empty duplicate wins",
     body_of(record(0, properties=b"TAGS\x01x\x02TAGS\x01y\x02TAGS\x01\x02KEYS\x01a\x01b"))),
    ("a value holding 0x01 and a newline",
     body_of(record(0, properties=b"KEYS\x01a\x01\nb\x02XTAGS\x01no\x02"))),
    ("bodies of 0, 12 and 13 bytes (inline and not)",
     body_of(record(0, body=b""), record(1, body=b"x" * 12), record(2, body=b"y" * 13))),
    ("V2 topic (over 127 chars)", body_of(record(0, topic="t" * 200), record(1))),
    ("two born hosts", body_of(record(0, born=V4_OTHER), record(1), record(2, born=V4_OTHER))),
    ("IPv6 store host (the per-record path)", body_of(record(0), record(1, store=V6))),
    ("properties not UTF-8 (the per-record path)",
     body_of(record(0, properties=b"TAGS\x01\xff\xfe\x02"))),
    ("flag, reconsumeTimes, sysFlag",
     body_of(record(0, flag=7, reconsume_times=2, sys_flag=0x4))),
]


@pytest.mark.parametrize(("name", "body"), CASES, ids=[name for name, _ in CASES])
@pytest.mark.parametrize("end", [0, 2, 1 << 40])
def test_equals_the_per_record_batch(name: str, body: bytes, end: int) -> None:
    batch = pull_to_batch(body, "broker-a", end_offset=end, tags=None, include_properties=False)
    expected = per_record(body, end)
    assert batch.equals(expected), (batch.to_pylist(), expected.to_pylist())


def test_include_properties_fills_the_map() -> None:
    body = body_of(record(0), record(1))
    batch = pull_to_batch(body, "broker-a", end_offset=9, tags=None, include_properties=True)
    assert batch.equals(per_record(body, 9, include_properties=True))
    assert dict(batch.column("properties")[0].as_py())["KEYS"] == "k1 k2"


def test_tags_filter_by_tag_string() -> None:
    body = body_of(record(0), record(1, properties=b"TAGS\x01B\x02"), record(2, properties=b""))
    for tags, offsets in [({"A"}, [0]), ({"A", "B"}, [0, 1]), ({"C"}, [])]:
        batch = pull_to_batch(body, "broker-a", end_offset=9, tags=tags,
                              include_properties=False)
        assert batch.column("queueOffset").to_pylist() == offsets


@pytest.mark.parametrize("damage", ["cut short", "size past the end", "bad magic"])
def test_a_corrupt_record_is_an_error_naming_it(damage: str) -> None:
    good = record(0) + record(1)
    if damage == "cut short":
        body = good[:-5]
    elif damage == "size past the end":
        body = (len(good) + 50).to_bytes(4, "big") + good[4:]
    else:
        body = good[:4] + bytes.fromhex("12345678") + good[8:]
    with pytest.raises((RecordCorruptError, ValueError)):
        pull_to_batch(body, "broker-a", end_offset=9, tags=None, include_properties=False)


names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "a"])
texts = st.text(st.characters(codec="utf-8", exclude_characters="\x00\x01\x02"), max_size=6)
properties = st.lists(st.tuples(names, texts), max_size=5).map(
    lambda pairs: "".join(f"{n}\x01{v}\x02" for n, v in pairs).encode())
records = st.lists(st.tuples(st.binary(max_size=40), properties, st.sampled_from([V4, V4_OTHER])),
                   min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(records, st.integers(0, 9))
def test_equals_the_per_record_batch_for_any_records(
    generated: list[tuple[bytes, bytes, HostPort]], end: int,
) -> None:
    body = body_of(*(record(i, body=b, properties=p, born=h)
                     for i, (b, p, h) in enumerate(generated)))
    batch = pull_to_batch(body, "broker-a", end_offset=end, tags=None, include_properties=False)
    assert batch.equals(per_record(body, end))
