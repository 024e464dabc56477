"""Self-test of the interop harness against the real Java name server and broker.

Later tests point the same client programs at pyrmq; this module proves that the programs, the
output parsing and the process handling are right, using Apache RocketMQ itself as the server.
"""

from __future__ import annotations

import os
import socket
from collections import Counter

import pytest

from tests.interop.build import (
    ROCKETMQ_VERSIONS,
    Classpath,
    InteropSetupError,
    check_java,
    ensure_built,
)
from tests.interop.conftest import JavaCluster
from tests.interop.harness import (
    ConsumeResult,
    JavaEnv,
    PortTakenError,
    ProduceMode,
    ProduceResult,
    Sent,
    expected_body_crc32,
    free_port,
)

pytestmark = pytest.mark.interop

TOPIC = "PyrmqInteropSelfTest"
MODES: tuple[ProduceMode, ...] = ("sync", "async", "oneway", "batch")
PER_MODE = 20
OTHER_TAG_COUNT = 5
BODY_BYTES = 128
# Consumers keep going this long after the last expected key, so that duplicates would show.
LINGER_MS = 1000


@pytest.fixture(scope="module")
def produced(java_cluster: JavaCluster) -> dict[str, ProduceResult]:
    """20 TagA messages in each mode, then 5 TagB messages that TagA consumers must not see."""
    env, namesrv = java_cluster.env, java_cluster.namesrv
    results: dict[str, ProduceResult] = {
        mode: env.produce(namesrv, TOPIC, PER_MODE, mode, "TagA", body_bytes=BODY_BYTES)
        for mode in MODES
    }
    results["other"] = env.produce(
        namesrv, TOPIC, OTHER_TAG_COUNT, "sync", "TagB", key_prefix="other", body_bytes=BODY_BYTES
    )
    return results


def tag_a_sends(produced: dict[str, ProduceResult]) -> list[Sent]:
    return [sent for mode in MODES for sent in produced[mode].sent]


def assert_exactly_once(result: ConsumeResult, produced: dict[str, ProduceResult]) -> None:
    """Every TagA key consumed once, with its body, at the queue and offset the broker acked."""
    sends = tag_a_sends(produced)
    counts = result.key_counts()
    assert set(counts) == {sent.key for sent in sends}, "missing or foreign keys (TagB leaked?)"
    duplicates = {key: n for key, n in counts.items() if n > 1}
    assert not duplicates
    received = {r.key: r for r in result.received}
    for key, r in received.items():
        assert (r.body_bytes, r.body_crc32, r.tags) == (
            BODY_BYTES,
            expected_body_crc32(key, BODY_BYTES),
            "TagA",
        ), key
    for sent in sends:
        if sent.acknowledged and received[sent.key].reconsume_times == 0:
            position = (received[sent.key].queue_id, received[sent.key].queue_offset)
            assert position == (sent.queue_id, sent.queue_offset), sent


def test_produce_prints_one_line_per_message_in_every_mode(
    produced: dict[str, ProduceResult],
) -> None:
    for mode in MODES:
        result = produced[mode]
        assert result.returncode == 0
        assert sorted(result.keys()) == sorted(f"{mode}-{i}" for i in range(PER_MODE))
        assert len({s.msg_id for s in result.sent}) == PER_MODE
    for sent in tag_a_sends(produced):
        if sent.key.startswith("oneway-"):
            assert (sent.queue_id, sent.queue_offset, sent.send_status) == (None, None, None)
        else:
            assert sent.send_status == "SEND_OK"
            assert sent.queue_id in range(4)  # defaultTopicQueueNums of an auto-created topic
    acked = [s for s in tag_a_sends(produced) if s.acknowledged]
    positions = Counter((s.queue_id, s.queue_offset) for s in acked)
    assert max(positions.values()) == 1, "two acknowledged messages at one queue offset"


def test_batch_messages_get_consecutive_offsets(produced: dict[str, ProduceResult]) -> None:
    batch = produced["batch"].sent  # two batches of 10 (Produce --batch-size default)
    for first in (0, 10):
        group = batch[first : first + 10]
        assert len({s.queue_id for s in group}) == 1
        offsets = [s.queue_offset for s in group]
        assert offsets == list(range(offsets[0] or 0, (offsets[0] or 0) + 10))


def test_push_consumer_receives_each_message_once(
    java_cluster: JavaCluster, produced: dict[str, ProduceResult]
) -> None:
    result = java_cluster.env.push_consume(
        java_cluster.namesrv,
        "pyrmq_selftest_push",
        TOPIC,
        "TagA",
        4 * PER_MODE,
        linger_ms=LINGER_MS,
    )
    assert result.done
    assert not result.rejected
    assert_exactly_once(result, produced)


