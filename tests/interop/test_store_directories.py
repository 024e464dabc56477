"""Store directories both ways with the real Java broker of each release (docs/store-format.md §1,
§7, §9; spec README "Version differences" rows 12-14):

- a store written by a Java broker (5.5.0 and 5.3.3), stopped cleanly or SIGKILLed, opens in
  pyrmq's broker with every message pullable by the Java client at the queue and offset the Java
  broker acknowledged; a 5.5.0 store's `rocksdbstore/` is left exactly as it was; its
  checkpoint's sixth field (logicsPhysicalOffset) is what pyrmq reads, and a 5.3.3 checkpoint
  (five fields) loads too; batch records with (5.3.3) and without (5.5.0) the appended
  batch-level properties are both read;
- pyrmq's record encoder (`prepare_message` + `write_record`) writes each record of the Java
  broker's commitlog byte for byte, given the fields the encoder cannot know (queue and
  physical offsets, store timestamp) and the message as the Java client sent it: the Java
  broker's own encoder is the oracle for pyrmq's (issue 13);
- a store written by pyrmq's broker opens in the Java broker of each release with every message
  consumable by the Java client, after both a clean stop and a SIGKILL of pyrmq (the Java
  broker's abnormal recovery then reads pyrmq's checkpoint, the sixth field included).

Both sides use the same small files (4 MiB commitlog, 3,000-unit consume-queue files; the formats
do not depend on the sizes), sync and batch sends from the Java producer, and a name server of
their own per phase (a dead broker's registration would linger in a shared one).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from store.checkpoint import CHECKPOINT_FILE_NAME, load_checkpoint
from store.message_decoder import decode_record
from store.message_encoder import prepare_message, write_record
from store.record_check import RecordCheck
from store.record_layout import MessageRecord
from store.recovery import scan_file
from tests.interop.harness import (
    ConsumeResult,
    JavaEnv,
    JavaServer,
    ProduceResult,
    Sent,
    expected_body_crc32,
)
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess, wait_until

pytestmark = pytest.mark.interop

TOPIC: Final = "PyrmqStoreBothWays"
PER_MODE: Final = 40
BODY_BYTES: Final = 300
BROKER_NAME: Final = "broker-store"
JAVA_SIGTERM_EXIT: Final = 143
# The first send creates the topic; on a busy 2-core machine that can outlast 3 s.
SEND_TIMEOUT_MS: Final = 15_000
COMMITLOG_FILE_BYTES: Final = 4 * 1024 * 1024
FILE_SIZES: Final[dict[str, str | int | bool]] = {
    "mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES,
    "mappedFileSizeConsumeQueue": 3000 * 20,
}
# A 5.5.0 broker stores logicsPhysicalOffset only at a "thorough" consume-queue flush (every 60 s
# by default, not at shutdown): every second here, so that a short run leaves one.
JAVA_BROKER_CONF: Final[dict[str, str | int | bool]] = {
    **FILE_SIZES, "flushConsumeQueueThoroughInterval": 1000
}
CHECKPOINT_TIMEOUT_S: Final = 20.0
# Java stores carry no `__CRC32#` property: pyrmq then verifies the body CRC only, as a Java broker
# does (store/config.py).
PYRMQ_ON_JAVA_FILES: Final[dict[str, str | int | bool]] = {
    **FILE_SIZES, "forceVerifyPropCRC": False
}


@pytest.fixture
def pyrmq_env(tmp_path: Path) -> Iterator[PyrmqEnv]:
    with PyrmqEnv(tmp_path / "pyrmq") as env:
        yield env


BATCH_KEYS: Final = ("java-batch-", "pyrmq-clean-batch-", "pyrmq-sigkill-batch-")


def produce_both_modes(java: JavaEnv, namesrv: JavaServer, prefix: str) -> list[Sent]:
    results: list[ProduceResult] = [
        java.produce(namesrv, TOPIC, PER_MODE, mode, "TagA", key_prefix=f"{prefix}-{mode}",
                     body_bytes=BODY_BYTES, options={"send-timeout-ms": SEND_TIMEOUT_MS})
        for mode in ("sync", "batch")
    ]
    return [sent for result in results for sent in result.sent]


def assert_consumed_where_acknowledged(result: ConsumeResult, sends: list[Sent]) -> None:
    """Every acknowledged message consumed, with its body, at its acknowledged queue/offset."""
    assert result.done
    got = {r.key: r for r in result.received}
    assert set(got) == {s.key for s in sends}
    for sent in sends:
        received = got[sent.key]
        assert (received.queue_id, received.queue_offset) == (sent.queue_id, sent.queue_offset)
        assert (received.body_bytes, received.body_crc32) == (
            BODY_BYTES, expected_body_crc32(sent.key, BODY_BYTES)
        )


def record_starts(data: bytes, start: int) -> list[int]:
    """The offsets of the valid records of one commitlog file starting at `start`."""
    starts: list[int] = []

    def found(check: RecordCheck) -> None:
        starts.append(check.phy_offset)

    scan_file(data, file_from_offset=start, file_size=min(len(data), COMMITLOG_FILE_BYTES),
              check_body_crc=True, verify_prop_crc=False, on_record=found)
    return starts


def stored_records(store: Path) -> list[MessageRecord]:
    """Every valid record of the store's commitlog, in log order (a read-only scan)."""
    return [record for record, _ in stored_record_bytes(store)]


