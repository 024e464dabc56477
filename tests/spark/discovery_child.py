"""Child process of test_discovery.py, run as a script from a directory outside the
repository: a SparkSession reads format `rocketmq` and prints the rows as JSON
[brokerName, queueId, queueOffset, body].

`lookup`: pyspark_rocketmq is never imported here; Spark must find `rocketmq` by its own
discovery (a Python worker imports the top-level `pyspark_*` modules pkgutil lists).
`import`: `import pyspark_rocketmq` after the session exists must register the format with it
(the registrations are recorded and printed too)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceRegistration


def main(mode: str, namesrv: str, topic: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("pyrmq-discovery")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    registered: list[str] = []
    try:
        if mode == "import":
            register = DataSourceRegistration.register

            def recording(self: DataSourceRegistration,
                          dataSource: type[DataSource]) -> None:  # noqa: N803 (its name)
                registered.append(dataSource.name())
                register(self, dataSource)

            DataSourceRegistration.register = recording  # type: ignore[method-assign]
            import pyspark_rocketmq  # noqa: F401
        imported = "pyspark_rocketmq" in sys.modules
        rows: list[Any] = sorted(
            [r.brokerName, r.queueId, r.queueOffset, bytes(r.body).decode()]
            for r in spark.read.format("rocketmq").option("nameServer", namesrv)
            .option("topic", topic).load().collect())
        print(json.dumps({"rows": rows, "imported": imported, "registered": registered,
                          "cwd": os.getcwd()}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
