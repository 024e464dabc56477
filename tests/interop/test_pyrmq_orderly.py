"""Orderly consumption through pyrmq: Java's MessageListenerOrderly needs LOCK_BATCH_MQ /
UNLOCK_BATCH_MQ (broker/rebalance_lock.py) to consume at all.

The story: the C++ client sends 400 messages orderly over 4 queues (message i to queue i % 4).
Java consumer A (MessageListenerOrderly, 40 ms per message) starts alone and takes every queue;
consumer B joins the group while A is busy (the rebalance may move queues to B, once A unlocks
them); A leaves after 3 s, before it can finish (its shutdown unlocks its queues), and B takes
the rest. Every message is consumed; on each queue the
consumers never overlap in time, each consumes its queues in offset order, and a hand-over never
skips a message.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from tests.interop.conftest import PyrmqCluster
from tests.interop.pyrmq_env import wait_until
from tests.interop.test_pyrmq_cpp_client import run_cpp

pytestmark = pytest.mark.interop

TOPIC: Final = "PyrmqOrderly"
GROUP: Final = "orderly_group"
COUNT: Final = 400
QUEUES: Final = 4
HOLD_MS: Final = 40
A_RUN_S: Final = 3  # A leaves before it can finish: 100 messages x 40 ms per queue
B_RUN_S: Final = 60
B_IDLE_STOP_MS: Final = 4000  # B stops once it has consumed the rest
ORDERLY_MAIN: Final = "pyrmq.interop.OrderlyConsume"
CLIENT_SYSPROPS: Final = {"rocketmq.client.rebalance.waitInterval": "1000"}


@dataclass(frozen=True, slots=True)
class Consumed:
    instance: str
    key: str
    queue_id: int
    queue_offset: int
    start_us: int
    end_us: int


def parse(stdout: str) -> list[Consumed]:
    consumed = []
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) == 8 and fields[0] == "ORDERLY":
            _, instance, key, queue_id, offset, _reconsume, start, end = fields
            consumed.append(
                Consumed(instance, key, int(queue_id), int(offset), int(start), int(end))
            )
    return consumed


def test_orderly_consumers_take_turns_per_queue_and_consume_in_order(
    pyrmq_cluster: PyrmqCluster, tmp_path: Path
) -> None:
    namesrv = pyrmq_cluster.namesrv.addr
    sent = run_cpp(
        tmp_path, "produce", namesrv, TOPIC, COUNT, "orderly", "TagA", "--key-prefix=ord",
        f"--shards={QUEUES}", "--body-bytes=32",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stdout[-2000:] + sent.stderr[-2000:]
    java = pyrmq_cluster.java

    a = java.start_java(
        ORDERLY_MAIN,
        [namesrv, GROUP, TOPIC, "*", "A", f"--run-s={A_RUN_S}", f"--hold-ms={HOLD_MS}"],
        name="orderly-A",
        sysprops=CLIENT_SYSPROPS,
    )
    wait_until(lambda: a.stdout().count("ORDERLY") >= 20, timeout_s=60, what="A consuming")
    b = java.start_java(
        ORDERLY_MAIN,
        [namesrv, GROUP, TOPIC, "*", "B", f"--run-s={B_RUN_S}", f"--hold-ms={HOLD_MS}",
         f"--idle-stop-ms={B_IDLE_STOP_MS}"],
        name="orderly-B",
        sysprops=CLIENT_SYSPROPS,
    )
    try:
        assert a.wait(A_RUN_S + 90) == 0, a.diagnostics()
        assert b.wait(B_RUN_S + 90) == 0, b.diagnostics()
    finally:
        a.kill()
        b.kill()
    consumed = parse(a.stdout()) + parse(b.stdout())

    assert {c.key for c in consumed} == {f"ord-{i}" for i in range(COUNT)}, "messages missing"
    by_queue: dict[int, list[Consumed]] = defaultdict(list)
    for c in consumed:
        assert c.queue_id == int(c.key.removeprefix("ord-")) % QUEUES, c
        by_queue[c.queue_id].append(c)
    handed_over = 0
    for queue_id, entries in by_queue.items():
        entries.sort(key=lambda c: c.start_us)
        for before, after in itertools.pairwise(entries):
            assert after.start_us >= before.end_us, f"queue {queue_id}: {before} overlaps {after}"
            if before.instance == after.instance:
                assert after.queue_offset > before.queue_offset, f"out of order: {before} {after}"
            else:
                handed_over += 1
                # The new holder resumes at the committed offset: a redelivery is allowed, a gap
                # is not.
                seen = max(c.queue_offset for c in entries if c.start_us <= before.start_us)
                assert after.queue_offset <= seen + 1, f"queue {queue_id} skipped: {after}"
    instances = {c.instance for c in consumed}
    assert instances == {"A", "B"}, f"only {instances} consumed"
    assert handed_over >= 1, "no queue changed hands"
