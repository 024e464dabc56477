"""The readers: batch (`BatchReader`) and micro-batch streaming (`StreamReader`).

Planning runs in the driver's Python worker: routes and min/max offsets from the name server
and brokers (`ClusterClient`, re-resolved each micro-batch and after every failed request;
a read waits up to failoverTimeoutMs for a broker set's new master). `read()` runs on an
executor with its own `ClusterClient` (a partition is a small picklable `RangePartition`), pulls
its range in batches of pullBatchSize and yields one Arrow record batch per pull. Spark's
checkpoint holds the offsets; the source keeps no state of its own between micro-batches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pyrmq_client import ClusterClient, MessageQueue, PullResult, PullStatus
from pyspark_rocketmq.arrow import pull_to_batch
from pyspark_rocketmq.errors import DataLossError
from pyspark_rocketmq.options import (
    EARLIEST,
    LATEST,
    QueueOffsets,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
)
from pyspark_rocketmq.planning import (
    QueueBounds,
    QueueRange,
    limit,
    ranges,
    reconcile,
    split,
)
from store.tag_filter import build_tag_filter

log = logging.getLogger(__name__)
T = TypeVar("T")

PLAN_TIMEOUT_MS: Final = 5_000


class RangePartition(InputPartition):
    """One Spark partition: one `QueueRange`."""

    def __init__(self, value: QueueRange) -> None:
        super().__init__(value)
        self.range = value


async def _bounds(client: ClusterClient, topics: Sequence[str]) -> dict[MessageQueue, QueueBounds]:
    """Every readable queue of `topics` (from fresh routes) with its min and max offsets."""
    queues = [queue for topic in topics for queue in await client.read_queues(topic)]
    mins = await asyncio.gather(*(client.min_offset(queue) for queue in queues))
    maxes = await asyncio.gather(*(client.max_offset(queue) for queue in queues))
    return {queue: QueueBounds(low, high)
            for queue, low, high in zip(queues, mins, maxes, strict=True)}


async def _starting(client: ClusterClient, options: SourceOptions,
                    bounds: Mapping[MessageQueue, QueueBounds]) -> QueueOffsets:
    """startingTimestamp (first offset stored at or after it), else startingOffsets."""
    if options.starting_timestamp is not None:
        timestamp = options.starting_timestamp
        found = await asyncio.gather(*(client.search_offset(queue, timestamp)
                                       for queue in bounds))
        return dict(zip(bounds, found, strict=True))
    return {queue: bound.resolve(options.starting.for_queue(queue))
            for queue, bound in bounds.items()}


def _plan(options: SourceOptions, work: Callable[[ClusterClient], Awaitable[T]]) -> T:
    async def run() -> T:
        async with ClusterClient(options.name_server, timeout_ms=PLAN_TIMEOUT_MS,
                                 failover_timeout_ms=options.failover_timeout_ms) as client:
            return await work(client)

    return asyncio.run(run())


class _Reading:
    """`read()`, shared by both readers: pull a range, one Arrow batch per pull."""

    options: SourceOptions

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        loop = asyncio.new_event_loop()
        client = ClusterClient(self.options.name_server,
                               failover_timeout_ms=self.options.failover_timeout_ms)
        try:
            yield from _pull_range(loop, client, self.options, partition.range)
        finally:
            loop.run_until_complete(client.close())
            loop.close()


def _pull_range(loop: asyncio.AbstractEventLoop, client: ClusterClient, options: SourceOptions,
                part: QueueRange) -> Iterator[pa.RecordBatch]:
    """Pull `part`, one Arrow batch per pull. The next pull is sent before a batch is built and
    handed to Spark, so the broker and the network work while this process converts."""
    queue = part.queue
    offset = part.start
    if offset == EARLIEST:
        offset = loop.run_until_complete(client.min_offset(queue))

    tag_filter = build_tag_filter(options.sub_expression)
    tags = None if tag_filter.codes is None else frozenset(
        tag.strip() for tag in options.sub_expression.split("||") if tag.strip())

    def fetch(at: int) -> asyncio.Task[PullResult]:
        task = loop.create_task(client.pull(
            options.group, queue, at, max_nums=min(options.pull_batch_size, part.end - at),
            subscription=options.sub_expression, decode=False))
        loop.run_until_complete(asyncio.sleep(0))  # let it write the request
        return task

    pending = fetch(offset) if offset < part.end else None
    try:
        while pending is not None:
            pulled = loop.run_until_complete(pending)
            pending = None
            if pulled.status is PullStatus.OFFSET_ILLEGAL and offset < pulled.min_offset:
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"queue {queue}: offsets {offset}..{pulled.min_offset - 1} are gone (min "
                        f"offset {pulled.min_offset}); set failOnDataLoss=false to skip them")
                log.warning("queue %s: offsets %d..%d are gone, skipped", queue, offset,
                            pulled.min_offset - 1)
                offset = pulled.min_offset
            elif pulled.status in (PullStatus.NO_NEW_MSG, PullStatus.OFFSET_ILLEGAL):
                # The queue ends before the planned end: its max offset moved back.
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"queue {queue}: max offset {pulled.max_offset} is below the planned "
                        f"end {part.end}; set failOnDataLoss=false to go on without those offsets")
                log.warning("queue %s ends at %d, before the planned end %d", queue,
                            pulled.max_offset, part.end)
                return
            else:  # FOUND, or NO_MATCHED_MSG (nothing passed the tag filter)
                if pulled.next_begin_offset <= offset:
                    raise RuntimeError(f"queue {queue}: the broker's next offset "
                                       f"{pulled.next_begin_offset} does not move on from {offset}")
                offset = pulled.next_begin_offset
            if offset < part.end:
                pending = fetch(offset)
            if pulled.status is PullStatus.FOUND:
                batch = pull_to_batch(pulled.body, queue.broker_name, end_offset=part.end,
                                      tags=tags, include_properties=options.include_properties)
                if batch.num_rows:
                    yield batch
    finally:
        if pending is not None:
            pending.cancel()
            loop.run_until_complete(asyncio.gather(pending, return_exceptions=True))


class BatchReader(_Reading, DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options

        async def plan(client: ClusterClient) -> list[QueueRange]:
            bounds = await _bounds(client, options.topics)
            start = await _starting(client, options, bounds)
            end = {queue: bound.resolve(options.ending.for_queue(queue))
                   for queue, bound in bounds.items()}
            for queue, offset in start.items():
                if offset < bounds[queue].min_offset:
                    if options.fail_on_data_loss:
                        raise DataLossError(
                            f"startingOffsets: queue {queue} offset {offset} is below its min "
                            f"offset {bounds[queue].min_offset}; set failOnDataLoss=false to "
                            "start at the min offset")
                    start[queue] = bounds[queue].min_offset
            return ranges(start, end)

        planned = _plan(options, plan)
        return [RangePartition(part) for part in split(planned, options.min_partitions)]


class StreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are `offsets_to_json` dicts. `latestOffset` re-resolves the routes each
    micro-batch, so new queues join (at their min offset) and vanished ones are data loss."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._available_now: QueueOffsets | None = None

    def initialOffset(self) -> dict[str, Any]:
        options = self.options

        async def plan(client: ClusterClient) -> QueueOffsets:
            bounds = await _bounds(client, options.topics)
            return await _starting(client, options, bounds)

        return offsets_to_json(_plan(options, plan))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_messages_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow reads up to the max offsets of this moment, in as many
        micro-batches as maxMessagesPerTrigger makes."""
        options = self.options

        async def plan(client: ClusterClient) -> dict[MessageQueue, QueueBounds]:
            return await _bounds(client, options.topics)

        bounds = _plan(options, plan)
        self._available_now = {queue: bound.max_offset for queue, bound in bounds.items()}

    def latestOffset(self, start: dict[str, Any], limit_: ReadLimit) -> dict[str, Any]:
        options = self.options
        begin = offsets_from_json(start)

        async def plan(client: ClusterClient) -> dict[MessageQueue, QueueBounds]:
            return await _bounds(client, options.topics)

        bounds = _plan(options, plan)
        current = reconcile(begin, bounds, fail_on_data_loss=options.fail_on_data_loss)
        latest = {queue: bound.max_offset for queue, bound in bounds.items()}
        if self._available_now is not None:
            latest = {queue: min(offset, self._available_now.get(queue, current[queue]))
                      for queue, offset in latest.items()}
            latest = {queue: max(offset, current[queue]) for queue, offset in latest.items()}
        if isinstance(limit_, ReadMaxRows):
            latest = limit(current, latest, limit_.max_rows)
        return offsets_to_json(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        finish = offsets_from_json(end)
        planned = [part for part in ranges(begin, finish) if part.start != LATEST]
        return [RangePartition(part) for part in split(planned, self.options.min_partitions)]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark's checkpoint is the source of truth: nothing to store in the brokers."""
