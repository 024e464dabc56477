"""The same reads under `local-cluster[2,1,1024]`: separate executor JVMs and Python workers,
so nothing the reads need may live only in the driver. Runs in a child process (one
SparkContext per process; the other Spark tests hold theirs). Costs ~1.5 min here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pyrmq_client import MessageQueue
from tests.spark.test_batch_read import send
from tests.support.pyrmq_cluster import Cluster

pytestmark = pytest.mark.timeout(600)


def test_batch_and_streaming_reads_under_local_cluster(cluster: Cluster) -> None:
    cluster.create_topic("Clustered", queues=4)
    queues = [MessageQueue("Clustered", name, i) for name in ("broker-a", "broker-b")
              for i in range(4)]
    sent = send(cluster, "Clustered", [(queues[n % 8], f"c{n}".encode(), "T") for n in range(48)])
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.local_cluster_child", cluster.namesrv_addr,
         "Clustered"],
        capture_output=True, text=True, timeout=540, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = sorted([s.queue.broker_name, s.queue.queue_id, s.offset, s.body.decode()]
                      for s in sent)
    assert result["batch"] == expected
    assert result["stream"] == expected
    assert result["batches"] >= 48 // 15
    assert len(set(result["pids"])) >= 2  # the executors' own Python workers
    assert result["driver"] not in result["pids"]
