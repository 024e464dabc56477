"""A PySpark data source for RocketMQ topics (pyrmq or Apache RocketMQ): format `rocketmq`.

    import pyspark_rocketmq  # registers `rocketmq` with the active SparkSession, if any
    pyspark_rocketmq.register(spark)  # or explicitly
    df = spark.read.format("rocketmq").option("nameServer", "127.0.0.1:9876") \
        .option("topic", "T").load()

Spark also finds it by itself: at its first data-source lookup Spark imports every top-level
module named `pyspark_*` that defines `DefaultSource` (Spark's own discovery of Python data
sources), which this package does.

Modules: `options` (the options, checked at plan time), `planning` (pure offset planning), `errors`,
`arrow` (schema; pulled records as Arrow batches), `source` (batch and streaming readers),
`sink` (batch and streaming writers). The brokers are reached with `pyrmq_client`.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from pyspark_rocketmq.arrow import SOURCE_SCHEMA
from pyspark_rocketmq.errors import DataLossError, OptionError
from pyspark_rocketmq.options import SinkOptions, SourceOptions
from pyspark_rocketmq.sink import BatchWriter, StreamWriter, check_schema
from pyspark_rocketmq.source import BatchReader, StreamReader

__all__ = ["DataLossError", "DefaultSource", "OptionError", "RocketMQDataSource", "register"]


class RocketMQDataSource(DataSource):
    """`spark.read/readStream/write/writeStream.format("rocketmq")`."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(SourceOptions.parse(dict(self.options), streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(SourceOptions.parse(dict(self.options), streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = SinkOptions.parse(dict(self.options))
        check_schema(schema, options)
        return BatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = SinkOptions.parse(dict(self.options))
        check_schema(schema, options)
        return StreamWriter(options)


DefaultSource = RocketMQDataSource


def register(spark: SparkSession) -> None:
    """Register the `rocketmq` format with `spark` (a SparkSession)."""
    spark.dataSource.register(RocketMQDataSource)


_active = SparkSession.getActiveSession()
if _active is not None:
    register(_active)
