"""The real RocketMQ Java client (each release) against pyrmq: pyrmq's name server and broker run
as real processes (`python -m controller`, `python -m broker`), the Java programs of
tests/interop/java produce and consume through them.

The story: DefaultMQProducer sends 20 TagA messages in each of the sync, async, oneway and batch
modes, and 5 TagB messages. A DefaultMQPushConsumer (clustering) rejects every tenth message
once and gets it back through the retry topic; a DefaultLitePullConsumer reads the same
messages; a TagB consumer sees only TagB. A group that consumed everything is stopped, the
broker is stopped with SIGTERM (exit 0) and restarted on its store, and the group, restarted,
gets the new messages only: its committed offsets were persisted.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from pyrmq_client import BrokerClient, PullStatus
from store.record_layout import MessageRecord
from tests.interop.conftest import PyrmqCluster
from tests.interop.consume_checks import assert_exactly_once
from tests.interop.harness import ProduceMode, ProduceResult, Sent, expected_body

pytestmark = pytest.mark.interop

TOPIC = "PyrmqInteropClients"
MODES: tuple[ProduceMode, ...] = ("sync", "async", "oneway", "batch")
PER_MODE = 20
TAG_A_COUNT = len(MODES) * PER_MODE
TAG_B_COUNT = 5
BODY_BYTES = 128
CLIENT_QUEUE_NUMS = 4  # DefaultMQProducer.defaultTopicQueueNums: an auto-created topic's queues
FAIL_EVERY = 10
# Consumers keep going this long after the last expected key, so that duplicates would show.
LINGER_MS = 1000
RESTART_LINGER_MS = 2000
AFTER_RESTART_COUNT = 10
STORED_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.1


@pytest.fixture(scope="module")
def produced(pyrmq_cluster: PyrmqCluster) -> dict[str, ProduceResult]:
    """20 TagA messages in each mode, then 5 TagB messages that TagA consumers must not see."""
    java, namesrv = pyrmq_cluster.java, pyrmq_cluster.namesrv.addr
    results: dict[str, ProduceResult] = {
        mode: java.produce(namesrv, TOPIC, PER_MODE, mode, "TagA", body_bytes=BODY_BYTES)
        for mode in MODES
    }
    results["other"] = java.produce(
        namesrv, TOPIC, TAG_B_COUNT, "sync", "TagB", key_prefix="other", body_bytes=BODY_BYTES
    )
    return results


def tag_a_sends(produced: dict[str, ProduceResult]) -> list[Sent]:
    return [sent for mode in MODES for sent in produced[mode].sent]


async def stored_messages(cluster: PyrmqCluster) -> dict[str, MessageRecord]:
    """Every message of TOPIC as pyrmq's broker stores it, by key (pulled with pyrmq's client)."""
    host, port = cluster.broker.addr.rsplit(":", 1)
    records: dict[str, MessageRecord] = {}
    async with await BrokerClient.connect(host, int(port)) as client:
        for queue_id in range(CLIENT_QUEUE_NUMS):
            offset = 0
            while True:
                result = await client.pull("pyrmq_interop_inspect", TOPIC, queue_id, offset)
                if result.status is not PullStatus.FOUND:
                    break
                for record in result.messages:
                    assert record.keys is not None
                    assert record.keys not in records, f"key {record.keys} stored twice"
                    records[record.keys] = record
                offset = result.next_begin_offset
    return records


def test_every_send_mode_is_acknowledged_at_a_distinct_position(
    produced: dict[str, ProduceResult],
) -> None:
    for mode in MODES:
        result = produced[mode]
        assert result.returncode == 0, result.stderr
        assert sorted(result.keys()) == sorted(f"{mode}-{i}" for i in range(PER_MODE))
        assert len({s.msg_id for s in result.sent}) == PER_MODE
    for sent in tag_a_sends(produced):
        if sent.key.startswith("oneway-"):
            assert (sent.queue_id, sent.queue_offset, sent.send_status) == (None, None, None)
        else:
            assert sent.send_status == "SEND_OK", sent
            assert sent.queue_id in range(CLIENT_QUEUE_NUMS), sent
    acked = [s for s in tag_a_sends(produced) + list(produced["other"].sent) if s.acknowledged]
    positions = [(s.queue_id, s.queue_offset) for s in acked]
    assert len(set(positions)) == len(positions), "two acknowledged messages at one position"


def test_a_batch_gets_consecutive_offsets_in_one_queue(
    produced: dict[str, ProduceResult],
) -> None:
    batch = produced["batch"].sent  # two batches of 10 (Produce --batch-size default)
    for first in (0, 10):
        group = batch[first : first + 10]
        assert len({s.queue_id for s in group}) == 1, group
        start = group[0].queue_offset
        assert start is not None
        assert [s.queue_offset for s in group] == list(range(start, start + 10)), group


async def test_broker_stores_each_message_once_where_it_was_acknowledged(
    pyrmq_cluster: PyrmqCluster, produced: dict[str, ProduceResult]
) -> None:
    sends = tag_a_sends(produced) + list(produced["other"].sent)
    keys = {s.key for s in sends}
    # Oneway sends are unacknowledged: the broker may still be storing the last ones.
    deadline = time.monotonic() + STORED_TIMEOUT_S
    stored = await stored_messages(pyrmq_cluster)
    while not keys <= set(stored) and time.monotonic() < deadline:
        await asyncio.sleep(POLL_INTERVAL_S)
        stored = await stored_messages(pyrmq_cluster)
    assert set(stored) == keys, f"missing {sorted(keys - set(stored))}"
    for sent in sends:
        record = stored[sent.key]
        assert record.body == expected_body(sent.key, BODY_BYTES), sent.key
        assert record.tags == ("TagB" if sent.key.startswith("other-") else "TagA"), sent.key
        if sent.acknowledged:
            assert (record.queue_id, record.queue_offset) == (sent.queue_id, sent.queue_offset)


async def retry_topic_message_count(cluster: PyrmqCluster, group: str) -> int:
    """How many messages the broker stored in the group's retry topic (all its queues)."""
    host, port = cluster.broker.addr.rsplit(":", 1)
    topic = f"%RETRY%{group}"
    async with await BrokerClient.connect(host, int(port)) as client:
        config = (await client.topic_configs()).topic_config_table[topic]
        return sum([await client.max_offset(topic, q) for q in range(config.write_queue_nums)])


