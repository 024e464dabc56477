"""Child process of test_local_cluster.py: a batch and an AvailableNow streaming read under
`local-cluster[2,1,1024]` (two executor JVMs, each with its own Python workers), printed as
JSON: the rows as [brokerName, queueId, queueOffset, body] and the executors' process ids."""

from __future__ import annotations

import json
import os
import sys
import tempfile

from pyspark.sql import DataFrame, SparkSession

import pyspark_rocketmq


def rows(df: DataFrame) -> list[list[object]]:
    return sorted([r.brokerName, r.queueId, r.queueOffset, bytes(r.body).decode()]
                  for r in df.collect())


def main(namesrv: str, topic: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("pyrmq-local-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    try:
        pyspark_rocketmq.register(spark)
        batch = spark.read.format("rocketmq").option("nameServer", namesrv) \
            .option("topic", topic).load()
        pids = spark.sparkContext.parallelize(range(8), 8).map(lambda _: os.getpid()) \
            .distinct().collect()
        collected: dict[int, list[list[object]]] = {}

        def collect(df: DataFrame, batch_id: int) -> None:
            collected[batch_id] = rows(df)

        with tempfile.TemporaryDirectory() as checkpoint:
            spark.readStream.format("rocketmq").option("nameServer", namesrv) \
                .option("topic", topic).option("startingOffsets", "earliest") \
                .option("maxMessagesPerTrigger", "15").load() \
                .writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint) \
                .trigger(availableNow=True).start().awaitTermination()
        streamed = [row for batch_id in sorted(collected) for row in collected[batch_id]]
        print(json.dumps({"batch": rows(batch), "stream": sorted(streamed),
                          "batches": len(collected), "pids": pids,
                          "driver": os.getpid()}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
