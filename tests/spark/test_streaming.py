"""Streaming reads with Spark's checkpoint: a query stopped between micro-batches and restarted
outputs every message exactly once, in queue order per queue; maxMessagesPerTrigger bounds
each micro-batch, with Trigger.AvailableNow too."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from pyrmq_client import BrokerClient, ClusterClient, Message
from tests.interop.pyrmq_env import wait_until
from tests.support.pyrmq_cluster import Cluster

pytestmark = pytest.mark.timeout(300)

Row3 = tuple[str, int, int]  # brokerName, queueId, queueOffset


def send_round_robin(cluster: Cluster, topic: str, count: int, prefix: str) -> None:
    async def run() -> None:
        async with ClusterClient(cluster.namesrv_addr) as client:
            for i in range(count):
                await client.send(Message(topic, f"{prefix}{i}".encode(), tags=f"T{i % 3}"),
                                  producer_group="PG")

    asyncio.run(run())


class Collector:
    """foreachBatch target: the rows of each batch id (a replayed batch id replaces its rows,
    as an idempotent sink does)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[Row3]] = {}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.batches[batch_id] = [(r.brokerName, r.queueId, r.queueOffset)
                                  for r in df.select("brokerName", "queueId", "queueOffset")
                                  .collect()]

    def in_order(self) -> list[Row3]:
        return [row for batch_id in sorted(self.batches) for row in self.batches[batch_id]]


def start(spark: SparkSession, cluster: Cluster, checkpoint: Path, collector: Collector,
          trigger: Callable[..., object] | None = None, **options: str) -> StreamingQuery:
    reader = spark.readStream.format("rocketmq").option("nameServer", cluster.namesrv_addr)
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = reader.load().writeStream.foreachBatch(collector) \
        .option("checkpointLocation", str(checkpoint))
    writer = writer.trigger(availableNow=True) if trigger is None else trigger(writer)  # type: ignore[assignment]
    return writer.start()


def assert_exactly_once_in_queue_order(rows: list[Row3],
                                       counts: dict[tuple[str, int], int]) -> None:
    per_queue: dict[tuple[str, int], list[int]] = {}
    for broker, queue, offset in rows:
        per_queue.setdefault((broker, queue), []).append(offset)
    assert per_queue == {
        q: list(range(n)) for q, n in counts.items() if n}


def queue_counts(cluster: Cluster, topic: str) -> dict[tuple[str, int], int]:
    async def run() -> dict[tuple[str, int], int]:
        async with ClusterClient(cluster.namesrv_addr) as client:
            queues = await client.read_queues(topic)
            return {(q.broker_name, q.queue_id): await client.max_offset(q) for q in queues}

    return asyncio.run(run())


def test_stopped_and_restarted_query_reads_every_message_once_in_queue_order(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    cluster.create_topic("Stream", queues=4)
    send_round_robin(cluster, "Stream", 40, "a")
    checkpoint = tmp_path / "checkpoint"
    collector = Collector()
    query = start(spark, cluster, checkpoint, collector,
                  trigger=lambda w: w.trigger(processingTime="0 seconds"),
                  topic="Stream", startingOffsets="earliest", maxMessagesPerTrigger="7")
    try:
        wait_until(lambda: len(collector.batches) >= 2, timeout_s=120,
                   what="two micro-batches of the first run")
    finally:
        query.stop()
    assert all(len(rows) <= 7 for rows in collector.batches.values())
    first_run = len(collector.in_order())
    assert first_run < 40  # stopped part-way
    # Restart from the checkpoint (startingOffsets no longer matters), drain with AvailableNow.
    query = start(spark, cluster, checkpoint, collector, topic="Stream",
                  startingOffsets="latest", maxMessagesPerTrigger="7")
    query.awaitTermination(120)
    assert all(len(rows) <= 7 for rows in collector.batches.values())
    assert len(collector.batches) >= 40 // 7
    assert_exactly_once_in_queue_order(collector.in_order(), queue_counts(cluster, "Stream"))
    # More messages, another restart: only the new ones, still exactly once overall.
    send_round_robin(cluster, "Stream", 24, "b")
    query = start(spark, cluster, checkpoint, collector, topic="Stream")
    query.awaitTermination(120)
    rows = collector.in_order()
    assert len(rows) == 64
    assert_exactly_once_in_queue_order(rows, queue_counts(cluster, "Stream"))


def test_new_query_starts_at_latest_by_default(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    cluster.create_topic("Latest", queues=2)
    send_round_robin(cluster, "Latest", 6, "old")
    collector = Collector()
    start(spark, cluster, tmp_path / "cp", collector, topic="Latest").awaitTermination(120)
    assert collector.in_order() == []
    send_round_robin(cluster, "Latest", 5, "new")
    start(spark, cluster, tmp_path / "cp", collector, topic="Latest").awaitTermination(120)
    assert len(collector.in_order()) == 5


def test_streaming_bad_options(spark: SparkSession, cluster: Cluster, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="rocketmq option endingOffsets"):
        start(spark, cluster, tmp_path / "cp", Collector(), topic="Stream",
              endingOffsets="latest").awaitTermination(60)
    with pytest.raises(Exception, match="rocketmq option maxMessagesPerTrigger"):
        start(spark, cluster, tmp_path / "cp2", Collector(), topic="Stream",
              maxMessagesPerTrigger="0").awaitTermination(60)


def test_a_vanished_queue_is_data_loss_unless_fail_on_data_loss_is_false(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    cluster.create_topic("Shrink", queues=2)
    send_round_robin(cluster, "Shrink", 8, "s")
    checkpoint = tmp_path / "cp"
    collector = Collector()
    start(spark, cluster, checkpoint, collector, topic="Shrink",
          startingOffsets="earliest").awaitTermination(120)
    assert len(collector.in_order()) == 8

    async def shrink() -> None:
        host, port = cluster.brokers["broker-b"].addr.rsplit(":", 1)
        async with await BrokerClient.connect(host, int(port)) as client:
            await client.create_topic("Shrink", read_queue_nums=1, write_queue_nums=1)

    asyncio.run(shrink())
    wait_until(lambda: cluster.read_queue_count("Shrink") == 3, timeout_s=20,
               what="broker-b:1 of Shrink leaves the route")
    with pytest.raises(Exception, match=r"Shrink@broker-b:1 .* no longer exists"):
        start(spark, cluster, checkpoint, collector, topic="Shrink").awaitTermination(120)
    send_round_robin(cluster, "Shrink", 6, "t")
    start(spark, cluster, checkpoint, collector, topic="Shrink",
          failOnDataLoss="false").awaitTermination(120)
    assert len(collector.in_order()) == 14