async def test_push_consumer_gets_a_rejected_message_again_through_the_retry_topic(
    pyrmq_cluster: PyrmqCluster, produced: dict[str, ProduceResult]
) -> None:
    group = "pyrmq_interop_push_retry"
    result = pyrmq_cluster.java.push_consume(
        pyrmq_cluster.namesrv.addr,
        group,
        TOPIC,
        "TagA",
        TAG_A_COUNT,
        fail_every=FAIL_EVERY,
        linger_ms=LINGER_MS,
    )
    assert_exactly_once(result, tag_a_sends(produced), tag="TagA", body_bytes=BODY_BYTES)
    rejected = {r.key for r in result.rejected}
    assert len(rejected) == TAG_A_COUNT // FAIL_EVERY
    assert all(r.reconsume_times == 0 for r in result.rejected)
    for r in result.received:
        assert (r.reconsume_times >= 1) == (r.key in rejected), r
    # CONSUMER_SEND_MSG_BACK stored each rejected message once more, in %RETRY%<group>.
    assert await retry_topic_message_count(pyrmq_cluster, group) == len(rejected)


def test_lite_pull_consumer_receives_each_message_once(
    pyrmq_cluster: PyrmqCluster, produced: dict[str, ProduceResult]
) -> None:
    result = pyrmq_cluster.java.lite_pull(
        pyrmq_cluster.namesrv.addr,
        "pyrmq_interop_lite",
        TOPIC,
        "TagA",
        TAG_A_COUNT,
        linger_ms=LINGER_MS,
    )
    assert_exactly_once(result, tag_a_sends(produced), tag="TagA", body_bytes=BODY_BYTES)


def test_a_tag_b_consumer_sees_only_tag_b(
    pyrmq_cluster: PyrmqCluster, produced: dict[str, ProduceResult]
) -> None:
    result = pyrmq_cluster.java.push_consume(
        pyrmq_cluster.namesrv.addr,
        "pyrmq_interop_tag_b",
        TOPIC,
        "TagB",
        TAG_B_COUNT,
        linger_ms=LINGER_MS,
    )
    assert_exactly_once(result, produced["other"].sent, tag="TagB", body_bytes=BODY_BYTES)


async def committed_offsets(cluster: PyrmqCluster, group: str) -> dict[int, int | None]:
    host, port = cluster.broker.addr.rsplit(":", 1)
    async with await BrokerClient.connect(host, int(port)) as client:
        return {
            queue_id: await client.query_consumer_offset(group, TOPIC, queue_id)
            for queue_id in range(CLIENT_QUEUE_NUMS)
        }


async def test_committed_offsets_survive_consumer_and_broker_restarts(
    pyrmq_cluster: PyrmqCluster, produced: dict[str, ProduceResult]
) -> None:
    group = "pyrmq_interop_restart"
    java, namesrv = pyrmq_cluster.java, pyrmq_cluster.namesrv.addr
    first = java.push_consume(namesrv, group, TOPIC, "TagA", TAG_A_COUNT, linger_ms=LINGER_MS)
    assert_exactly_once(first, tag_a_sends(produced), tag="TagA", body_bytes=BODY_BYTES)

    # Committed: past the last TagA message of every queue.
    stored = await stored_messages(pyrmq_cluster)
    last_tag_a = dict.fromkeys(range(CLIENT_QUEUE_NUMS), -1)
    for record in stored.values():
        if record.tags == "TagA":
            last_tag_a[record.queue_id] = max(last_tag_a[record.queue_id], record.queue_offset)
    committed = await committed_offsets(pyrmq_cluster, group)
    for queue_id, offset in committed.items():
        assert offset is not None, committed
        assert offset > last_tag_a[queue_id], (committed, last_tag_a)

    old = pyrmq_cluster.broker
    assert old.terminate() == 0, old.diagnostics()
    assert "broker stopped cleanly" in old.log(), old.diagnostics()
    assert old.store_dir is not None
    pyrmq_cluster.broker = pyrmq_cluster.env.start_broker(
        pyrmq_cluster.namesrv,
        listen_port=old.port,
        store_dir=old.store_dir,
        name="broker-a-restarted",
    )
    assert "abnormal=False" in pyrmq_cluster.broker.log(), pyrmq_cluster.broker.diagnostics()
    assert await committed_offsets(pyrmq_cluster, group) == committed

    after = java.produce(
        namesrv, TOPIC, AFTER_RESTART_COUNT, "sync", "TagA", key_prefix="after",
        body_bytes=BODY_BYTES,
    )
    second = java.push_consume(
        namesrv, group, TOPIC, "TagA", AFTER_RESTART_COUNT, linger_ms=RESTART_LINGER_MS
    )
    assert_exactly_once(second, after.sent, tag="TagA", body_bytes=BODY_BYTES)
