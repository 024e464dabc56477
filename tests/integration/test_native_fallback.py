"""The store without its C extension writes the very same files as with it, and recovers
what it wrote."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import store.commitlog
import store.consume_queue
import store.mapped_file
import store.message_batch
import store.message_encoder
import store.message_properties
import store.message_store
import store.recovery
from store.config import StoreConfig
from store.message_properties import encode_properties
from store.message_store import MessageStore
from store.native import native
from tests.support.store_helpers import (
    BORN_HOST,
    STORE_HOST,
    batch,
    crash_image,
    message,
    read_all,
)


def _fill(root: Path) -> MessageStore:
    clock = itertools.count(1_700_000_000_000)
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
                         mapped_file_size_consume_queue=20 * 50)
    store = MessageStore(config, wall_ms=lambda: next(clock))
    store.open()
    for round_ in range(40):  # rolls commitlog segments and consume-queue files
        store.append_message(message(b"single %d" % round_, tags="a"))
        store.append_batch(batch([b"x" * (round_ * 37 % 1500) for _ in range(round_ % 5 + 1)]))
        store.append_message(message(b"q1", queue_id=1, key="k"))
        store.append_message_fields(  # a send's path: one C call for the common message
            topic="TopicTest", queue_id=0, flag=0, body=b"f" * (round_ * 53 % 1200),
            properties=encode_properties({"TAGS": "b", "UNIQ_KEY": f"{round_:032X}"}),
            sys_flag=0, born_timestamp=1_700_000_000_000, born_host=BORN_HOST,
            store_host=STORE_HOST)
    return store


def _files(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()
            and path.parent.name in {"commitlog", "0", "1"}}


def test_python_fallback_writes_the_same_bytes_as_c(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert native is not None, "store._native is not built"
    with_c = _fill(tmp_path / "c")
    expected = [record.body for record in read_all(with_c, "TopicTest", 0)]
    crashed = crash_image(tmp_path / "c", tmp_path / "crashed")  # as a SIGKILL leaves it
    with_c.close()
    for module in (store.commitlog, store.consume_queue, store.mapped_file,
                   store.message_encoder, store.message_batch, store.message_properties,
                   store.message_store, store.recovery):
        monkeypatch.setattr(module, "_native", None)
    recovered = MessageStore(StoreConfig(store_path_root_dir=crashed,
                                         mapped_file_size_commit_log=64 * 1024,
                                         mapped_file_size_consume_queue=20 * 50))
    recovered.open()  # abnormal recovery: every record checked, its CRCs in Python
    assert recovered.recovery is not None
    assert recovered.recovery.abnormal
    assert [record.body for record in read_all(recovered, "TopicTest", 0)] == expected
    recovered.close()
    without_c = _fill(tmp_path / "py")
    assert [record.body for record in read_all(without_c, "TopicTest", 0)] == expected
    without_c.close()
    c_files = _files(tmp_path / "c")
    assert len(c_files) > 6
    assert _files(tmp_path / "py") == c_files
