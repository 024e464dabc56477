"""The stock C++ client (PyPI `rocketmq` 0.4.4, librocketmq 2.x) against pyrmq's name server and
broker, both real processes; `cpp_client.py` runs the client in its own venv (`.venv-cpp`).

The story: the C++ producer sends 20 TagA messages each in sync, async and oneway mode, 20 more
orderly (a queue selector spreads four shards over the queues) and 5 TagB messages. pyrmq
stores each exactly once; the orderly ones sit in their shard's queue in send order. A C++ push
consumer rejects the first delivery of every fifth message (RECONSUME_LATER: the client sends
its batch back) and gets it again from the retry topic with reconsumeTimes 1; a C++ pull
consumer reads every TagA message; neither sees TagB. A C++ orderly push consumer (it locks its
queues with LOCK_BATCH_MQ) consumes every queue in offset order. Messages the C++ producer sends
with a delay level reach their topic only after the level's delay.
Every acknowledged message is accounted for.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from pyrmq_client import BrokerClient, PullStatus
from store.record_layout import MessageRecord
from tests.interop.output import (
    ConsumeResult,
    Sent,
    expected_body,
    parse_consume_output,
    parse_produce_output,
)
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess
from tests.interop.routes import wait_for_route

pytestmark = pytest.mark.interop

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
CPP_PYTHON: Final = REPO_ROOT / ".venv-cpp" / "bin" / "python"
DRIVER: Final = Path(__file__).with_name("cpp_client.py")
TOPIC: Final = "PyrmqCppClient"
MODES: Final = ("sync", "async", "oneway", "orderly")
PER_MODE: Final = 20
SHARDS: Final = 4
TAG_B_COUNT: Final = 5
BODY_BYTES: Final = 100
FAIL_EVERY: Final = 5
TAG_A_COUNT: Final = len(MODES) * PER_MODE
CLIENT_QUEUE_NUMS: Final = 4  # the C++ producer's default topic queue count
RUN_TIMEOUT_S: Final = 120.0


@dataclass(frozen=True, slots=True)
class CppCluster:
    """pyrmq's name server and broker for the C++ client: no Java, so, unlike the Java tests,
    these run once, not once per RocketMQ release."""

    namesrv: PyrmqProcess
    broker: PyrmqProcess


@pytest.fixture(scope="module")
def cpp_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CppCluster]:
    with PyrmqEnv(tmp_path_factory.mktemp("cpp-cluster")) as env:
        namesrv = env.start_namesrv()
        yield CppCluster(namesrv, env.start_broker(namesrv))
        exit_codes = env.stop_all()
        assert set(exit_codes.values()) == {0}, f"{exit_codes}\n{env.diagnostics()}"


@dataclass(frozen=True, slots=True)
class Produced:
    mode: str
    sent: tuple[Sent, ...]


def run_cpp(tmp_path: Path, *args: object) -> subprocess.CompletedProcess[str]:
    """Run cpp_client.py under the C++ client's venv; its logs go under tmp_path (HOME)."""
    assert CPP_PYTHON.exists(), f"{CPP_PYTHON} is missing: run ./scripts/setup.sh"
    env = {**os.environ, "HOME": str(tmp_path)}  # librocketmq logs to ~/logs/rocketmq-cpp
    return subprocess.run(
        [str(CPP_PYTHON), str(DRIVER), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def produced(
    cpp_cluster: CppCluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Produced]:
    home = tmp_path_factory.mktemp("cpp-produce")
    namesrv = cpp_cluster.namesrv.addr
    results: dict[str, Produced] = {}
    for mode, tag, count, prefix in [
        *((mode, "TagA", PER_MODE, mode) for mode in MODES),
        ("sync", "TagB", TAG_B_COUNT, "other"),
    ]:
        run = run_cpp(
            home, "produce", namesrv, TOPIC, count, mode, tag,
            f"--key-prefix={prefix}", f"--body-bytes={BODY_BYTES}", f"--shards={SHARDS}",
        )  # fmt: skip
        sent = parse_produce_output(run.stdout)
        assert run.returncode == 0, f"{mode}: exit {run.returncode}\n{run.stdout}\n{run.stderr}"
        assert len(sent) == count, f"{mode}: {len(sent)} of {count} sends\n{run.stdout}"
        results[prefix] = Produced(mode, sent)
    return results


async def create_topic(cluster: CppCluster, topic: str) -> None:
    host, port = cluster.broker.addr.rsplit(":", 1)
    async with await BrokerClient.connect(host, int(port)) as client:
        await client.create_topic(topic, read_queue_nums=CLIENT_QUEUE_NUMS,
                                  write_queue_nums=CLIENT_QUEUE_NUMS)


async def stored_in(cluster: CppCluster, topic: str) -> list[MessageRecord]:
    """Every message of `topic` as pyrmq stores it, pulled with pyrmq's own client."""
    host, port = cluster.broker.addr.rsplit(":", 1)
    records: list[MessageRecord] = []
    async with await BrokerClient.connect(host, int(port)) as client:
        for queue_id in range(CLIENT_QUEUE_NUMS):
            offset = 0
            while True:
                result = await client.pull("pyrmq_cpp_inspect", topic, queue_id, offset)
                if result.status is not PullStatus.FOUND:
                    break
                records.extend(result.messages)
                offset = result.next_begin_offset
    return records


async def stored_messages(cluster: CppCluster) -> dict[str, MessageRecord]:
    """Every message of TOPIC by key; a key stored twice fails."""
    records: dict[str, MessageRecord] = {}
    for record in await stored_in(cluster, TOPIC):
        assert record.keys is not None
        assert record.keys not in records, f"key {record.keys} stored twice"
        records[record.keys] = record
    return records


def tag_a_keys() -> set[str]:
    return {f"{mode}-{index}" for mode in MODES for index in range(PER_MODE)}


def test_every_cpp_send_is_stored_once_with_its_tag_key_and_body(
    cpp_cluster: CppCluster, produced: dict[str, Produced]
) -> None:
    stored = asyncio.run(stored_messages(cpp_cluster))
    expected = tag_a_keys() | {f"other-{index}" for index in range(TAG_B_COUNT)}
    assert set(stored) == expected
    for key, record in stored.items():
        assert record.tags == ("TagB" if key.startswith("other") else "TagA"), key
        assert record.body == expected_body(key, BODY_BYTES), key
    for prefix, result in produced.items():
        for sent in result.sent:
            if sent.acknowledged:
                assert sent.send_status == "OK", sent
                assert stored[sent.key].queue_offset == sent.queue_offset, (prefix, sent)


def test_orderly_sends_sit_in_their_shard_queue_in_send_order(
    cpp_cluster: CppCluster, produced: dict[str, Produced]
) -> None:
    stored = asyncio.run(stored_messages(cpp_cluster))
    by_queue: dict[int, list[tuple[int, int]]] = {}
    for sent in produced["orderly"].sent:
        index = int(sent.key.rsplit("-", 1)[1])
        record = stored[sent.key]
        assert sent.queue_id == record.queue_id == (index % SHARDS) % CLIENT_QUEUE_NUMS, sent
        by_queue.setdefault(record.queue_id, []).append((index, record.queue_offset))
    for queue_id, entries in by_queue.items():
        offsets_in_send_order = [offset for _, offset in sorted(entries)]
        assert offsets_in_send_order == sorted(offsets_in_send_order), queue_id


def consume(tmp_path: Path, *args: object) -> ConsumeResult:
    run = run_cpp(tmp_path, *args)
    return parse_consume_output(run.stdout, returncode=run.returncode, stderr=run.stderr)


def failure(result: ConsumeResult) -> str:
    return f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}"


@pytest.mark.usefixtures("produced")
def test_cpp_push_consumer_gets_every_tag_a_message_and_its_rejected_ones_again(
    cpp_cluster: CppCluster, tmp_path: Path
) -> None:
    result = consume(
        tmp_path, "push", cpp_cluster.namesrv.addr, "cpp_push", TOPIC, "TagA", TAG_A_COUNT,
        f"--fail-every={FAIL_EVERY}", "--linger-ms=1000", "--timeout-s=90",
    )  # fmt: skip
    assert result.done, failure(result)
    assert set(result.key_counts()) == tag_a_keys()
    rejected = {rejection.key for rejection in result.rejected}
    assert rejected, "no delivery was rejected"
    assert all(int(key.rsplit("-", 1)[1]) % FAIL_EVERY == 0 for key in rejected)
    for received in result.received:
        assert received.tags == "TagA"
        assert received.body_bytes == BODY_BYTES
        assert received.reconsume_times in (0, 1), received
    redelivered = {r.key for r in result.received if r.reconsume_times == 1}
    assert rejected <= redelivered, f"rejected but never redelivered: {rejected - redelivered}"
    # librocketmq hands a whole pulled batch to one listener call and sends every message of
    # a RECONSUME_LATER batch back, so batch-mates of a rejected message come back too; a
    # duplicate from the broker would show as the same (key, reconsumeTimes) twice.
    deliveries = Counter((r.key, r.reconsume_times) for r in result.received)
    duplicates = {delivery: n for delivery, n in deliveries.items() if n > 1}
    assert not duplicates, f"delivered more than once: {duplicates}"


@pytest.mark.usefixtures("produced")
def test_cpp_pull_consumer_reads_every_tag_a_message(
    cpp_cluster: CppCluster, tmp_path: Path
) -> None:
    result = consume(
        tmp_path, "pull", cpp_cluster.namesrv.addr, "cpp_pull", TOPIC, "TagA", TAG_A_COUNT,
        "--timeout-s=60",
    )  # fmt: skip
    assert result.done, failure(result)
    assert set(result.key_counts()) == tag_a_keys()
    assert Counter(received.tags for received in result.received) == {"TagA": TAG_A_COUNT}


@pytest.mark.usefixtures("produced")
def test_cpp_orderly_push_consumer_consumes_each_queue_in_order(
    cpp_cluster: CppCluster, tmp_path: Path
) -> None:
    result = consume(
        tmp_path, "push", cpp_cluster.namesrv.addr, "cpp_orderly", TOPIC, "TagA",
        TAG_A_COUNT, "--orderly", "--linger-ms=500", "--timeout-s=90",
    )  # fmt: skip
    assert result.done, failure(result)
    assert set(result.key_counts()) == tag_a_keys()
    by_queue: dict[int, list[int]] = {}
    for received in result.received:
        by_queue.setdefault(received.queue_id, []).append(received.queue_offset)
    for queue_id, offsets in by_queue.items():
        assert offsets == sorted(offsets), f"queue {queue_id} consumed out of order: {offsets}"


def test_cpp_delayed_sends_reach_their_topic_after_the_level_delay(
    cpp_cluster: CppCluster, tmp_path: Path
) -> None:
    topic, count = "PyrmqCppDelay", 10
    # Created up front: a new topic's first C++ send waits on a TBW102 route lookup that a
    # loaded machine can time out (the module's first sends cover auto-creation).
    asyncio.run(create_topic(cpp_cluster, topic))
    wait_for_route(cpp_cluster.namesrv.addr, topic)
    before_ms = time.time_ns() // 1_000_000
    run = run_cpp(
        tmp_path, "produce", cpp_cluster.namesrv.addr, topic, count, "sync", "TagA",
        "--key-prefix=delayed", "--delay-level=2",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    result = consume(
        tmp_path, "pull", cpp_cluster.namesrv.addr, "cpp_delay", topic, "*", count,
        "--timeout-s=60",
    )  # fmt: skip
    assert result.done, failure(result)
    assert set(result.key_counts()) == {f"delayed-{i}" for i in range(count)}
    stored = asyncio.run(stored_in(cpp_cluster, topic))
    assert len(stored) == count
    for record in stored:
        assert record.store_timestamp >= before_ms + 5_000, record  # level 2: 5 s
        assert "DELAY" not in record.properties_map()
