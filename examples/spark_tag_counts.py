"""A streaming Spark job: read a topic, count its messages per tag per minute, write Parquet.

Against `./scripts/run.sh` (name server 127.0.0.1:9876), after `examples/quickstart.py` has
sent to QuickstartTopic:

    .venv/bin/python examples/spark_tag_counts.py --topic QuickstartTopic --out run/tag-counts

It reads what the topic holds now (Trigger.AvailableNow; drop `--available-now` to keep
running), and a minute's counts are written once the watermark (storeTimestamp - 1 minute)
has passed that minute. Spark's checkpoint (`<out>/_checkpoint`) makes a restart go on where
the last run stopped.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import col, window

import pyspark_rocketmq


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name-server", default="127.0.0.1:9876")
    parser.add_argument("--topic", default="QuickstartTopic")
    parser.add_argument("--out", default="run/tag-counts")
    parser.add_argument("--available-now", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.master("local[2]").appName("tag-counts").getOrCreate()
    pyspark_rocketmq.register(spark)

    messages = (spark.readStream.format("rocketmq")
                .option("nameServer", args.name_server)
                .option("topic", args.topic)
                .option("startingOffsets", "earliest")
                .option("maxMessagesPerTrigger", "10000")
                .load())
    counts = (messages
              .withWatermark("storeTimestamp", "1 minute")
              .groupBy(window(col("storeTimestamp"), "1 minute"), col("tags"))
              .count()
              .select(col("window.start").alias("minute"), "tags", "count"))
    writer = (counts.writeStream.format("parquet")
              .option("path", args.out)
              .option("checkpointLocation", f"{args.out}/_checkpoint")
              .outputMode("append"))
    writer = writer.trigger(availableNow=True) if args.available_now else writer
    writer.start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
