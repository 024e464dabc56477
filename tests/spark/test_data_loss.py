"""failOnDataLoss when retention has deleted the start of a queue (its min offset raised by the
broker's own clean-up: 4 KiB commitlog files, fileReservedTime 0, every hour a delete hour) and
when a queue ends before a planned end: true fails naming the queue and offsets, false reads
what is left, never from offset 0 again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from pyrmq_client import ClusterClient, Message, MessageQueue
from pyspark_rocketmq.errors import DataLossError
from pyspark_rocketmq.options import SourceOptions
from pyspark_rocketmq.planning import QueueRange
from pyspark_rocketmq.source import BatchReader, RangePartition
from tests.interop.pyrmq_env import wait_until
from tests.support.pyrmq_cluster import Cluster, two_broker_groups

pytestmark = pytest.mark.timeout(300)

QUEUE = MessageQueue("Shrinking", "broker-a", 0)
SENT = 30  # bodies of 1000 bytes: three records per 4 KiB commitlog file
COMMITLOG_FILE = 4096
Shrunk = tuple[Cluster, list[tuple[int, bytes]]]  # the cluster, (offset, body) per message
RETENTION: dict[str, str | int | bool] = {
    "mappedFileSizeCommitLog": COMMITLOG_FILE, "fileReservedTime": 0,
    "deleteWhen": ";".join(f"{hour:02d}" for hour in range(24)), "cleanResourceInterval": 100,
}


def bounds(cluster: Cluster) -> tuple[int, int]:
    async def query() -> tuple[int, int]:
        async with ClusterClient(cluster.namesrv_addr) as client:
            return await client.min_offset(QUEUE), await client.max_offset(QUEUE)

    return asyncio.run(query())


def send_all(cluster: Cluster) -> list[tuple[int, int, bytes]]:
    """SENT messages to QUEUE: (queue offset, commitlog offset, body) each."""
    async def run() -> list[tuple[int, int, bytes]]:
        stored = []
        async with ClusterClient(cluster.namesrv_addr) as client:
            for n in range(SENT):
                body = f"{n:04d}".encode() + bytes(996)
                _, result = await client.send(Message("Shrinking", body, tags="T"),
                                              producer_group="PG", queue=QUEUE)
                # offsetMsgId: store host (8 bytes) then the commitlog offset (8 bytes), hex.
                stored.append((result.queue_offset, int(result.msg_id[16:32], 16), body))
        return stored

    return asyncio.run(run())


def commitlog_files(cluster: Cluster) -> list[int]:
    store = cluster.brokers["broker-a"].store_dir
    assert store is not None
    return sorted(int(p.name) for p in (store / "commitlog").iterdir() if p.name.isdigit())


@pytest.fixture(scope="module")
def shrunk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shrunk]:
    """A cluster whose brokers delete every commitlog file but the newest within 100 ms, and
    the (offset, body) of the messages sent to QUEUE. Returns once retention is done: the
    oldest commitlog file left is the last message's (a preallocated next one may follow),
    and the queue's min offset is the first message stored in it."""
    with two_broker_groups(tmp_path_factory.mktemp("retention"), extra_conf=RETENTION) as cluster:
        cluster.create_topic("Shrinking", queues=1)
        stored = send_all(cluster)
        assert [offset for offset, _, _ in stored] == list(range(SENT))
        last = stored[-1][1] // COMMITLOG_FILE * COMMITLOG_FILE  # the file of the last message
        wait_until(lambda: commitlog_files(cluster)[0] == last, timeout_s=30,
                   what=f"retention deletes the commitlog files before {last}")
        final = next(offset for offset, phy, _ in stored if phy >= last)
        wait_until(lambda: bounds(cluster)[0] == final, timeout_s=30,
                   what=f"the queue's min offset reaches {final}")
        yield cluster, [(offset, body) for offset, _, body in stored]


def left(sent: list[tuple[int, bytes]], low: int) -> list[tuple[int, bytes]]:
    return [(offset, body) for offset, body in sent if offset >= low]


def rows(batches: Iterator[pa.RecordBatch]) -> list[tuple[int, bytes]]:
    table = pa.Table.from_batches(list(batches))
    return list(zip(table.column("queueOffset").to_pylist(), table.column("body").to_pylist(),
                    strict=True))


def read_range(cluster: Cluster, start: int, end: int, fail_on_data_loss: bool
               ) -> list[tuple[int, bytes]]:
    """What `read()` on an executor does with a planned range (the plan may have been made
    before retention ran, or before the queue's max moved back)."""
    options = SourceOptions.parse({"nameServer": cluster.namesrv_addr, "topic": "Shrinking",
                                   "failOnDataLoss": str(fail_on_data_loss).lower()},
                                  streaming=False)
    part = QueueRange(QUEUE.topic, QUEUE.broker_name, QUEUE.queue_id, start, end)
    return rows(BatchReader(options).read(RangePartition(part)))


def test_starting_offsets_below_the_min_at_plan_time(
    spark: SparkSession, shrunk: Shrunk
) -> None:
    cluster, sent = shrunk
    low, high = bounds(cluster)
    assert 0 < low < high == SENT

    def load(fail_on_data_loss: str) -> list[tuple[int, bytes]]:
        df = spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr) \
            .option("topic", "Shrinking").option("failOnDataLoss", fail_on_data_loss) \
            .option("startingOffsets", '{"Shrinking": {"broker-a": {"0": 0}}}').load()
        return sorted((r.queueOffset, bytes(r.body)) for r in df.collect())

    with pytest.raises(Exception, match=f"offset 0 is below its min offset {low}"):
        load("true")
    assert load("false") == left(sent, low)


def test_offsets_below_the_min_at_read_time(shrunk: Shrunk) -> None:
    cluster, sent = shrunk
    low, high = bounds(cluster)
    with pytest.raises(DataLossError, match=f"offsets 0..{low - 1} are gone"):
        read_range(cluster, 0, high, fail_on_data_loss=True)
    assert read_range(cluster, 0, high, fail_on_data_loss=False) == left(sent, low)


def test_max_below_a_planned_end(shrunk: Shrunk) -> None:
    cluster, sent = shrunk
    low, high = bounds(cluster)
    with pytest.raises(DataLossError, match=f"max offset {high} is below the planned end "
                                            f"{high + 5}"):
        read_range(cluster, low, high + 5, fail_on_data_loss=True)
    assert read_range(cluster, low, high + 5, fail_on_data_loss=False) == left(sent, low)
