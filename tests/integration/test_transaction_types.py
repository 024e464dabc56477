"""Which records take a queue offset (issue 12), and what the store does when a unit cannot
follow its queue: on real files, through appends, live dispatch, recovery and restarts."""

from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.config import StoreConfig
from store.errors import DispatchError, MessageIllegalError
from store.message_batch import EncodedBatch
from store.message_decoder import decode_record
from store.message_store import MessageStore
from store.transaction_type import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    batch_transaction_error,
    takes_queue_offset,
    takes_queue_offset_array,
)
from tests.support.store_helpers import batch, crash_image, message, read_all, small_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize(
    ("sys_flag", "takes"),
    [
        pytest.param(TRANSACTION_NOT_TYPE, True, id="not"),
        pytest.param(TRANSACTION_PREPARED_TYPE, False, id="prepared"),
        pytest.param(TRANSACTION_COMMIT_TYPE, True, id="commit"),
        pytest.param(TRANSACTION_ROLLBACK_TYPE, False, id="rollback"),
        pytest.param(TRANSACTION_ROLLBACK_TYPE | 0x2 | 0x80 | 0x300, False, id="rollback+bits"),
        pytest.param(-1, False, id="all-bits"),
    ],
)
def test_takes_queue_offset_follows_the_transaction_type(sys_flag: int, takes: bool) -> None:
    assert takes_queue_offset(sys_flag) is takes


@given(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=50))
def test_the_array_rule_is_the_scalar_rule(sys_flags: list[int]) -> None:
    array = takes_queue_offset_array(np.array(sys_flags, dtype=np.int32))
    assert array.tolist() == [takes_queue_offset(flag) for flag in sys_flags]


@pytest.mark.parametrize(
    ("kind", "queue_offset_of_it"),
    [
        pytest.param(TRANSACTION_NOT_TYPE, 1, id="not"),
        pytest.param(TRANSACTION_PREPARED_TYPE, 0, id="prepared"),
        pytest.param(TRANSACTION_COMMIT_TYPE, 1, id="commit"),
        pytest.param(TRANSACTION_ROLLBACK_TYPE, 0, id="rollback"),
    ],
)
def test_java_queue_offsets_for_each_transaction_type_survive_restarts(
    tmp_path: Path, kind: int, queue_offset_of_it: int
) -> None:
    """Normal, <kind>, normal to one queue: as Java, PREPARED and ROLLBACK are stored with queue
    offset 0, take no unit and leave the counter; the queue serves the others in order, after
    a clean restart and after a crash too."""
    takes = takes_queue_offset(kind)
    root = tmp_path / "store"
    store = MessageStore(small_config(root))
    store.open()
    first = store.append_message(message(b"first"))
    middle = store.append_message(message(b"middle", sys_flag=kind))
    last = store.append_message(message(b"last"))
    assert (first.queue_offset, middle.queue_offset) == (0, queue_offset_of_it)
    assert last.queue_offset == (2 if takes else 1)
    expected = [b"first", b"middle", b"last"] if takes else [b"first", b"last"]
    assert [r.body for r in read_all(store, "TopicTest", 0)] == expected
    image = crash_image(root, tmp_path / "crashed")
    store.close()

    for directory in (root, image):  # clean restart, then recovery after a crash
        reopened = MessageStore(small_config(directory))
        report = reopened.open()
        assert report.records_skipped == 0
        assert [r.body for r in read_all(reopened, "TopicTest", 0)] == expected
        after = reopened.append_message(message(b"after restart"))
        assert after.queue_offset == len(expected)
        reopened.close()


def _batch_of_kind(kind: int) -> EncodedBatch:
    plain = batch([b"a", b"b"])
    return dataclasses.replace(plain, sys_flag=plain.sys_flag | kind)


@pytest.mark.parametrize("kind", [TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE,
                                  TRANSACTION_ROLLBACK_TYPE])
def test_a_transactional_batch_is_refused_whole(tmp_path: Path, kind: int) -> None:
    """Java's `asyncPutMessages`: MESSAGE_ILLEGAL unless TRANSACTION_NOT (COMMIT included)."""
    assert batch_transaction_error(kind) is not None
    assert batch_transaction_error(TRANSACTION_NOT_TYPE) is None
    store = MessageStore(small_config(tmp_path / "store"))
    store.open()
    try:
        with pytest.raises(MessageIllegalError, match="does not support transaction"):
            store.append_batch(_batch_of_kind(kind))
        assert store.max_phy_offset == 0
        assert store.append_batch(batch([b"a", b"b"])).queue_offset == 0
    finally:
        store.close()


