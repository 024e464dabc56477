"""Store directories: a Java-layout store (hand-built from the spec) opens in pyrmq, and pyrmq
writes what the spec's layouts read, byte for byte where Java's defaults are used.

Fixture: tests/fixtures/java_store, built by tests/fixtures/make_java_store.py from the spec
alone (golden vector 2 at phy 3900, queue TopicTest/1, queue offset 17).
"""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import pytest

from store.broker_identity import load_broker_identity
from store.config import StoreConfig
from store.host_port import HostPort
from store.message_decoder import decode_record
from store.message_encoder import prepare_message
from store.message_properties import parse_properties
from store.message_store import MessageStore
from store.record_layout import RECORD_SPEC
from tests.fixtures.make_java_store import (
    COMMITLOG_FILE_SIZE,
    CQ_FILE_SIZE,
    VECTOR2,
    build,
)
from tests.support.store_helpers import read_all

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "java_store"


def java_config(root: Path, *, force_verify_prop_crc: bool = False) -> StoreConfig:
    # A Java store has no `__CRC32#` property (Java's default enabledAppendPropCRC=false):
    # opening one needs forceVerifyPropCRC=false, as with a Java broker.
    return StoreConfig(
        store_path_root_dir=root, mapped_file_size_commit_log=COMMITLOG_FILE_SIZE,
        mapped_file_size_consume_queue=CQ_FILE_SIZE, force_verify_prop_crc=force_verify_prop_crc,
    )


@pytest.fixture
def java_store(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "store"))


def test_fixture_matches_its_generator() -> None:
    for name, data in build().items():
        assert (FIXTURE / name).read_bytes() == data, name


def test_pyrmq_opens_a_java_layout_store(java_store: Path) -> None:
    store = MessageStore(java_config(java_store))
    report = store.open()
    try:
        assert not report.abnormal
        assert report.max_phy_offset == 3900 + len(VECTOR2)
        result = store.get_messages("TopicTest", 1, 17, max_count=4)
        assert result.messages == [VECTOR2]
        records = read_all(store, "TopicTest", 1)
        assert [r.queue_offset for r in records] == list(range(18))
        assert records[-1].properties_map()["TAGS"] == "TagA"
        assert store.offset_by_time("TopicTest", 1, 1_700_000_000_005) == 17
        assert [(e.epoch, e.start_offset) for e in store.epoch_cache] == [(1, 0)]
        identity = load_broker_identity(java_store / "brokerIdentity")
        assert identity is not None
        assert (identity.cluster_name, identity.broker_name, identity.broker_id) == \
            ("DefaultCluster", "broker-a", 1)
    finally:
        store.close()


def test_pyrmq_rebuilds_the_java_consume_queue_byte_for_byte(java_store: Path) -> None:
    expected = (java_store / "consumequeue/TopicTest/1/00000000000000000000").read_bytes()
    shutil.rmtree(java_store / "consumequeue")
    store = MessageStore(java_config(java_store))
    store.open()
    store.close()
    rebuilt = (java_store / "consumequeue/TopicTest/1/00000000000000000000").read_bytes()
    assert rebuilt == expected


def test_pyrmq_with_java_defaults_writes_java_bytes(tmp_path: Path) -> None:
    """The same 18 messages appended by pyrmq (no property CRC, as Java's default) give the
    fixture's commitlog and consume-queue bytes exactly."""
    fixture_log = (FIXTURE / "commitlog/00000000000000000000").read_bytes()
    fixture_cq = (FIXTURE / "consumequeue/TopicTest/1/00000000000000000000").read_bytes()
    clock = [0]
    store = MessageStore(java_config(tmp_path / "s"), wall_ms=lambda: clock[0])
    store.open()
    born = HostPort.from_str("192.168.0.1:54321")
    host = HostPort.from_str("192.168.0.10:10911")
    try:
        for index in range(17):
            clock[0] = 1_699_999_999_000 + index * 10
            store.append_message(prepare_message(
                topic="TopicTest", queue_id=1, flag=0,
                body=bytes([0x41 + index]) * (129 if index < 16 else 136), properties=b"",
                sys_flag=0, born_timestamp=1_700_000_000_000, born_host=born, store_host=host,
                append_prop_crc=False, max_message_size=4 << 20,
            ))
        vector = decode_record(VECTOR2)
        clock[0] = vector.store_timestamp
        result = store.append_message(prepare_message(
            topic="TopicTest", queue_id=1, flag=0, body=vector.body,
            properties=vector.properties, sys_flag=0, born_timestamp=vector.born_timestamp,
            born_host=born, store_host=host, append_prop_crc=False, max_message_size=4 << 20,
        ))
        assert (result.phy_offset, result.queue_offset) == (3900, 17)
    finally:
        store.close()
    root = tmp_path / "s"
    assert (root / "commitlog/00000000000000000000").read_bytes() == fixture_log
    assert (root / "consumequeue/TopicTest/1/00000000000000000000").read_bytes() == fixture_cq


def test_pyrmq_records_parse_with_the_spec_layout(tmp_path: Path) -> None:
    """pyrmq's own records (with the property CRC) read with the construct declaration."""
    store = MessageStore(java_config(tmp_path / "s", force_verify_prop_crc=True))
    store.open()
    host = HostPort.from_str("192.168.0.10:10911")
    try:
        for index in range(5):
            store.append_message(prepare_message(
                topic="TopicTest", queue_id=0, flag=index, body=b"b%d" % index,
                properties=b"TAGS\x01TagA\x02", sys_flag=0, born_timestamp=1,
                born_host=host, store_host=host, max_message_size=4 << 20,
            ))
        raw = store.commitlog.read(0, store.max_phy_offset)
    finally:
        store.close()
    pos = 0
    for index in range(5):
        parsed = RECORD_SPEC.parse(raw[pos:])
        assert parsed.phy_offset == pos
        assert parsed.queue_offset == index
        assert parsed.body == b"b%d" % index
        props = parse_properties(parsed.properties)
        assert props["TAGS"] == "TagA"
        digits = props["__CRC32#"]
        crc = int(digits[::-1])
        assert crc == zlib.crc32(raw[pos:pos + parsed.total_size - 20]) & 0x7FFFFFFF
        pos += parsed.total_size
    assert pos == len(raw)
