"""The sink: a DataFrame written (batch and streaming) reads back equal."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from pyspark_rocketmq.sink import IDEMPOTENCY_PROPERTY
from tests.support.pyrmq_cluster import Cluster

pytestmark = pytest.mark.timeout(300)

SCHEMA = StructType([
    StructField("body", BinaryType()),
    StructField("tags", StringType()),
    StructField("keys", StringType()),
    StructField("properties", MapType(StringType(), StringType())),
])
ROWS = [(f"body-{i}".encode(), f"T{i % 3}", f"key-{i}", {"n": str(i)}) for i in range(150)]


def read_back(spark: SparkSession, cluster: Cluster, topic: str) -> list[tuple[object, ...]]:
    rows = spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr) \
        .option("topic", topic).option("includeProperties", "true").load().collect()
    return sorted((bytes(r.body), r.tags, r.keys, {"n": r.properties["n"]}) for r in rows)


def test_batch_write_reads_back_equal(spark: SparkSession, cluster: Cluster) -> None:
    cluster.create_topic("SinkBatch", queues=4)
    df = spark.createDataFrame(ROWS, SCHEMA).repartition(3)
    df.write.format("rocketmq").mode("append").option("nameServer", cluster.namesrv_addr) \
        .option("topic", "SinkBatch").option("sendBatchSize", "16").save()
    assert read_back(spark, cluster, "SinkBatch") == sorted(ROWS)
    queues = spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr) \
        .option("topic", "SinkBatch").load().select("brokerName").distinct().count()
    assert queues == 2  # spread over both broker groups


def test_queue_id_column_and_idempotency_key(spark: SparkSession, cluster: Cluster) -> None:
    cluster.create_topic("SinkQueued", queues=2)
    schema = StructType([StructField("body", StringType()), StructField("queueId", IntegerType()),
                         StructField("topic", StringType())])
    df = spark.createDataFrame([(f"q{i}", 1, "SinkQueued") for i in range(10)], schema)
    df.write.format("rocketmq").mode("append").option("nameServer", cluster.namesrv_addr) \
        .option("idempotencyKey", "true").save()
    rows = spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr) \
        .option("topic", "SinkQueued").option("includeProperties", "true").load().collect()
    assert sorted(bytes(r.body).decode() for r in rows) == sorted(f"q{i}" for i in range(10))
    # queueId 1 is the second writable queue in (brokerName, queueId) order: broker-a:1.
    assert {(r.brokerName, r.queueId) for r in rows} == {("broker-a", 1)}
    keys = {r.properties[IDEMPOTENCY_PROPERTY] for r in rows}
    assert len(keys) == 10


def test_streaming_write_reads_back_equal(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    cluster.create_topic("SinkIn", queues=4)
    cluster.create_topic("SinkOut", queues=4)
    spark.createDataFrame(ROWS, SCHEMA).write.format("rocketmq").mode("append") \
        .option("nameServer", cluster.namesrv_addr).option("topic", "SinkIn").save()
    stream = spark.readStream.format("rocketmq").option("nameServer", cluster.namesrv_addr) \
        .option("topic", "SinkIn").option("startingOffsets", "earliest") \
        .option("includeProperties", "true").load() \
        .selectExpr("body", "tags", "keys", "map('n', properties['n']) AS properties")
    query = stream.writeStream.format("rocketmq").option("nameServer", cluster.namesrv_addr) \
        .option("topic", "SinkOut").option("checkpointLocation", str(tmp_path / "cp")) \
        .trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert read_back(spark, cluster, "SinkOut") == sorted(ROWS)


def test_a_replayed_micro_batch_writes_the_same_idempotency_keys(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    """A micro-batch whose sink output was sent but not committed (its commit log entry is
    gone, as after a crash between the two) is replayed on restart: every row is written twice,
    both times with the same key, and the key is the query's id, batch, partition and row."""
    cluster.create_topic("ReplayIn", queues=2)
    cluster.create_topic("ReplayOut", queues=2)
    spark.createDataFrame(ROWS[:40], SCHEMA).write.format("rocketmq").mode("append") \
        .option("nameServer", cluster.namesrv_addr).option("topic", "ReplayIn").save()
    checkpoint = tmp_path / "cp"

    def run() -> str:
        query = spark.readStream.format("rocketmq").option("nameServer", cluster.namesrv_addr) \
            .option("topic", "ReplayIn").option("startingOffsets", "earliest").load() \
            .select("body").writeStream.format("rocketmq") \
            .option("nameServer", cluster.namesrv_addr).option("topic", "ReplayOut") \
            .option("idempotencyKey", "true").option("checkpointLocation", str(checkpoint)) \
            .trigger(availableNow=True).start()
        assert query.awaitTermination(120), "the query did not finish within 120 s"
        return str(query.id)

    query_id = run()
    commits = sorted(p.name for p in (checkpoint / "commits").iterdir()
                     if not p.name.startswith("."))
    assert commits == ["0"]
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)  # the local file system's checksum
    assert run() == query_id
    rows = spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr) \
        .option("topic", "ReplayOut").option("includeProperties", "true").load().collect()
    keys: dict[bytes, list[str]] = {}
    for r in rows:
        keys.setdefault(bytes(r.body), []).append(r.properties[IDEMPOTENCY_PROPERTY])
    assert sorted(keys) == sorted(row[0] for row in ROWS[:40])
    assert all(len(found) == 2 and found[0] == found[1] for found in keys.values()), keys
    distinct = {found[0] for found in keys.values()}
    assert len(distinct) == 40
    assert all(key.startswith(f"{query_id}-0-") for key in distinct)


@pytest.mark.parametrize(("columns", "options", "match"), [
    ("tags", {"topic": "SinkBatch"}, "a body column"),
    ("body", {}, "rocketmq option topic"),
    ("body, 1 AS other", {"topic": "SinkBatch"}, "only the columns"),
])
def test_sink_bad_input(spark: SparkSession, cluster: Cluster, columns: str,
                        options: dict[str, str], match: str) -> None:
    df = spark.createDataFrame(ROWS, SCHEMA).selectExpr(*columns.split(", "))
    writer = df.write.format("rocketmq").mode("append").option("nameServer", cluster.namesrv_addr)
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=match):
        writer.save()