def test_a_refused_unit_fails_that_append_alone_and_the_queue_recovers(tmp_path: Path) -> None:
    """A unit the queue refuses (here: a counter forced ahead of its queue, as a bug would) fails
    only the append that met it: other queues keep taking writes, the same queue's next append
    succeeds, the skip is counted, and the store restarts and serves every acknowledged
    message."""
    root = tmp_path / "store"
    store = MessageStore(small_config(root))
    store.open()
    store.append_message(message(b"q0-0", queue_id=0))
    store.append_message(message(b"q1-0", queue_id=1))
    store._queue_offsets[("TopicTest", 0)] += 3  # white box: the bug being contained
    with pytest.raises(DispatchError, match="will not be served"):
        store.append_message(message(b"lost", queue_id=0))
    assert store.dispatch_skipped_total == 1
    assert store.append_message(message(b"q1-1", queue_id=1)).queue_offset == 1
    assert store.append_message(message(b"q0-1", queue_id=0)).queue_offset == 1
    assert store.append_batch(batch([b"q0-2", b"q0-3"])).queue_offset == 2
    store.close()

    for _ in range(2):  # a normal recovery, then one after the skipped record is rescanned
        reopened = MessageStore(small_config(root))
        reopened.open()
        assert [r.body for r in read_all(reopened, "TopicTest", 0)] == [
            b"q0-0", b"q0-1", b"q0-2", b"q0-3"]
        assert [r.body for r in read_all(reopened, "TopicTest", 1)] == [b"q1-0", b"q1-1"]
        reopened.close()
        (root / "abort").touch()  # the second open recovers as after a crash


def test_controller_mode_dispatch_skips_a_refused_record_and_goes_on(tmp_path: Path) -> None:
    """Dispatch up to confirmOffset (controller mode) meets a unit its queue refuses: that
    record is skipped and counted, the records after it, of every queue, are dispatched."""
    store = MessageStore(small_config(tmp_path / "store", enable_controller_mode=True))
    store.open()
    store.append_message(message(b"a0", queue_id=0))
    store._queue_offsets[("TopicTest", 0)] += 5  # white box: the bug being contained
    store.append_message(message(b"gap", queue_id=0))
    store.append_message(message(b"b0", queue_id=1))
    store.set_confirm_offset(store.max_phy_offset)
    assert store.dispatch_skipped_total == 1
    assert [r.body for r in read_all(store, "TopicTest", 1)] == [b"b0"]
    # Dispatch caught up with the log, so the queue's counter follows its queue again.
    assert store.append_message(message(b"a1", queue_id=0)).queue_offset == 1
    store.set_confirm_offset(store.max_phy_offset)
    assert [r.body for r in read_all(store, "TopicTest", 0)] == [b"a0", b"a1"]
    store.close()


def _open_fixture(tmp_path: Path) -> tuple[Path, list[dict[str, object]]]:
    with tarfile.open(FIXTURES / "bricked_store.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    responses = json.loads((tmp_path / "responses.json").read_text())
    return tmp_path / "store", responses


def _fixture_config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
                       mapped_file_size_consume_queue=1000 * 20)


def test_a_store_bricked_by_a_rollback_message_opens_and_serves(tmp_path: Path) -> None:
    """tests/fixtures/bricked_store.tar.gz, written by pyrmq before the fix (see
    make_bricked_store.py): it opens, reports the one record it cannot dispatch, serves every
    message whose send was acknowledged, and takes new writes to the bricked queue."""
    root, responses = _open_fixture(tmp_path)
    acknowledged = [r for r in responses if r["code"] == 0 and takes_queue_offset(
        int(str(r["sys_flag"])))]
    assert len(acknowledged) == 1  # the rollback's SUCCESS is not a consumable message
    assert [r["code"] for r in responses] == [0, 0, 1, 1, 1]  # as the bug answered

    store = MessageStore(_fixture_config(root))
    report = store.open()
    assert report.abnormal
    assert report.records_skipped == 1  # "after the rollback": its queue offset left a gap
    for sent in acknowledged:
        records = read_all(store, str(sent["topic"]), int(str(sent["queue_id"])))
        assert records[int(str(sent["queue_offset"]))].body == str(sent["body"]).encode()
    new = store.append_message(message(b"new", topic="TopicA", queue_id=0))
    assert new.queue_offset == 1
    assert [r.body for r in read_all(store, "TopicA", 0)] == [b"first", b"new"]
    store.close()

    reopened = MessageStore(_fixture_config(root))
    assert not reopened.open().abnormal
    assert [r.body for r in read_all(reopened, "TopicA", 0)] == [b"first", b"new"]
    served = reopened.get_messages("TopicA", 0, 1, max_count=8)
    assert decode_record(served.messages[0]).queue_offset == 1
    reopened.close()
