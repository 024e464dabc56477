"""Format `rocketmq` is found by Spark's own data-source lookup and registered on import,
both in a child process (its own SparkSession) whose working directory is outside the
repository, as a user's job would run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyrmq_client import MessageQueue
from tests.spark.test_batch_read import Sent, send
from tests.support.pyrmq_cluster import Cluster

pytestmark = pytest.mark.timeout(300)

CHILD = Path(__file__).with_name("discovery_child.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def discovered(cluster: Cluster) -> list[Sent]:
    cluster.create_topic("Discovered", queues=2)
    queues = [MessageQueue("Discovered", name, i) for name in ("broker-a", "broker-b")
              for i in range(2)]
    return send(cluster, "Discovered", [(queues[n % 4], f"d{n}".encode(), "T") for n in range(12)])


def run_child(mode: str, cluster: Cluster, cwd: Path) -> dict[str, object]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(CHILD), mode, cluster.namesrv_addr, "Discovered"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def expected(sent: list[Sent]) -> list[list[object]]:
    return sorted([s.queue.broker_name, s.queue.queue_id, s.offset, s.body.decode()]
                  for s in sent)


def test_spark_finds_the_format_by_itself_outside_the_repository(
    cluster: Cluster, discovered: list[Sent], tmp_path: Path
) -> None:
    assert ROOT not in tmp_path.resolve().parents
    result = run_child("lookup", cluster, tmp_path)
    assert result["cwd"] == str(tmp_path)
    assert result["imported"] is False  # the driver never imported it
    assert result["rows"] == expected(discovered)


def test_import_registers_the_format_with_the_active_session(
    cluster: Cluster, discovered: list[Sent], tmp_path: Path
) -> None:
    result = run_child("import", cluster, tmp_path)
    assert result["registered"] == ["rocketmq"]
    assert result["rows"] == expected(discovered)
