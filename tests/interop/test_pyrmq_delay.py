"""Delay levels, retry and DLQ through pyrmq (broker/schedule_message_service.py).

1. A Java DefaultMQPushConsumer that always answers RECONSUME_LATER (delay level 1, 1 s;
   maxReconsumeTimes 2) sees each message three times, each redelivery at least the level's
   delay after the previous one and with reconsumeTimes + 1; then pyrmq holds it, once, in
   `%DLQ%<group>`.
2. A broker killed with SIGKILL while messages sent with `DELAY` are in flight (some due and
   delivered, some not yet) loses none of them: after the restart every one reaches its topic.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from pathlib import Path
from typing import Final

import pytest

from pyrmq_client import BrokerClient, Message, Producer, PullStatus
from store.record_layout import MessageRecord
from tests.interop.conftest import PyrmqCluster
from tests.interop.pyrmq_env import PyrmqEnv, wait_until

pytestmark = pytest.mark.interop

RETRY_TOPIC: Final = "PyrmqRetryDlq"
RETRY_GROUP: Final = "retry_dlq_group"
RETRY_COUNT: Final = 10
MAX_RECONSUME_TIMES: Final = 2
LEVEL_1_MS: Final = 1000
RETRY_CONSUME_MAIN: Final = "pyrmq.interop.RetryConsume"
CLIENT_SYSPROPS: Final = {"rocketmq.client.rebalance.waitInterval": "1000"}
DELAY_TOPIC: Final = "PyrmqDelayKill"
DELAY_COUNT: Final = 200


async def pull_all(addr: str, topic: str, queues: int) -> list[MessageRecord]:
    host, port = addr.rsplit(":", 1)
    records: list[MessageRecord] = []
    async with await BrokerClient.connect(host, int(port)) as client:
        for queue_id in range(queues):
            offset = 0
            while True:
                result = await client.pull("pyrmq_delay_inspect", topic, queue_id, offset)
                if result.status is not PullStatus.FOUND:
                    break
                records.extend(result.messages)
                offset = result.next_begin_offset
    return records


def test_reconsume_later_comes_back_after_the_delay_then_lands_in_the_dlq(
    pyrmq_cluster: PyrmqCluster,
) -> None:
    java, namesrv = pyrmq_cluster.java, pyrmq_cluster.namesrv.addr
    java.produce(namesrv, RETRY_TOPIC, RETRY_COUNT, "sync", "TagA", key_prefix="retry")
    consumer = java.start_java(
        RETRY_CONSUME_MAIN,
        [namesrv, RETRY_GROUP, RETRY_TOPIC, str(RETRY_COUNT), "--delay-level=1",
         f"--max-reconsume-times={MAX_RECONSUME_TIMES}", "--linger-ms=3000", "--timeout-s=90"],
        name="retry-consume",
        sysprops=CLIENT_SYSPROPS,
    )
    try:
        assert consumer.wait(120) == 0, consumer.diagnostics()
    finally:
        consumer.kill()
    deliveries: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for line in consumer.stdout().splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[0] == "DELIVERY":
            deliveries[fields[1]].append((int(fields[2]), int(fields[3])))
    assert set(deliveries) == {f"retry-{i}" for i in range(RETRY_COUNT)}
    for key, seen in deliveries.items():
        assert [times for times, _ in seen] == list(range(MAX_RECONSUME_TIMES + 1)), (key, seen)
        for (_, before_ms), (_, after_ms) in itertools.pairwise(seen):
            # At least level 1's delay; far less than level 3's (10 s), the broker's default.
            assert LEVEL_1_MS <= after_ms - before_ms < 8_000, (key, seen)
    dead = asyncio.run(pull_all(pyrmq_cluster.broker.addr, f"%DLQ%{RETRY_GROUP}", 1))
    assert sorted(record.keys or "" for record in dead) == sorted(deliveries)
    assert {record.reconsume_times for record in dead} == {MAX_RECONSUME_TIMES + 1}


async def send_delayed(addr: str, count: int, *, spread_s: float) -> dict[str, int]:
    """Send `count` level-1 messages over `spread_s`; returns key -> time before its send
    (ms), which its store timestamp in the schedule topic is not earlier than."""
    host, port = addr.rsplit(":", 1)
    sent: dict[str, int] = {}
    async with await BrokerClient.connect(host, int(port)) as client:
        producer = Producer(client, "PG_delay")
        for index in range(count):
            key = f"delayed-{index}"
            message = Message(DELAY_TOPIC, key.encode(), tags="TagA", keys=key,
                              properties={"DELAY": "1"})
            sent[key] = time.time_ns() // 1_000_000
            await producer.send(message, queue_id=index % 4)
            await asyncio.sleep(spread_s / count)
    return sent


def test_scheduled_messages_survive_a_kill_9(tmp_path: Path) -> None:
    with PyrmqEnv(tmp_path / "pyrmq") as env:
        store = tmp_path / "store"
        namesrv = env.start_namesrv()
        broker = env.start_broker(namesrv, store_dir=store, extra_conf={
            "flushDelayOffsetInterval": 500,
        })
        sent = asyncio.run(send_delayed(broker.addr, DELAY_COUNT, spread_s=2.0))
        # Right after the last send: the first ones are delivered (and some of their offsets
        # persisted), the last second's are still waiting in SCHEDULE_TOPIC_XXXX.
        delivered_before = asyncio.run(pull_all(broker.addr, DELAY_TOPIC, 4))
        broker.kill()
        assert 0 < len(delivered_before) < DELAY_COUNT, len(delivered_before)
        port = int(broker.addr.rsplit(":", 1)[1])
        restarted = env.start_broker(namesrv, store_dir=store, listen_port=port,
                                     name="broker-a-restarted")
        found: set[str] = set()

        def all_delivered() -> bool:
            records = asyncio.run(pull_all(restarted.addr, DELAY_TOPIC, 4))
            found.update(record.keys or "" for record in records)
            return found >= set(sent)

        wait_until(all_delivered, timeout_s=30, what="every delayed message delivered",
                   process=restarted)
        records = asyncio.run(pull_all(restarted.addr, DELAY_TOPIC, 4))
        assert {r.keys for r in records} == set(sent)
        for record in records:
            assert record.keys is not None
            assert record.store_timestamp >= sent[record.keys] + LEVEL_1_MS, record
            assert "DELAY" not in record.properties_map()
