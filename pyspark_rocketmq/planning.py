"""Offset planning (pure): which offsets of which queues a batch or a micro-batch reads.

A partition is a `QueueRange`: one message queue and a half-open consume-queue offset range
[start, end). Everything here works on plain offsets; the shells ask the brokers for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyrmq_client.routing import MessageQueue
from pyspark_rocketmq.errors import DataLossError
from pyspark_rocketmq.options import EARLIEST, LATEST, QueueOffsets


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Read `queue` from offset `start` up to, not including, `end`."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


@dataclass(frozen=True, slots=True)
class QueueBounds:
    """A queue's min and max offsets (max: the offset the next message will get)."""

    min_offset: int
    max_offset: int

    def resolve(self, offset: int) -> int:
        """-2 / -1 (earliest / latest) to an offset; others as given."""
        if offset == EARLIEST:
            return self.min_offset
        if offset == LATEST:
            return self.max_offset
        return offset


def ranges(start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int]) -> list[QueueRange]:
    """The non-empty ranges from `start` to `end`, by queue; a queue absent from `start` starts
    at EARLIEST, resolved when it is read (it appeared after the start was planned: everything
    in it is new)."""
    result = []
    for queue in sorted(end):
        begin = start.get(queue, EARLIEST)
        if end[queue] > begin:
            result.append(QueueRange(queue.topic, queue.broker_name, queue.queue_id, begin,
                                     end[queue]))
    return result


def split(planned: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """Split the largest ranges until there are at least `min_partitions` (Kafka's
    minPartitions: split by offsets, never merged)."""
    result = list(planned)
    if min_partitions is None:
        return result
    while len(result) < min_partitions:
        widest = max(result, key=lambda r: r.end - r.start if r.start >= 0 else 0, default=None)
        if widest is None or widest.start < 0 or widest.end - widest.start < 2:
            break
        middle = widest.start + (widest.end - widest.start) // 2
        index = result.index(widest)
        result[index:index + 1] = [
            QueueRange(widest.topic, widest.broker_name, widest.queue_id, widest.start, middle),
            QueueRange(widest.topic, widest.broker_name, widest.queue_id, middle, widest.end),
        ]
    return result


def limit(start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int],
          max_rows: int) -> QueueOffsets:
    """The end offsets reading at most `max_rows` messages past `start`, shared among queues in
    proportion to their backlog (what remains goes to the first queues still behind), so every
    queue with a backlog moves on."""
    backlog = {queue: max(0, latest[queue] - start.get(queue, 0)) for queue in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    share = {queue: backlog[queue] * max_rows // total for queue in sorted(backlog)}
    left = max_rows - sum(share.values())
    for queue in sorted(backlog):
        if left == 0:
            break
        extra = min(left, backlog[queue] - share[queue])
        share[queue] += extra
        left -= extra
    return {queue: start.get(queue, 0) + share[queue] if backlog[queue] else latest[queue]
            for queue in latest}


def reconcile(start: Mapping[MessageQueue, int], bounds: Mapping[MessageQueue, QueueBounds], *,
              fail_on_data_loss: bool) -> QueueOffsets:
    """The start of the next micro-batch given the queues that exist now: a queue that vanished
    and a queue whose max offset moved below the committed offset are data loss (an error, or
    dropped / moved to the new max with failOnDataLoss=false); a new queue starts at its min."""
    result: QueueOffsets = {}
    for queue, offset in start.items():
        bound = bounds.get(queue)
        if bound is None:
            if fail_on_data_loss:
                raise DataLossError(f"queue {queue} (at offset {offset}) no longer exists; "
                                    "set failOnDataLoss=false to go on without it")
            continue
        if bound.max_offset < offset:
            if fail_on_data_loss:
                raise DataLossError(
                    f"queue {queue}: max offset {bound.max_offset} is below the committed offset "
                    f"{offset}; set failOnDataLoss=false to go on from {bound.max_offset}")
            result[queue] = bound.max_offset
            continue
        result[queue] = offset
    for queue, bound in bounds.items():
        result.setdefault(queue, bound.min_offset)
    return result
