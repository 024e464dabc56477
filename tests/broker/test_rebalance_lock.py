"""RebalanceLockManager as Java's: who holds each queue of a group, with 60 s expiry."""

from __future__ import annotations

import pytest

from broker.rebalance_lock import REBALANCE_LOCK_MAX_LIVE_TIME_MS, RebalanceLockManager
from remoting.bodies import LockBatchRequestBody, LockBatchResponseBody, MessageQueue

MAX = REBALANCE_LOCK_MAX_LIVE_TIME_MS


def run(script: str) -> list[str]:
    """Each step is "client lock|unlock queues @ms"; returns what each lock step got."""
    locks: RebalanceLockManager[int] = RebalanceLockManager()
    got = []
    for step in script.split(";"):
        client, verb, queues, at = step.split()
        mqs = [int(q) for q in queues.split(",")]
        now_ms = int(at.removeprefix("@"))
        if verb == "lock":
            outcome = locks.try_lock_batch("G", mqs, client, now_ms=now_ms)
            got.append(",".join(str(q) for q in sorted(outcome.locked)) or "-")
        else:
            locks.unlock_batch("G", mqs, client)
    return got


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        pytest.param("c1 lock 0,1 @0", ["0,1"], id="free-queues-are-locked"),
        pytest.param("c1 lock 0,1 @0; c2 lock 0,1,2 @1", ["0,1", "2"], id="held-by-other"),
        pytest.param("c1 lock 0 @0; c1 lock 0 @1", ["0", "0"], id="holder-renews"),
        pytest.param(f"c1 lock 0 @0; c2 lock 0 @{MAX}", ["0", "-"], id="not-expired-at-max"),
        pytest.param(f"c1 lock 0 @0; c2 lock 0 @{MAX + 1}", ["0", "0"], id="expired-taken-over"),
        pytest.param(
            f"c1 lock 0 @0; c1 lock 0 @{MAX}; c2 lock 0 @{MAX + 1}", ["0", "0", "-"],
            id="renewal-extends-the-lease",
        ),
        pytest.param("c1 lock 0 @0; c1 unlock 0 @1; c2 lock 0 @2", ["0", "0"], id="unlocked"),
        pytest.param("c1 lock 0 @0; c2 unlock 0 @1; c2 lock 0 @2", ["0", "-"], id="foreign-unlock"),
    ],
)
def test_lock_rules_follow_java(script: str, expected: list[str]) -> None:
    assert run(script) == expected


def test_groups_are_independent_and_expiry_is_reported() -> None:
    locks: RebalanceLockManager[int] = RebalanceLockManager(lock_max_live_time_ms=10)
    assert locks.try_lock_batch("A", [0], "c1", now_ms=0).locked == {0}
    assert locks.try_lock_batch("B", [0], "c2", now_ms=0).locked == {0}
    assert locks.holder("A", 0, now_ms=5) == "c1"
    assert not locks.is_lock_all_expired("A", now_ms=10)
    assert locks.is_lock_all_expired("A", now_ms=11)
    assert locks.holder("A", 0, now_ms=11) is None
    outcome = locks.try_lock_batch("A", [0], "c3", now_ms=11)
    assert outcome.locked == {0}
    assert outcome.taken_over == ((0, "c1"),)


def test_lock_bodies_round_trip_and_read_java_bytes() -> None:
    java = (
        b'{"clientId":"127.0.0.1@1","consumerGroup":"G","mqSet":[{"brokerName":"broker-a",'
        b'"queueId":1,"topic":"T"}],"onlyThisBroker":false}'
    )
    body = LockBatchRequestBody.decode(java)
    assert body == LockBatchRequestBody(
        consumer_group="G", client_id="127.0.0.1@1",
        mq_set=frozenset({MessageQueue("T", "broker-a", 1)}),
    )
    assert body.encode() == java
    answer = LockBatchResponseBody(frozenset({MessageQueue("T", "broker-a", 1)}))
    assert answer.encode() == b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":1,"topic":"T"}]}'
    assert LockBatchResponseBody.decode(answer.encode()) == answer
