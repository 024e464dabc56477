"""The data source's options (pure): parsed and checked at plan time, Kafka's names and meaning
wherever RocketMQ has the same concept.

A bad option raises `OptionError` naming the option, the value given and what was expected.
Offsets, in options and in Spark's checkpoint alike, are JSON of the form
`{"topic": {"brokerName": {"queueId": offset}}}`, where -2 means earliest and -1 latest (as in
Kafka's JSON offsets).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pyrmq_client.cluster import split_addrs
from pyrmq_client.routing import MessageQueue
from pyspark_rocketmq.errors import OptionError

EARLIEST: Final = -2
LATEST: Final = -1
PULL_BATCH_SIZE_DEFAULT: Final = 32
PULL_BATCH_SIZE_MAX: Final = 1024
DEFAULT_GROUP: Final = "pyspark_rocketmq"
FAILOVER_TIMEOUT_MS_DEFAULT: Final = 30_000

# A queue's offset by (topic, brokerName, queueId): what offsets JSON decodes to.
QueueOffsets = dict[MessageQueue, int]


class _Options(dict[str, str]):
    """Options by name, case-insensitively (Spark lower-cases option names)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__((key.lower(), value) for key, value in options.items())

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(key.lower(), default)


def offsets_to_json(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, dict[str, int]]]:
    """Offsets as the nested JSON-able dict (sorted, so equal offsets give equal JSON)."""
    result: dict[str, dict[str, dict[str, int]]] = {}
    for queue in sorted(offsets):
        result.setdefault(queue.topic, {}).setdefault(queue.broker_name, {})[
            str(queue.queue_id)] = offsets[queue]
    return result


def offsets_from_json(value: object, option: str = "offsets") -> QueueOffsets:
    """The nested dict (or its JSON text) back as offsets; OptionError when malformed."""
    expected = ('JSON {"topic": {"brokerName": {"queueId": offset}}} with offsets >= 0, '
                "-2 (earliest) or -1 (latest)")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise OptionError(option, value, expected) from None
    offsets: QueueOffsets = {}
    if not isinstance(value, dict):
        raise OptionError(option, value, expected)
    for topic, brokers in value.items():
        if not isinstance(brokers, dict):
            raise OptionError(option, value, expected)
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise OptionError(option, value, expected)
            for queue_id, offset in queues.items():
                if (not str(queue_id).isdigit() or not isinstance(offset, int)
                        or isinstance(offset, bool) or offset < EARLIEST):
                    raise OptionError(option, value, expected)
                offsets[MessageQueue(topic, broker, int(queue_id))] = offset
    return offsets


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """startingOffsets / endingOffsets: "earliest", "latest" or per-queue offsets (a queue not
    listed takes `default`)."""

    default: int
    per_queue: tuple[tuple[MessageQueue, int], ...] = ()

    def for_queue(self, queue: MessageQueue) -> int:
        return dict(self.per_queue).get(queue, self.default)


def _offset_spec(options: Mapping[str, str], name: str, default: str, *,
                 allowed: tuple[str, ...]) -> OffsetSpec:
    text = (options.get(name) or default).strip()
    words = {"earliest": EARLIEST, "latest": LATEST}
    if text.lower() in words:
        if text.lower() not in allowed:
            raise OptionError(name, text, " or ".join(allowed) + " or JSON offsets")
        return OffsetSpec(words[text.lower()])
    offsets = offsets_from_json(text, name)
    if "latest" not in allowed and LATEST in offsets.values():
        raise OptionError(name, text, "no -1 (latest) offset in a starting offset of a batch read")
    if "earliest" not in allowed and EARLIEST in offsets.values():
        raise OptionError(name, text, "no -2 (earliest) offset in endingOffsets")
    return OffsetSpec(words[default], tuple(sorted(offsets.items())))