def test_push_consumer_gets_rejected_messages_again_through_the_retry_topic(
    java_cluster: JavaCluster, produced: dict[str, ProduceResult]
) -> None:
    result = java_cluster.env.push_consume(
        java_cluster.namesrv,
        "pyrmq_selftest_retry",
        TOPIC,
        "TagA",
        4 * PER_MODE,
        fail_every=10,
        linger_ms=LINGER_MS,
    )
    rejected = {r.key for r in result.rejected}
    assert len(rejected) == 4 * PER_MODE // 10
    assert all(r.reconsume_times == 0 for r in result.rejected)
    assert_exactly_once(result, produced)
    for r in result.received:
        assert (r.reconsume_times >= 1) == (r.key in rejected), r


def test_lite_pull_consumer_receives_each_message_once(
    java_cluster: JavaCluster, produced: dict[str, ProduceResult]
) -> None:
    result = java_cluster.env.lite_pull(
        java_cluster.namesrv,
        "pyrmq_selftest_lite",
        TOPIC,
        "TagA",
        4 * PER_MODE,
        linger_ms=LINGER_MS,
    )
    assert result.done
    assert_exactly_once(result, produced)


def test_mqadmin_cluster_list_shows_the_broker_of_this_release(
    java_cluster: JavaCluster, rocketmq_version: str
) -> None:
    """The broker runs the release of the test id (clusterList prints the version it reports)."""
    assert java_cluster.env.version == rocketmq_version
    done = java_cluster.env.mqadmin(java_cluster.namesrv, "clusterList")
    rows = [line.split() for line in done.stdout.splitlines()]
    version = "V" + rocketmq_version.replace(".", "_")
    assert ["DefaultCluster", "broker-a", "0", java_cluster.broker.addr, version] in [
        r[:5] for r in rows
    ]


def test_each_release_runs_its_own_jars(interop_classpath: Classpath) -> None:
    jars = {path.name for path in interop_classpath.entries}
    for artifact in ("client", "namesrv", "broker", "tools", "store", "remoting"):
        assert f"rocketmq-{artifact}-{interop_classpath.version}.jar" in jars
    others = set(ROCKETMQ_VERSIONS) - {interop_classpath.version}
    assert not {jar for jar in jars for other in others if f"-{other}.jar" in jar}


def test_a_release_outside_the_list_is_refused() -> None:
    with pytest.raises(InteropSetupError, match=r"4\.9\.8 is not one of ROCKETMQ_VERSIONS"):
        ensure_built("4.9.8")


def test_mqadmin_topic_list_shows_the_auto_created_topic(
    java_cluster: JavaCluster, produced: dict[str, ProduceResult]
) -> None:
    done = java_cluster.env.mqadmin(java_cluster.namesrv, "topicList")
    assert TOPIC in done.stdout.split()


def test_mqadmin_failure_exits_non_zero(java_cluster: JavaCluster) -> None:
    done = java_cluster.env.mqadmin(
        java_cluster.namesrv, "topicStatus", "-t", "NoSuchTopic", check=False
    )
    assert done.returncode == 1
    assert "No topic route info" in done.stderr


def test_produce_without_a_name_server_exits_non_zero(java_env: JavaEnv) -> None:
    result = java_env.produce(
        f"127.0.0.1:{free_port()}",
        TOPIC,
        2,
        "sync",
        options={"send-timeout-ms": 1000, "retries": 0},
        check=False,
    )
    assert result.returncode == 1
    assert not result.sent
    assert result.stderr.count("ERROR ") == 2


def test_close_kills_every_jvm(java_env: JavaEnv) -> None:
    dead_namesrv = f"127.0.0.1:{free_port()}"
    consumers = [
        java_env.start_push_consume(dead_namesrv, f"group{i}", TOPIC, "*", 1, timeout_s=300)
        for i in range(2)
    ]
    assert all(c.alive() for c in consumers)
    java_env.close()
    for consumer in consumers:
        assert not consumer.alive()
        assert not os.path.exists(f"/proc/{consumer.pid}")


def test_missing_java_fails_with_an_install_hint() -> None:
    with pytest.raises(InteropSetupError, match="apt-get install openjdk-17"):
        check_java("no-such-java-for-pyrmq")


def test_a_taken_port_fails_the_start_as_port_taken(java_env: JavaEnv) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(PortTakenError):
            java_env.start_java_namesrv(taken.getsockname()[1])