def stored_record_bytes(store: Path) -> list[tuple[MessageRecord, bytes]]:
    """Every valid record of the store's commitlog with its bytes, in log order."""
    records: list[tuple[MessageRecord, bytes]] = []
    for path in sorted((store / "commitlog").iterdir()):
        data = path.read_bytes()
        start = int(path.name)
        for phy in record_starts(data, start):
            record = decode_record(data, phy - start)
            records.append((record, data[phy - start : phy - start + record.total_size]))
    assert records, f"no record in {store}"
    return records


def assert_pyrmq_encodes_as_java(store: Path) -> None:
    """Each Java record re-encoded by pyrmq from the sent message's fields: the same bytes.

    pyrmq derives TOTALSIZE, MAGICCODE, BODYCRC and SYSFLAG's host bits itself; the offsets and
    the store timestamp are the ones the Java broker chose. Java stores carry no `__CRC32#`
    property (appendPropCRC is off by default), so neither does the re-encoding.
    """
    for record, java_bytes in stored_record_bytes(store):
        message = prepare_message(
            topic=record.topic, queue_id=record.queue_id, flag=record.flag, body=record.body,
            properties=record.properties, sys_flag=record.sys_flag,
            born_timestamp=record.born_timestamp, born_host=record.born_host,
            store_host=record.store_host, reconsume_times=record.reconsume_times,
            prepared_transaction_offset=record.prepared_transaction_offset,
            append_prop_crc=False, max_message_size=4 * 1024 * 1024,
        )
        pyrmq_bytes = bytearray(message.total_size)
        write_record(pyrmq_bytes, 0, message, queue_offset=record.queue_offset,
                     phy_offset=record.phy_offset, store_timestamp=record.store_timestamp)
        assert bytes(pyrmq_bytes) == java_bytes, f"record at {record.phy_offset} differs"


def batch_records_carry_cluster(records: list[MessageRecord]) -> set[bool]:
    """For each record of a batch send: does its PROPERTIES carry CLUSTER? (docs/store-format.md
    §3.7: 5.3.3 appends the batch-level properties, CLUSTER among them; 5.5.0 does not.)"""
    batch = [r for r in records if r.properties_map().get("KEYS", "").startswith(BATCH_KEYS)]
    assert len(batch) == PER_MODE
    return {"CLUSTER" in r.properties_map() for r in batch}


