"""A checkpointed streaming query over a three-broker controller-mode group (pyrmq's embedded
controller, as in tests/integration/test_embedded_controller_failover.py) while the master is
killed with kill -9 mid-stream and the sends go on to the new master: the query continues on
the new master, and its output is every stored message once, with no gap in any queue, each
acknowledged send at the (queue, offset) its acknowledgement named with the body it sent.

Messages whose send outcome was unknown (the connection died under it, or the broker stored it
without confirming the replicas) may be in the output; anything else in it is an error.

The same scenario runs twice: with a Spark streaming query (foreachBatch, checkpoint), and with
the source's `StreamReader` driven in-process as Spark drives it, which isolates the source's
own behaviour (routes re-resolved each micro-batch and on every pull error, failoverTimeoutMs)
from Spark's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from pyrmq_client import (
    BrokerClient,
    BrokerClientError,
    ClusterClient,
    Message,
    RetriesExhaustedError,
)
from pyspark_rocketmq.options import SourceOptions
from pyspark_rocketmq.source import StreamReader
from remoting.codes import ResponseCode
from remoting.errors import RemotingError
from tests.interop.controller_group import Group, start_embedded_controller, start_group
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess, wait_until

pytestmark = pytest.mark.timeout(600)

TOPIC = "SparkFailover"
QUEUES = 2
ACKED_BEFORE_KILL = 150  # acknowledged sends before the kill (at least)
ACKED_AFTER_KILL = 150  # and after it, on the new master
FAILOVER_TIMEOUT_MS = 60_000
DEADLINE_S = 120.0

Key = tuple[int, int]  # queueId, queueOffset


class Collector:
    """foreachBatch target: (queueId, queueOffset, body) of each batch id (a replayed batch id
    replaces its rows, as an idempotent sink does)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: dict[int, list[tuple[int, int, bytes]]] = {}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.add(batch_id, [(r.queueId, r.queueOffset, bytes(r.body))
                            for r in df.select("queueId", "queueOffset", "body").collect()])

    def add(self, batch_id: int, rows: list[tuple[int, int, bytes]]) -> None:
        with self.lock:
            self.batches[batch_id] = rows

    def rows(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return [row for batch_id in sorted(self.batches) for row in self.batches[batch_id]]


@dataclass
class Sends:
    """What the load learnt of each send: acknowledged at (queue, offset), or outcome unknown."""

    acked: dict[Key, bytes] = field(default_factory=dict)
    acked_after_kill: int = 0
    unknown: set[bytes] = field(default_factory=set)
    refused: int = 0
    error: BaseException | None = None


def send_until(namesrv: str, sends: Sends, killed: threading.Event, stop: threading.Event
               ) -> None:
    """Send one message at a time through the routed client until ACKED_AFTER_KILL sends were
    acknowledged after `killed` is set (or `stop`)."""

    async def run() -> None:
        async with ClusterClient(namesrv, timeout_ms=3_000) as client:
            index = 0
            while not stop.is_set() and sends.acked_after_kill < ACKED_AFTER_KILL:
                index += 1
                after = killed.is_set()
                body = f"{'after' if after else 'before'}-{index}".encode()
                try:
                    queue, result = await client.send(Message(TOPIC, body), producer_group="PG")
                except RetriesExhaustedError:  # nothing stored: the route has no master yet
                    sends.refused += 1
                    await asyncio.sleep(0.1)
                    continue
                except (RemotingError, BrokerClientError):  # may be stored
                    sends.unknown.add(body)
                    continue
                if result.code != ResponseCode.SUCCESS:  # stored, replicas not confirmed
                    sends.unknown.add(body)
                    continue
                sends.acked[(queue.queue_id, result.queue_offset)] = body
                if after:
                    sends.acked_after_kill += 1

    try:
        asyncio.run(run())
    except Exception as err:  # noqa: BLE001 (reported by the test)
        sends.error = err


def topic_on(process: PyrmqProcess) -> bool:
    async def ask() -> bool:
        host, port = process.addr.rsplit(":", 1)
        async with await BrokerClient.connect(host, int(port)) as client:
            return TOPIC in (await client.topic_configs()).topic_config_table

    return asyncio.run(ask())


def max_offsets(namesrv: str) -> dict[int, int]:
    async def run() -> dict[int, int]:
        async with ClusterClient(namesrv) as client:
            queues = await client.read_queues(TOPIC)
            return {q.queue_id: await client.max_offset(q) for q in queues}

    return asyncio.run(run())


@pytest.fixture
def env(tmp_path: Path) -> Iterator[PyrmqEnv]:
    with PyrmqEnv(tmp_path / "pyrmq") as made:
        yield made


class SparkQuery:
    """The query under test: `readStream.format("rocketmq")` into foreachBatch, checkpointed."""

    def __init__(self, spark: SparkSession, namesrv: str, checkpoint: Path,
                 collector: Collector) -> None:
        self.query = (spark.readStream.format("rocketmq").option("nameServer", namesrv)
                      .option("topic", TOPIC).option("startingOffsets", "earliest")
                      .option("failoverTimeoutMs", str(FAILOVER_TIMEOUT_MS)).load()
                      .writeStream.foreachBatch(collector)
                      .option("checkpointLocation", str(checkpoint))
                      .trigger(processingTime="300 milliseconds").start())

    def check(self) -> None:
        if self.query.exception() is not None or not self.query.isActive:
            raise AssertionError(f"the query stopped: {self.query.exception()}")

    def stop(self) -> None:
        self.query.stop()


class InProcessQuery:
    """The same source's `StreamReader`, driven in a thread the way Spark's micro-batch
    execution drives it (initialOffset once, then latestOffset, partitions, read of each
    partition and commit per micro-batch, the end offsets kept as the checkpoint would): the
    source's own failover behaviour, without a JVM."""

    def __init__(self, namesrv: str, collector: Collector) -> None:
        self.reader = StreamReader(SourceOptions.parse({
            "nameServer": namesrv, "topic": TOPIC, "startingOffsets": "earliest",
            "failoverTimeoutMs": str(FAILOVER_TIMEOUT_MS)}, streaming=True))
        self.collector = collector
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        try:
            checkpoint = self.reader.initialOffset()
            batch_id = 0
            while not self.stopping.wait(0.3):
                end = self.reader.latestOffset(checkpoint, self.reader.getDefaultReadLimit())
                if end == checkpoint:
                    continue
                batch = [row for part in self.reader.partitions(checkpoint, end)
                         for arrow in self.reader.read(part)
                         for row in zip(arrow.column("queueId").to_pylist(),
                                        arrow.column("queueOffset").to_pylist(),
                                        arrow.column("body").to_pylist(), strict=True)]
                self.collector.add(batch_id, batch)
                self.reader.commit(end)
                checkpoint, batch_id = end, batch_id + 1
        except Exception as err:  # noqa: BLE001 (reported by check)
            self.error = err

    def check(self) -> None:
        if self.error is not None or not self.thread.is_alive():
            raise AssertionError(f"the query stopped: {self.error!r}")

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=DEADLINE_S)


