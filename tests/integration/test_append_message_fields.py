"""`MessageStore.append_message_fields` (a send's one C call for the common message) stores
what `append_message(prepare_message(...))` stores, and `put_message_fields` what
`put_message(prepare_message(...))` stores: the same commitlog and consume-queue bytes, the
same results, the same refusals, across file rolls, queues, the schedule topic, transaction
types, hosts and properties C leaves to Python; with the C extension and without.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import store.commitlog
import store.consume_queue
import store.message_batch
import store.message_encoder
import store.message_properties
import store.message_store
import store.recovery
from store.errors import StoreError
from store.host_port import HostPort
from store.message_encoder import prepare_message
from store.message_properties import encode_properties
from store.message_store import AppendResult, MessageStore
from store.native import native
from store.schedule import SCHEDULE_TOPIC
from tests.support.store_helpers import BORN_HOST, STORE_HOST, small_config

BORN_V6 = HostPort.from_str("[::1]:50000")
PREPARED, COMMIT = 0x4, 0x8


def sends(seed: int, count: int) -> list[dict[str, Any]]:
    """`count` sends' fields: mostly the common message, and every case the C path hands
    back (non-ASCII TAGS, properties to normalise, the schedule topic, a PREPARED message, an
    IPv6 born host, a body over the limit, a topic too long, a field out of its width) or
    refuses. The stores' clocks count their reads: an extra read on either side shows."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for index in range(count):
        props: dict[str, str] = {"TAGS": rng.choice(["a", "TagA", "é", ""]),
                                 "UNIQ_KEY": f"{index:032X}"}
        raw = encode_properties(props)
        case = rng.randrange(20)
        fields: dict[str, Any] = {
            "topic": "TopicTest", "queue_id": rng.randrange(3), "flag": rng.randrange(4),
            "body": rng.randbytes(rng.choice([0, 10, 700, 3000])), "properties": raw,
            "sys_flag": rng.choice([0, 0, 0, COMMIT, 0x1 | 0x30]),  # client V6 bits: ignored
            "born_timestamp": 1_700_000_000_000 + index, "born_host": BORN_HOST,
            "store_host": STORE_HOST, "reconsume_times": rng.randrange(3),
        }
        if case == 0:
            fields["properties"] = raw[:-1]  # no final 0x02: normalised by Python
        elif case == 1:
            fields["properties"] = raw + b"__CRC32#\x010123456789\x02"  # the client's, dropped
        elif case == 2:
            fields["topic"], fields["queue_id"] = SCHEDULE_TOPIC, 2
        elif case == 3:
            fields["sys_flag"] = PREPARED
        elif case == 4:
            fields["born_host"] = BORN_V6
        elif case == 5:
            fields["body"] = bytes(16 * 1024 + 1)  # over small_config's max_message_size
        elif case == 6:
            fields["topic"] = "T" * 128
        elif case == 7:
            fields["queue_id"] = 2**31  # out of its width
        elif case == 8:
            fields["flag"] = -(2**31) - 1  # out of its width, in a queue that exists
        out.append(fields)
    return out


Append = Callable[[MessageStore, dict[str, Any]], Awaitable[AppendResult]]


async def by_fields(target: MessageStore, fields: dict[str, Any]) -> AppendResult:
    return target.append_message_fields(**fields)


async def by_prepare(target: MessageStore, fields: dict[str, Any]) -> AppendResult:
    return target.append_message(prepare_message(
        **fields, append_prop_crc=target.config.enabled_append_prop_crc,
        max_message_size=target.config.max_message_size))


async def put_fields(target: MessageStore, fields: dict[str, Any]) -> AppendResult:
    return (await target.put_message_fields(**fields)).append


async def put_prepared(target: MessageStore, fields: dict[str, Any]) -> AppendResult:
    return (await target.put_message(prepare_message(
        **fields, append_prop_crc=target.config.enabled_append_prop_crc,
        max_message_size=target.config.max_message_size))).append


async def run(root: Path, append: Append, plan: list[dict[str, Any]], *,
              controller: bool = False) -> tuple[list[object], dict[str, bytes]]:
    """`controller`: confirmOffset set by hand (a master with replicas), to the log's end after
    every 37th send, so units are written later than their records."""
    clock = itertools.count(1_700_000_000_000)
    target = MessageStore(replace(small_config(root, enable_controller_mode=controller),
                                  mapped_file_size_consume_queue=20 * 30),
                          wall_ms=lambda: next(clock))
    target.open()
    target.confirm_follows_max = not controller
    results: list[object] = []
    for index, fields in enumerate(plan):
        target.fenced = index % 97 == 50  # refused writes, now and then
        try:
            results.append(await append(target, fields))
        except StoreError as err:
            results.append(f"{type(err).__name__}: {err}")
        if controller and index % 37 == 36:
            target.set_confirm_offset(target.max_phy_offset)
    target.fenced = False
    if controller:
        target.set_confirm_offset(target.max_phy_offset)
    target.close()
    return results, store_files(root)


