"""Batch reads of a topic on two pyrmq broker groups x 4 queues: exactly the rows sent, with the
right columns; offsets, timestamps and tags select exactly the right rows; bad options fail at
plan time naming the option."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import pytest
from pyspark.sql import DataFrame, SparkSession

from pyrmq_client import ClusterClient, Message, MessageQueue
from tests.interop.pyrmq_env import wait_until
from tests.support.pyrmq_cluster import Cluster

pytestmark = pytest.mark.timeout(300)

QUEUES = [MessageQueue("Orders", name, i) for name in ("broker-a", "broker-b") for i in range(4)]
PER_QUEUE = 10


@dataclass(frozen=True)
class Sent:
    queue: MessageQueue
    offset: int
    body: bytes
    tags: str
    keys: str
    msg_id: str


def send(cluster: Cluster, topic: str, bodies: list[tuple[MessageQueue, bytes, str]]) -> list[Sent]:
    async def run() -> list[Sent]:
        sent = []
        async with ClusterClient(cluster.namesrv_addr) as client:
            for queue, body, tags in bodies:
                message = Message(topic, body, tags=tags, keys=f"k-{body.decode()}",
                                  properties={"color": "blue"})
                used, result = await client.send(message, producer_group="PG", queue=queue)
                assert result.uniq_msg_id is not None
                sent.append(Sent(used, result.queue_offset, body, tags, message.keys or "",
                                 result.uniq_msg_id))
        return sent

    return asyncio.run(run())


@pytest.fixture(scope="module")
def orders(cluster: Cluster) -> list[Sent]:
    cluster.create_topic("Orders", queues=4)
    cluster.create_topic("Timed", queues=4)
    return send(cluster, "Orders", [
        (queue, f"{queue.broker_name}-{queue.queue_id}-{n}".encode(), "TagA" if n % 2 else "TagB")
        for n in range(PER_QUEUE) for queue in QUEUES
    ])


def read(spark: SparkSession, cluster: Cluster, **options: str) -> DataFrame:
    reader = spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def keyed(df: DataFrame) -> set[tuple[str, int, int, bytes]]:
    return {(r.brokerName, r.queueId, r.queueOffset, bytes(r.body))
            for r in df.select("brokerName", "queueId", "queueOffset", "body").collect()}


def expected(sent: list[Sent], keep: object = None) -> set[tuple[str, int, int, bytes]]:
    return {(s.queue.broker_name, s.queue.queue_id, s.offset, s.body) for s in sent
            if keep is None or keep(s)}  # type: ignore[operator]


def test_reads_exactly_the_rows_sent_with_every_column(
    spark: SparkSession, cluster: Cluster, orders: list[Sent]
) -> None:
    df = read(spark, cluster, topic="Orders", includeProperties="true")
    rows = df.collect()
    assert len(rows) == len(orders) == 80
    assert keyed(df) == expected(orders)
    by_id = {s.msg_id: s for s in orders}
    for row in rows:
        sent = by_id[row.msgId]
        assert (row.topic, row.tags, row.keys) == ("Orders", sent.tags, sent.keys)
        assert row.properties["color"] == "blue"
        assert row.properties["UNIQ_KEY"] == sent.msg_id
        assert row.storeHost == cluster.brokers[row.brokerName].addr
        assert row.bornHost.startswith("127.0.0.1:")
        assert row.bornTimestamp <= row.storeTimestamp
        assert (row.reconsumeTimes, row.flag) == (0, 0)
        assert row.commitLogOffset >= 0
    first = read(spark, cluster, topic="Orders").first()
    assert first is not None
    assert first.properties is None  # includeProperties defaults to false


@pytest.mark.parametrize(("starting", "ending", "keep"), [
    ("earliest", "latest", lambda s: True),
    ('{"Orders": {"broker-a": {"0": 3}, "broker-b": {"3": 9}}}', "latest",
     lambda s: s.offset >= {("broker-a", 0): 3, ("broker-b", 3): 9}.get(
         (s.queue.broker_name, s.queue.queue_id), 0)),
    ("earliest", '{"Orders": {"broker-a": {"1": 2}, "broker-b": {"0": 5}}}',
     lambda s: s.offset < {("broker-a", 1): 2, ("broker-b", 0): 5}.get(
         (s.queue.broker_name, s.queue.queue_id), PER_QUEUE)),
    ('{"Orders": {"broker-a": {"2": 4}}}',
     '{"Orders": {"broker-a": {"2": 6}, "broker-b": {"1": -1}}}',
     lambda s: (s.queue.broker_name, s.queue.queue_id) != ("broker-a", 2) or 4 <= s.offset < 6),
])
def test_offsets_select_exactly_the_right_rows(
    spark: SparkSession, cluster: Cluster, orders: list[Sent], starting: str, ending: str,
    keep: object,
) -> None:
    df = read(spark, cluster, topic="Orders", startingOffsets=starting, endingOffsets=ending)
    assert keyed(df) == expected(orders, keep)


def test_sub_expression_min_partitions_and_pull_batch_size(
    spark: SparkSession, cluster: Cluster, orders: list[Sent]
) -> None:
    df = read(spark, cluster, topic="Orders", subExpression="TagA", pullBatchSize="3",
              minPartitions="20")
    assert df.rdd.getNumPartitions() >= 20
    assert keyed(df) == expected(orders, lambda s: s.tags == "TagA")


def test_starting_timestamp_selects_the_messages_stored_from_then_on(
    spark: SparkSession, cluster: Cluster, orders: list[Sent]
) -> None:
    queues = [MessageQueue("Timed", q.broker_name, q.queue_id) for q in QUEUES]
    first = send(cluster, "Timed", [(q, f"old-{i}".encode(), "T") for i, q in enumerate(queues)])
    stored = read(spark, cluster, topic="Timed").agg({"storeTimestamp": "max"}).first()
    assert stored is not None
    boundary_ms = int(stored[0].timestamp() * 1000) + 1
    wait_until(lambda: time.time() * 1000 > boundary_ms, timeout_s=5, what="the clock passes")
    second = send(cluster, "Timed", [(q, f"new-{i}".encode(), "T") for i, q in enumerate(queues)])
    df = read(spark, cluster, topic="Timed", startingTimestamp=str(boundary_ms))
    assert keyed(df) == expected(second)
    assert len(first) == len(second) == 8


def test_several_topics_read_together(
    spark: SparkSession, cluster: Cluster, orders: list[Sent]
) -> None:
    cluster.create_topic("Returns", queues=2)
    queues = [MessageQueue("Returns", name, i) for name in ("broker-a", "broker-b")
              for i in range(2)]
    returns = send(cluster, "Returns", [(queues[n % 4], f"r{n}".encode(), "R") for n in range(16)])
    df = read(spark, cluster, topics="Orders, Returns",
              startingOffsets='{"Returns": {"broker-b": {"1": 2}}}')
    got = {(r.topic, r.brokerName, r.queueId, r.queueOffset, bytes(r.body))
           for r in df.select("topic", "brokerName", "queueId", "queueOffset", "body").collect()}
    assert got == {("Orders", broker, queue, offset, body)
                   for broker, queue, offset, body in expected(orders)} | {
        ("Returns", s.queue.broker_name, s.queue.queue_id, s.offset, s.body) for s in returns
        if (s.queue.broker_name, s.queue.queue_id) != ("broker-b", 1) or s.offset >= 2}
    assert len(got) == 80 + 16 - 2


@pytest.mark.parametrize(("options", "match"), [
    ({"topic": "Orders", "nameServer": ""}, "nameServer"),
    ({"topic": "Orders", "nameServer": "nohost"}, "nameServer"),
    ({}, "topic/topics"),
    ({"topic": "Orders", "topics": "Orders"}, "topic/topics"),
    ({"topic": "Orders", "startingOffsets": "latest"}, "startingOffsets"),
    ({"topic": "Orders", "startingOffsets": "{bad json"}, "startingOffsets"),
    ({"topic": "Orders", "startingOffsets": json.dumps({"Orders": {"broker-a": {"x": 1}}})},
     "startingOffsets"),
    ({"topic": "Orders", "endingOffsets": "earliest"}, "endingOffsets"),
    ({"topic": "Orders", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"topic": "Orders", "pullBatchSize": "0"}, "pullBatchSize"),
    ({"topic": "Orders", "pullBatchSize": "many"}, "pullBatchSize"),
    ({"topic": "Orders", "minPartitions": "-1"}, "minPartitions"),
    ({"topic": "Orders", "failoverTimeoutMs": "-5"}, "failoverTimeoutMs"),
    ({"topic": "Orders", "startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"topic": "Orders", "maxMessagesPerTrigger": "5"}, "maxMessagesPerTrigger"),
])
def test_bad_options_fail_at_plan_time_naming_the_option(
    spark: SparkSession, cluster: Cluster, options: dict[str, str], match: str
) -> None:
    reader = spark.read.format("rocketmq")
    options = {"nameServer": cluster.namesrv_addr, **options}
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=f"rocketmq option {match}") as caught:
        reader.load().collect()
    assert "expected" in str(caught.value)


def test_an_unreachable_name_server_fails_naming_it(
    spark: SparkSession,
) -> None:
    with pytest.raises(Exception, match=r"127\.0\.0\.1:1"):
        spark.read.format("rocketmq").option("nameServer", "127.0.0.1:1") \
            .option("topic", "Orders").load().collect()