def stored_logics_physical_offset(store: Path) -> int:
    loaded = load_checkpoint(store / CHECKPOINT_FILE_NAME)
    assert not loaded.bad, loaded.reason
    return loaded.checkpoint.logics_physical_offset


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under root (directories as "dir")."""
    return {
        str(path.relative_to(root)): "dir" if path.is_dir()
        else hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("java_stop", ["clean", "sigkill"])
def test_a_java_store_opens_in_pyrmq_with_every_message_pullable(
    java_env: JavaEnv, pyrmq_env: PyrmqEnv, rocketmq_version: str, java_stop: str
) -> None:
    namesrv = java_env.start_java_namesrv()
    java_broker = java_env.start_java_broker(namesrv, broker_name=BROKER_NAME,
                                             extra_conf=JAVA_BROKER_CONF)
    sends = produce_both_modes(java_env, namesrv, "java")
    store = java_broker.store_dir
    assert store is not None
    records = stored_records(store)
    last = records[-1].phy_offset
    assert_pyrmq_encodes_as_java(store)
    # Batch records: 5.3.3 appends the batch-level properties, 5.5.0 no longer does (row 10).
    assert batch_records_carry_cluster(records) == {rocketmq_version == "5.3.3"}
    rocksdb = store / "rocksdbstore"
    if rocketmq_version == "5.3.3":
        assert not rocksdb.exists()
    else:
        # 5.5.0's checkpoint names the start of the last record dispatched before its last
        # consume-queue flush (the value pyrmq writes too), once a thorough flush covered it.
        wait_until(lambda: stored_logics_physical_offset(store) == last,
                   timeout_s=CHECKPOINT_TIMEOUT_S,
                   what=f"the Java checkpoint's logicsPhysicalOffset reaches {last}")
        assert rocksdb.is_dir()  # every 5.5.0 store has one (docs/store-format.md §1)
    if java_stop == "clean":
        # SIGTERM: the JVM runs the broker's shutdown hook and exits 143 (128 + SIGTERM); the
        # hook removes the abort file only after a complete, clean store shutdown.
        assert java_broker.process.terminate() == JAVA_SIGTERM_EXIT
        assert not (store / "abort").exists(), java_broker.process.diagnostics()
    else:
        # SIGKILL: pyrmq recovers abnormally, its start file chosen with the sixth field too.
        java_broker.process.kill()
        assert (store / "abort").exists()
    # What pyrmq reads: 5.5.0's sixth field, or 0 from a 5.3.3 checkpoint (five fields).
    assert stored_logics_physical_offset(store) == (0 if rocketmq_version == "5.3.3" else last)
    before = tree_digest(rocksdb) if rocksdb.exists() else None

    namesrv = java_env.start_java_namesrv(name="namesrv-pyrmq")
    broker = pyrmq_env.start_broker(namesrv, broker_name=BROKER_NAME, store_dir=store,
                                    extra_conf=PYRMQ_ON_JAVA_FILES)
    assert f"abnormal={java_stop == 'sigkill'}" in broker.log(), broker.diagnostics()
    result = java_env.lite_pull(namesrv, "store_java_to_pyrmq", TOPIC, "*", len(sends),
                                linger_ms=1000)
    assert_consumed_where_acknowledged(result, sends)
    assert broker.terminate() == 0, broker.diagnostics()
    if before is not None:
        assert tree_digest(rocksdb) == before, "pyrmq changed the Java store's rocksdbstore/"


@pytest.mark.parametrize("pyrmq_stop", ["clean", "sigkill"])
def test_a_pyrmq_store_opens_in_java_with_every_message_consumable(
    java_env: JavaEnv, pyrmq_env: PyrmqEnv, pyrmq_stop: str
) -> None:
    namesrv = java_env.start_java_namesrv()
    broker: PyrmqProcess = pyrmq_env.start_broker(
        namesrv, broker_name=BROKER_NAME, extra_conf=FILE_SIZES
    )
    sends = produce_both_modes(java_env, namesrv, f"pyrmq-{pyrmq_stop}")
    store = broker.store_dir
    assert store is not None
    # pyrmq's checkpoint carries 5.5.0's sixth field, as the Java 5.5.0 broker writes it (the
    # test above), once a consume-queue flush covered the sends.
    records = stored_records(store)
    last = records[-1].phy_offset
    assert_pyrmq_encodes_as_java(store)
    assert batch_records_carry_cluster(records) == {False}  # pyrmq writes batches as 5.5.0
    wait_until(lambda: stored_logics_physical_offset(store) == last,
               timeout_s=CHECKPOINT_TIMEOUT_S,
               what=f"pyrmq's checkpoint's logicsPhysicalOffset reaches {last}")
    if pyrmq_stop == "clean":
        assert broker.terminate() == 0, broker.diagnostics()
        assert not (store / "abort").exists()
    else:
        broker.kill()
        assert (store / "abort").exists()

    namesrv = java_env.start_java_namesrv(name="namesrv-java")
    java_broker = java_env.start_java_broker(namesrv, broker_name=BROKER_NAME, store_dir=store,
                                             extra_conf=FILE_SIZES)
    result = java_env.lite_pull(namesrv, f"store_pyrmq_to_java_{pyrmq_stop}", TOPIC, "*",
                                len(sends), linger_ms=1000)
    assert_consumed_where_acknowledged(result, sends)
    assert java_broker.process.alive()