def store_files(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*"))
            if path.is_file() and ("commitlog" in path.parts or "consumequeue" in path.parts)}


@pytest.mark.parametrize("controller", [False, True], ids=["follows", "controller"])
@pytest.mark.parametrize("with_c", [True, False], ids=["c", "python"])
@pytest.mark.parametrize(("fields", "prepared"), [(by_fields, by_prepare),
                                                  (put_fields, put_prepared)],
                         ids=["append", "put"])
async def test_append_message_fields_stores_what_prepare_and_append_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_c: bool, fields: Append,
    prepared: Append, controller: bool,
) -> None:
    assert native is not None, "store._native is not built"
    if not with_c:
        for module in (store.commitlog, store.consume_queue, store.message_encoder,
                       store.message_batch, store.message_properties, store.message_store,
                       store.recovery):
            monkeypatch.setattr(module, "_native", None)
    plan = sends(seed=13, count=600)
    async with asyncio.timeout(60):
        got, got_files = await run(tmp_path / "fields", fields, plan, controller=controller)
        expected, expected_files = await run(tmp_path / "prepare", prepared, plan,
                                             controller=controller)
    assert got == expected
    assert got_files == expected_files
    refused = [r for r in got if isinstance(r, str)]
    assert any(r.startswith("WriteRefusedError") for r in refused)
    assert any(r.startswith("MessageIllegalError") for r in refused)
    assert sum(name.startswith("commitlog") for name in got_files) > 5  # rolled
    assert sum(name.startswith("consumequeue/TopicTest/0/") for name in got_files) > 3


def spy_on_prepare_message(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The topics of the messages the store hands to `prepare_message` (the Python path)."""
    prepared: list[str] = []

    def spy(**fields: Any) -> object:
        prepared.append(fields["topic"])
        return prepare_message(**fields)

    monkeypatch.setattr(store.message_store, "prepare_message", spy)
    return prepared


def test_append_message_fields_takes_the_common_message_in_one_c_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path is taken (the benchmark's message never goes through prepare_message),
    and a message it cannot take is handed over."""
    assert native is not None, "store._native is not built"
    prepared = spy_on_prepare_message(monkeypatch)
    target = MessageStore(small_config(tmp_path))
    target.open()
    common: dict[str, Any] = {"topic": "TopicTest", "queue_id": 0, "flag": 0, "body": b"x" * 1024,
              "properties": encode_properties({"TAGS": "a", "UNIQ_KEY": "K"}), "sys_flag": 0,
              "born_timestamp": 1, "born_host": BORN_HOST, "store_host": STORE_HOST}
    first = target.append_message_fields(**common)  # a new queue, no file yet: handed over
    assert prepared == ["TopicTest"]
    results = [target.append_message_fields(**common) for _ in range(150)]
    # Handed over besides: the two records that rolled the 64 KiB commitlog file, and the
    # one whose unit starts the queue's second 100-unit file.
    assert len(target.commitlog.files.files) == 3
    assert len(prepared) == 1 + 2 + 1
    assert [r.queue_offset for r in results] == list(range(1, 151))
    assert first.tags_code == results[0].tags_code == 97  # "a".hashCode()
    target.close()


def test_a_master_in_controller_mode_takes_the_c_call_and_writes_units_at_confirm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With confirmOffset set by the HA layer the C call writes the record only; its unit is
    written from the kept fields once confirmOffset reaches it (no second read)."""
    assert native is not None, "store._native is not built"
    prepared = spy_on_prepare_message(monkeypatch)
    target = MessageStore(small_config(tmp_path, enable_controller_mode=True))
    target.open()
    target.confirm_follows_max = False
    common: dict[str, Any] = {"topic": "TopicTest", "queue_id": 0, "flag": 0, "body": b"x" * 100,
              "properties": encode_properties({"TAGS": "a", "UNIQ_KEY": "K"}), "sys_flag": 0,
              "born_timestamp": 1, "born_host": BORN_HOST, "store_host": STORE_HOST}
    target.append_message_fields(**common)  # a new queue: handed over
    results = [target.append_message_fields(**common) for _ in range(20)]
    assert prepared == ["TopicTest"]
    assert target.max_offset_in_queue("TopicTest", 0) == 0  # nothing confirmed yet

    def no_read(*args: object, **kwargs: object) -> int:
        raise AssertionError("dispatch read a record back")

    monkeypatch.setattr(target, "_scan_range", no_read)
    monkeypatch.setattr(target, "_dispatch_bulk", no_read)
    target.set_confirm_offset(results[9].end_offset)
    assert target.max_offset_in_queue("TopicTest", 0) == 11
    target.set_confirm_offset(target.max_phy_offset)
    assert target.max_offset_in_queue("TopicTest", 0) == 21
    queue = target.queue("TopicTest", 0)
    assert queue is not None
    assert queue.unit_at(20) == (results[-1].phy_offset, results[-1].wrote_bytes, 97)
    target.close()
