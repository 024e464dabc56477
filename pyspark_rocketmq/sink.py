"""The sink: batch and streaming writes of a DataFrame's rows as messages, at least once.

Columns: `body` (binary or string, required), `topic` (else the `topic` option), `tags`,
`keys`, `properties` (map<string,string>), `queueId` (optional: the index into the topic's
writable queues, all broker groups in (brokerName, queueId) order, modulo their count). Each
task opens its own `ClusterClient` and sends in batches of sendBatchSize per queue; a failed
send fails the task (Spark retries it), so a message may be written twice but never lost.
With idempotencyKey=true every message carries the property `SPARK_IDEMPOTENCY_KEY`,
`<writeId>-<batchId>-<partition>-<row>` (row: the row's index in its task's input). In a
streaming write the writeId is the query's id, which Spark keeps in the checkpoint, so a
micro-batch replayed after a restart (same batch id, same source offsets, so the same rows in
the same partitions) gets the same keys; in a batch write it is random per write, the same for
a task Spark retries within it. A consumer can drop the duplicates by key.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from pyrmq_client import ClusterClient, Message, MessageQueue
from pyspark_rocketmq.errors import OptionError
from pyspark_rocketmq.options import SinkOptions

IDEMPOTENCY_PROPERTY: Final = "SPARK_IDEMPOTENCY_KEY"
_COLUMNS: Final = ("body", "topic", "tags", "keys", "properties", "queueId")


@dataclass
class SentCount(WriterCommitMessage):
    messages: int


def check_schema(schema: StructType, options: SinkOptions) -> None:
    """A plan-time check of the DataFrame written: a body column, a topic from somewhere, no
    column the sink does not know."""
    names = schema.fieldNames()
    if "body" not in names:
        raise OptionError("schema", names, "a body column (binary or string)")
    if not isinstance(schema["body"].dataType, BinaryType | StringType):
        raise OptionError("schema", str(schema["body"].dataType), "body as binary or string")
    if options.topic is None and "topic" not in names:
        raise OptionError("topic", None, "a topic option or a topic column")
    unknown = [name for name in names if name not in _COLUMNS]
    if unknown:
        raise OptionError("schema", unknown, f"only the columns {', '.join(_COLUMNS)}")


def _messages(batch: pa.RecordBatch, default_topic: str | None, key_prefix: str | None,
              first_row: int) -> Iterator[tuple[Message, int | None]]:
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    bodies = columns["body"]
    for i in range(batch.num_rows):
        body = bodies[i]
        topic = columns["topic"][i] if "topic" in columns else None
        topic = topic or default_topic
        if topic is None:
            raise ValueError(f"row {first_row + i}: no topic (null topic and no topic option)")
        properties = dict(columns["properties"][i] or []) if "properties" in columns else {}
        if key_prefix is not None:
            properties[IDEMPOTENCY_PROPERTY] = f"{key_prefix}-{first_row + i}"
        queue_id = columns["queueId"][i] if "queueId" in columns else None
        yield Message(
            topic=topic,
            body=body.encode() if isinstance(body, str) else (body or b""),
            tags=columns["tags"][i] if "tags" in columns else None,
            keys=columns["keys"][i] if "keys" in columns else None,
            properties=properties,
        ), queue_id


async def _send_all(options: SinkOptions, batches: Iterator[pa.RecordBatch],
                    key_prefix: str | None, partition: int) -> int:
    sent = 0
    async with ClusterClient(options.name_server) as client:
        pending: dict[MessageQueue, list[Message]] = {}

        async def flush(queue: MessageQueue) -> None:
            nonlocal sent
            messages = pending.pop(queue)
            await client.send_batch(messages, producer_group=options.producer_group,
                                    queue=queue)
            sent += len(messages)

        row = 0
        selectors: dict[str, int] = {}
        for batch in batches:
            for message, queue_id in _messages(batch, options.topic, key_prefix, row):
                route = await client.route(message.topic)
                queues = route.write_queues
                if not queues:
                    raise ValueError(f"topic {message.topic!r} has no writable queue")
                if queue_id is None:
                    # Round-robin per topic, a sendBatchSize run per queue, each task
                    # starting at its own queue.
                    index = selectors.get(message.topic, partition * options.batch_size)
                    queue = queues[(index // options.batch_size) % len(queues)]
                    selectors[message.topic] = index + 1
                else:
                    queue = queues[queue_id % len(queues)]
                pending.setdefault(queue, []).append(message)
                if len(pending[queue]) >= options.batch_size:
                    await flush(queue)
            row += batch.num_rows
        for queue in list(pending):
            await flush(queue)
    return sent


# Local properties Spark's micro-batch execution gives every task of a streaming query.
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"


def _write(options: SinkOptions, write_id: str, batches: Iterator[pa.RecordBatch]) -> int:
    """Send a task's rows; the idempotency key prefix is the write (the query id when
    streaming), micro-batch and partition."""
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    prefix = None
    if options.idempotency_key:
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        batch_id = (context.getLocalProperty(BATCH_ID_PROPERTY) if context else None) or "0"
        prefix = f"{query_id or write_id}-{batch_id}-{partition}"
    return asyncio.run(_send_all(options, batches, prefix, partition))


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.write_id = secrets.token_hex(8)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return SentCount(_write(self.options, self.write_id, iterator))


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.write_id = secrets.token_hex(8)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return SentCount(_write(self.options, self.write_id, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every message was acknowledged by its broker before its task ended."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Sent messages stay sent (at least once); nothing to undo."""
