"""Helpers shared by store tests: small configs, message factories, crash images."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from store.config import StoreConfig
from store.host_port import HostPort
from store.message_batch import EncodedBatch, prepare_batch
from store.message_decoder import decode_record
from store.message_encoder import EncodedMessage, prepare_message
from store.message_properties import encode_properties
from store.message_store import MessageStore
from store.record_layout import MessageRecord

BORN_HOST = HostPort.from_str("127.0.0.1:50000")
STORE_HOST = HostPort.from_str("127.0.0.1:10911")


def small_config(root: Path, **overrides: object) -> StoreConfig:
    """64 KiB commitlog files and 100-unit consume-queue files: many rolls in a small test."""
    config = StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_message_size=16 * 1024,
    )
    return replace(config, **overrides)  # type: ignore[arg-type]


def message(
    body: bytes,
    *,
    topic: str = "TopicTest",
    queue_id: int = 0,
    tags: str | None = None,
    key: str | None = None,
    sys_flag: int = 0,
    max_message_size: int = 4 * 1024 * 1024,
) -> EncodedMessage:
    props: dict[str, str] = {}
    if tags is not None:
        props["TAGS"] = tags
    if key is not None:
        props["KEYS"] = key
    return prepare_message(
        topic=topic, queue_id=queue_id, flag=0, body=body, properties=encode_properties(props),
        sys_flag=sys_flag, born_timestamp=1_700_000_000_000, born_host=BORN_HOST,
        store_host=STORE_HOST, max_message_size=max_message_size,
    )


def batch(
    bodies: list[bytes], *, topic: str = "TopicTest", queue_id: int = 0
) -> EncodedBatch:
    return prepare_batch(
        topic=topic, queue_id=queue_id, inner=[(0, body, b"") for body in bodies], sys_flag=0,
        born_timestamp=1_700_000_000_000, born_host=BORN_HOST, store_host=STORE_HOST,
        max_message_size=4 * 1024 * 1024,
    )


def crash_image(root: Path, target: Path) -> Path:
    """Copy a live store directory: what a SIGKILL leaves (page cache kept, abort present)."""
    shutil.copytree(root, target, ignore=shutil.ignore_patterns("lock"))
    return target


def read_all(store: MessageStore, topic: str, queue_id: int) -> list[MessageRecord]:
    """Every record of a queue, in queue order."""
    out: list[MessageRecord] = []
    offset = store.min_offset_in_queue(topic, queue_id)
    while True:
        result = store.get_messages(topic, queue_id, offset, max_count=64, max_bytes=1 << 30)
        if not result.messages:
            return out
        out.extend(decode_record(raw) for raw in result.messages)
        offset = result.next_begin_offset
