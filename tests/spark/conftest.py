"""One SparkSession (local[2]) for every Spark test: starting one costs seconds of JVM start-up."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

import pyspark_rocketmq
from tests.support.pyrmq_cluster import Cluster, two_broker_groups


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pyrmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    pyspark_rocketmq.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A name server and broker groups broker-a and broker-b; each test module creates its
    own topics."""
    with two_broker_groups(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running
