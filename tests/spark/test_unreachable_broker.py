"""A broker that cannot be reached fails the Spark task naming its address, not a hang (issue 10).

broker-b is stopped (SIGSTOP: a hung broker keeps its name-server connection, so its route stays
and the read plans partitions on it, where a killed broker's route goes with its connection); a
batch read of a topic on both groups must then fail, and the error must name broker-b's address.
pytest-timeout bounds the test: a read that hangs fails it.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.pyrmq_cluster import two_broker_groups

pytestmark = pytest.mark.timeout(240)


def test_a_hung_broker_fails_the_read_naming_its_address(spark: SparkSession,
                                                         tmp_path: Path) -> None:
    with two_broker_groups(tmp_path / "cluster") as cluster:
        cluster.create_topic("Unreachable", queues=2)
        hung = cluster.brokers["broker-b"]
        os.kill(hung.pid, signal.SIGSTOP)
        try:
            with pytest.raises(Exception, match=re.escape(hung.addr)):
                spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr) \
                    .option("topic", "Unreachable").load().collect()
        finally:
            os.kill(hung.pid, signal.SIGCONT)