def started_group(env: PyrmqEnv, tmp_path: Path) -> Group:
    """The embedded controller and three brokers, with TOPIC created on the master and known
    to both slaves and the name server."""
    group = start_group(env, None, start_embedded_controller(env, tmp_path / "controller-store"))
    master = group.master()

    async def create() -> None:
        host, port = master.addr.rsplit(":", 1)
        async with await BrokerClient.connect(host, int(port)) as client:
            await client.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)

    asyncio.run(create())
    for process in group.brokers:  # the slaves learn it by the metadata sync
        wait_until(partial(topic_on, process), timeout_s=DEADLINE_S,
                   what=f"{process.name} has {TOPIC}", process=process)
    wait_until(lambda: len(max_offsets(group.namesrv.addr)) == QUEUES, timeout_s=DEADLINE_S,
               what=f"the name server routes {TOPIC}")
    return group


def kill_the_master_mid_stream(group: Group, collector: Collector,
                               query: SparkQuery | InProcessQuery, what: str) -> None:
    """Sends before and after a kill -9 of the master while `query` reads into `collector`;
    then the checks of the module docstring."""
    namesrv = group.namesrv.addr
    old = group.master()
    sends = Sends()
    killed, stop = threading.Event(), threading.Event()
    load = threading.Thread(target=send_until, args=(namesrv, sends, killed, stop), daemon=True)

    def running() -> bool:
        query.check()
        if sends.error is not None:
            raise AssertionError(f"the load failed: {sends.error!r}")
        return True

    try:
        load.start()
        wait_until(lambda: running() and len(sends.acked) >= ACKED_BEFORE_KILL
                   and len(collector.rows()) >= ACKED_BEFORE_KILL // 3,
                   timeout_s=DEADLINE_S, what="sends acknowledged and read before the kill")
        batches_before = max(collector.batches)
        old.kill()  # SIGKILL, sends and pulls in flight
        killed.set()
        killed_at = time.monotonic()
        wait_until(lambda: running() and not load.is_alive(), timeout_s=DEADLINE_S,
                   what=f"{ACKED_AFTER_KILL} sends acknowledged by the new master")
        failover_s = time.monotonic() - killed_at
        new = group.master()
        assert new is not old
        ends = max_offsets(namesrv)

        def all_read() -> bool:
            seen: dict[int, set[int]] = {}
            for queue_id, offset, _ in collector.rows():
                seen.setdefault(queue_id, set()).add(offset)
            return running() and all(
                seen.get(q, set()) >= set(range(end)) for q, end in ends.items())

        wait_until(all_read, timeout_s=DEADLINE_S, what="the query read every stored message")
    finally:
        stop.set()
        query.stop()
        load.join(timeout=30)

    rows = collector.rows()
    print(f"{what} over a kill -9 of the master: rows={len(rows)} acked={len(sends.acked)} "
          f"(after the kill {sends.acked_after_kill}) unknown={len(sends.unknown)} "
          f"refused={sends.refused} batches={len(collector.batches)} "
          f"(before the kill {batches_before + 1}) sends_back_s={failover_s:.1f}")
    keys = [(queue_id, offset) for queue_id, offset, _ in rows]
    assert len(keys) == len(set(keys)), "a (queue, offset) was output twice"
    per_queue: dict[int, list[int]] = {}
    for queue_id, offset in keys:
        per_queue.setdefault(queue_id, []).append(offset)
    assert {q: sorted(offsets) for q, offsets in per_queue.items()} == {
        q: list(range(end)) for q, end in ends.items() if end}, "a gap in a queue"
    body_at = {(queue_id, offset): body for queue_id, offset, body in rows}
    wrong = {key: (body, body_at.get(key)) for key, body in sends.acked.items()
             if body_at.get(key) != body}
    assert wrong == {}, "acknowledged sends missing or different in the output"
    assert set(body_at.values()) - set(sends.acked.values()) <= sends.unknown
    assert max(collector.batches) > batches_before  # micro-batches after the kill
    assert any(body.startswith(b"after-") for body in body_at.values())


def test_the_source_goes_on_on_the_new_master_without_gap_or_duplicate(
    env: PyrmqEnv, tmp_path: Path,
) -> None:
    group = started_group(env, tmp_path)
    collector = Collector()
    kill_the_master_mid_stream(group, collector, InProcessQuery(group.namesrv.addr, collector),
                               "the source driven in-process")


def test_a_streaming_query_goes_on_on_the_new_master_without_gap_or_duplicate(
    spark: SparkSession, env: PyrmqEnv, tmp_path: Path,
) -> None:
    group = started_group(env, tmp_path)
    collector = Collector()
    query = SparkQuery(spark, group.namesrv.addr, tmp_path / "checkpoint", collector)
    kill_the_master_mid_stream(group, collector, query, "a Spark streaming query")