def _int(options: Mapping[str, str], name: str, default: int | None, *, low: int,
         high: int | None = None) -> int | None:
    text = options.get(name)
    if text is None:
        return default
    expected = f"an integer >= {low}" + (f" and <= {high}" if high is not None else "")
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(name, text, expected) from None
    if value < low or (high is not None and value > high):
        raise OptionError(name, text, expected)
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise OptionError(name, text, "true or false")
    return text.strip().lower() == "true"


def _name_server(options: Mapping[str, str]) -> str:
    text = options.get("nameServer")
    if text is None or not text.strip():
        raise OptionError("nameServer", text, 'the name server addresses, "host:port[;host:port]"')
    try:
        if not split_addrs(text):
            raise OptionError("nameServer", text, '"host:port[;host:port]"')
    except ValueError:
        raise OptionError("nameServer", text, '"host:port[;host:port]"') from None
    return text.strip()


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The options of a read (batch or streaming)."""

    name_server: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None
    fail_on_data_loss: bool
    sub_expression: str
    pull_batch_size: int
    min_partitions: int | None
    include_properties: bool
    max_messages_per_trigger: int | None
    group: str
    failover_timeout_ms: int

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        """Check every option; OptionError for the first bad one."""
        options = _Options(options)
        topic, topics = options.get("topic"), options.get("topics")
        if (topic is None) == (topics is None):
            raise OptionError("topic/topics", {"topic": topic, "topics": topics},
                              "exactly one of topic (one name) or topics (comma-separated)")
        names = tuple(t.strip() for t in (topic or topics or "").split(",") if t.strip())
        if not names or (topic is not None and len(names) != 1):
            raise OptionError("topic" if topic is not None else "topics", topic or topics,
                              "one topic name" if topic is not None else "topic names, a,b")
        starting = _offset_spec(options, "startingOffsets", "latest" if streaming else "earliest",
                                allowed=("earliest", "latest") if streaming else ("earliest",))
        if streaming and "endingOffsets" in options:
            raise OptionError("endingOffsets", options["endingOffsets"],
                              "no endingOffsets in a streaming read (batch reads only)")
        ending = _offset_spec(options, "endingOffsets", "latest", allowed=("latest",))
        if not streaming and "maxMessagesPerTrigger" in options:
            raise OptionError("maxMessagesPerTrigger", options["maxMessagesPerTrigger"],
                              "no maxMessagesPerTrigger in a batch read (streaming only)")
        sub_expression = (options.get("subExpression") or "*").strip() or "*"
        return cls(
            name_server=_name_server(options),
            topics=names,
            starting=starting,
            ending=ending,
            starting_timestamp=_int(options, "startingTimestamp", None, low=0),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            sub_expression=sub_expression,
            pull_batch_size=_int(options, "pullBatchSize", PULL_BATCH_SIZE_DEFAULT, low=1,
                                 high=PULL_BATCH_SIZE_MAX) or PULL_BATCH_SIZE_DEFAULT,
            min_partitions=_int(options, "minPartitions", None, low=1),
            include_properties=_bool(options, "includeProperties", False),
            max_messages_per_trigger=_int(options, "maxMessagesPerTrigger", None, low=1),
            group=options.get("consumerGroup") or DEFAULT_GROUP,
            failover_timeout_ms=_int(options, "failoverTimeoutMs", FAILOVER_TIMEOUT_MS_DEFAULT,
                                     low=0) or 0,
        )


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The options of a write: `topic` is the default of rows without a topic column value."""

    name_server: str
    topic: str | None
    producer_group: str
    idempotency_key: bool
    batch_size: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        options = _Options(options)
        topic = options.get("topic")
        if topic is not None and not topic.strip():
            raise OptionError("topic", topic, "a topic name (or a topic column)")
        return cls(
            name_server=_name_server(options),
            topic=topic.strip() if topic else None,
            producer_group=options.get("producerGroup") or DEFAULT_GROUP,
            idempotency_key=_bool(options, "idempotencyKey", False),
            batch_size=_int(options, "sendBatchSize", 64, low=1, high=1024) or 64,
        )
