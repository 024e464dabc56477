"""ScheduleMessageService on a real store with a controlled clock: delivery in order when due,
delayOffset.json in Java's format, persisted only behind flushed re-puts."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from broker.config_file import ConfigFile
from broker.schedule_message_service import (
    RETRY_WAIT_MS,
    UNITS_PER_READ,
    ScheduleMessageService,
)
from store.host_port import HostPort
from store.message_decoder import decode_record
from store.message_encoder import prepare_message
from store.message_properties import encode_properties
from store.message_store import MessageStore
from store.record_layout import MessageRecord
from store.schedule import SCHEDULE_TOPIC, parse_message_delay_level, time_up_destination
from tests.support.store_helpers import small_config

HOST = HostPort(bytes([127, 0, 0, 1]), 10911)
DELAYS = parse_message_delay_level("1s 5s")


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[MessageStore]:
    s = MessageStore(small_config(tmp_path / "store", message_delay_level="1s 5s"), wall_ms=clock)
    s.open()
    yield s
    s.close()


def schedule(store: MessageStore, key: str, level: int) -> None:
    properties = {"DELAY": str(level), "REAL_TOPIC": "T", "REAL_QID": "1", "KEYS": key}
    store.append_message(prepare_message(
        topic=SCHEDULE_TOPIC, queue_id=level - 1, flag=0, body=key.encode(),
        properties=encode_properties(properties), sys_flag=0, born_timestamp=0,
        born_host=HOST, store_host=HOST, max_message_size=1 << 20,
    ))


def service_for(store: MessageStore, tmp_path: Path, clock: Clock,
                delivered: list[str]) -> ScheduleMessageService:
    async def put_time_up(records: Sequence[MessageRecord]) -> int:
        for record in records:
            properties = record.properties_map()
            topic, queue_id = time_up_destination(properties)
            await store.put_message(prepare_message(
                topic=topic, queue_id=queue_id, flag=0, body=record.body,
                properties=encode_properties(properties), sys_flag=0, born_timestamp=0,
                born_host=HOST, store_host=HOST, max_message_size=1 << 20,
            ))
            delivered.append(properties["KEYS"])
        return len(records)

    return ScheduleMessageService(
        store=store, delays_ms=DELAYS, file=ConfigFile(tmp_path / "config" / "delayOffset.json"),
        put_time_up=put_time_up, flush_delay_offset_interval_ms=10_000, wall_ms=clock,
    )


async def test_each_level_delivers_in_order_when_due(
    store: MessageStore, tmp_path: Path, clock: Clock
) -> None:
    delivered: list[str] = []
    service = service_for(store, tmp_path, clock, delivered)
    service.load()
    schedule(store, "a", 1)
    clock.now_ms += 300
    schedule(store, "b", 1)
    schedule(store, "slow", 2)
    assert await service.deliver_due(1) == 700  # a is due 700 ms from now
    assert await service.deliver_due(2) == 1000  # capped: look again within a second
    clock.now_ms += 700
    await service.deliver_due(1)
    assert delivered == ["a"]
    clock.now_ms += 300
    await service.deliver_due(1)
    assert delivered == ["a", "b"]
    assert service.offset_table == {1: 2, 2: 0}
    clock.now_ms += 4_000
    await service.deliver_due(2)
    assert delivered == ["a", "b", "slow"]
    stored = store.get_messages("T", 1, 0, max_count=9).messages
    assert [decode_record(raw).body for raw in stored] == [b"a", b"b", b"slow"]
    assert all("DELAY" not in decode_record(raw).properties_map() for raw in stored)


async def test_offsets_file_is_javas_and_written_after_the_flush(
    store: MessageStore, tmp_path: Path, clock: Clock
) -> None:
    delivered: list[str] = []
    service = service_for(store, tmp_path, clock, delivered)
    service.load()
    for key in "abc":
        schedule(store, key, 1)
    clock.now_ms += 1_000
    await service.deliver_due(1)
    end_of_reputs = store.max_phy_offset
    assert store.commitlog.flushed_where < end_of_reputs  # async flush: not on disk yet
    assert await service.persist() == {1: 3, 2: 0}
    assert store.commitlog.flushed_where >= end_of_reputs
    text = (tmp_path / "config" / "delayOffset.json").read_text()
    assert '"offsetTable":{1:3,2:0}' in text.replace("\n", "").replace("\t", "")
    assert json.loads(text.replace("{1:", '{"1":').replace(",2:", ',"2":'))["dataVersion"]

    again = service_for(store, tmp_path, clock, [])
    again.load()
    assert again.offset_table == {1: 3, 2: 0}


def test_java_offsets_file_loads_and_is_clamped_into_the_queues(
    store: MessageStore, tmp_path: Path, clock: Clock
) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "delayOffset.json").write_text(
        '{\n\t"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1},\n'
        '\t"offsetTable":{1:9,2:0}\n}'
    )
    schedule(store, "a", 1)
    service = service_for(store, tmp_path, clock, [])
    service.load()
    assert service.offset_table == {1: 1, 2: 0}  # 9 is past the queue's end (1)


async def test_a_backlog_goes_out_in_order_in_bounded_batches(
    store: MessageStore, tmp_path: Path, clock: Clock
) -> None:
    batches: list[int] = []
    delivered: list[str] = []

    async def put_time_up(records: Sequence[MessageRecord]) -> int:
        batches.append(len(records))
        delivered.extend(record.body.decode() for record in records)
        return len(records)

    service = ScheduleMessageService(
        store=store, delays_ms=DELAYS, file=ConfigFile(tmp_path / "config" / "delayOffset.json"),
        put_time_up=put_time_up, flush_delay_offset_interval_ms=10_000, wall_ms=clock,
    )
    service.load()
    keys = [str(i) for i in range(UNITS_PER_READ * 2 + 5)]
    for key in keys:
        schedule(store, key, 1)
    clock.now_ms += 300
    schedule(store, "later", 1)
    clock.now_ms += 700
    assert await service.deliver_due(1) == 300  # the whole due backlog, then "later" is 300 ms off
    assert delivered == keys
    assert max(batches) <= UNITS_PER_READ
    assert len(batches) == 3
    assert service.offset_table[1] == len(keys)
    assert service.delivered == len(keys)


async def test_a_refused_re_put_is_tried_again_from_that_message(
    store: MessageStore, tmp_path: Path, clock: Clock
) -> None:
    delivered: list[str] = []
    refuse = [True]

    async def put_time_up(records: Sequence[MessageRecord]) -> int:
        taken = 1 if refuse[0] else len(records)  # the store refuses the second one, once
        delivered.extend(record.body.decode() for record in records[:taken])
        return taken

    service = ScheduleMessageService(
        store=store, delays_ms=DELAYS, file=ConfigFile(tmp_path / "config" / "delayOffset.json"),
        put_time_up=put_time_up, flush_delay_offset_interval_ms=10_000, wall_ms=clock,
    )
    service.load()
    for key in "abc":
        schedule(store, key, 1)
    clock.now_ms += 1_000
    assert await service.deliver_due(1) == RETRY_WAIT_MS
    assert delivered == ["a"]
    assert service.offset_table[1] == 1
    refuse[0] = False
    await service.deliver_due(1)
    assert delivered == ["a", "b", "c"]
    assert service.offset_table[1] == 3
