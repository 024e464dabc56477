"""The broker's topic table (`TopicConfigManager`): system topics, auto-creation, admin updates,
and `config/topics.json`.

Auto-creation follows Java (`createTopicInSendMessageMethod`): an unknown topic is created from
its template (`defaultTopic`, normally `TBW102`) only if the template exists and carries
PERM_INHERIT; it gets `min(client queue nums, template write queues)` queues and the template's
permission without INHERIT. Retry and DLQ topics are created on demand with fixed settings
(`createTopicInSendMessageBackMethod`).

Invariants:
- Every change bumps `data_version` (counter + 1, timestamp now), is persisted (atomically,
  with `.bak`) before the caller answers, and then tells the change listeners (the name-server
  registration), in that order.
- A topic read from `topics.json` overrides the built-in system topic of the same name (Java
  loads the file over its initial table).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from broker.config import BrokerConfig
from broker.config_file import ConfigFile, PrettyValue
from broker.errors import ConfigFileError
from remoting.bodies import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    DataVersion,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
)
from remoting.errors import BodyDecodeError

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC_KEY_TOPIC: Final = "TBW102"
RMQ_SYS_SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_BENCHMARK_TOPIC: Final = "BenchmarkTest"
RMQ_SYS_TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
RMQ_SYS_SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
RMQ_SYS_OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
RMQ_SYS_ROCKSDB_OFFSET_TOPIC: Final = "CHECKPOINT_TOPIC"
# 5.5.0: the RocksDB transaction store's topics (system topics, not allowed for sends).
RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC: Final = "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC"
RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC"
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"
SYNC_BROKER_MEMBER_GROUP_PREFIX: Final = SYSTEM_TOPIC_PREFIX + "SYNC_BROKER_MEMBER_"
REVIVE_TOPIC_PREFIX: Final = SYSTEM_TOPIC_PREFIX + "REVIVE_LOG_"
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
SCHEDULE_TOPIC_QUEUE_NUM: Final = 18

TOPIC_CHARS_MAX: Final = 127
RETRY_OR_DLQ_TOPIC_CHARS_MAX: Final = 255
_VALID_CHARS: Final = frozenset(
    "%|-_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

SYSTEM_TOPICS: Final = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        RMQ_SYS_SCHEDULE_TOPIC,
        RMQ_SYS_BENCHMARK_TOPIC,
        RMQ_SYS_TRANS_HALF_TOPIC,
        RMQ_SYS_TRACE_TOPIC,
        RMQ_SYS_TRANS_OP_HALF_TOPIC,
        RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
        RMQ_SYS_SELF_TEST_TOPIC,
        RMQ_SYS_OFFSET_MOVED_EVENT,
        RMQ_SYS_ROCKSDB_OFFSET_TOPIC,
        RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC,
        RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC,
    }
)
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {
        RMQ_SYS_SCHEDULE_TOPIC,
        RMQ_SYS_TRANS_HALF_TOPIC,
        RMQ_SYS_TRANS_OP_HALF_TOPIC,
        RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
        RMQ_SYS_SELF_TEST_TOPIC,
        RMQ_SYS_OFFSET_MOVED_EVENT,
        RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC,
        RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC,
    }
)
"""Topics a client may not send to (`TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET`, as 5.5.0 has
it): code 16."""


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def validate_topic(topic: str) -> str | None:
    """`TopicValidator.validateTopic`: None if valid, else Java's remark saying why."""
    if not topic.strip():
        return "The specified topic is blank."
    if not set(topic) <= _VALID_CHARS:
        return (
            f"The specified topic: {topic}, contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$"
        )
    if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        if len(topic) > RETRY_OR_DLQ_TOPIC_CHARS_MAX:
            return (
                f"The specified topic is DLQ or Retry topic: {topic}, and it's longer than "
                f"topic max length: {RETRY_OR_DLQ_TOPIC_CHARS_MAX}"
            )
    elif len(topic) > TOPIC_CHARS_MAX:
        return (
            f"The specified topic: {topic}, is longer than topic max length: {TOPIC_CHARS_MAX}"
        )
    return None


def is_inherited(perm: int) -> bool:
    return perm & PERM_INHERIT == PERM_INHERIT


def is_readable(perm: int) -> bool:
    return perm & PERM_READ == PERM_READ


def is_writeable(perm: int) -> bool:
    return perm & PERM_WRITE == PERM_WRITE


def derive_auto_created_topic(
    topic: str, template: TopicConfig, *, client_queue_nums: int, topic_sys_flag: int
) -> TopicConfig | None:
    """The config an unknown `topic` gets from its `template`, or None if the template does not
    allow inheriting (no PERM_INHERIT)."""
    if not is_inherited(template.perm):
        return None
    queue_nums = max(0, min(client_queue_nums, template.write_queue_nums))
    return TopicConfig(
        topic_name=topic,
        read_queue_nums=queue_nums,
        write_queue_nums=queue_nums,
        perm=template.perm & ~PERM_INHERIT,
        topic_filter_type=template.topic_filter_type,
        topic_sys_flag=topic_sys_flag,
    )


def system_topic_configs(config: BrokerConfig) -> list[TopicConfig]:
    """The topics a Java broker creates at start (`TopicConfigManager.init`, timer topic aside)."""
    rw = PERM_READ | PERM_WRITE
    topics = [TopicConfig(RMQ_SYS_SELF_TEST_TOPIC, read_queue_nums=1, write_queue_nums=1)]
    if config.auto_create_topic_enable:
        topics.append(
            TopicConfig(
                AUTO_CREATE_TOPIC_KEY_TOPIC,
                read_queue_nums=config.default_topic_queue_nums,
                write_queue_nums=config.default_topic_queue_nums,
                perm=PERM_INHERIT | rw,
            )
        )
    topics.append(TopicConfig(RMQ_SYS_BENCHMARK_TOPIC, read_queue_nums=1024,
                              write_queue_nums=1024))
    topics.append(
        TopicConfig(
            config.broker_cluster_name,
            perm=PERM_INHERIT | (rw if config.cluster_topic_enable else 0),
        )
    )
    topics.append(
        TopicConfig(
            config.broker_name, read_queue_nums=1, write_queue_nums=1,
            perm=PERM_INHERIT | (rw if config.broker_topic_enable else 0),
        )
    )
    topics.append(TopicConfig(RMQ_SYS_OFFSET_MOVED_EVENT, read_queue_nums=1, write_queue_nums=1))
    topics.append(TopicConfig(RMQ_SYS_SCHEDULE_TOPIC, read_queue_nums=SCHEDULE_TOPIC_QUEUE_NUM,
                              write_queue_nums=SCHEDULE_TOPIC_QUEUE_NUM))
    if config.trace_topic_enable:
        topics.append(TopicConfig(config.msg_trace_topic_name, read_queue_nums=1,
                                  write_queue_nums=1))
    topics.append(TopicConfig(f"{config.broker_cluster_name}_{REPLY_TOPIC_POSTFIX}",
                              read_queue_nums=1, write_queue_nums=1))
    topics.append(TopicConfig(REVIVE_TOPIC_PREFIX + config.broker_cluster_name,
                              read_queue_nums=config.revive_queue_num,
                              write_queue_nums=config.revive_queue_num))
    topics.append(TopicConfig(SYNC_BROKER_MEMBER_GROUP_PREFIX + config.broker_name,
                              read_queue_nums=1, write_queue_nums=1, perm=PERM_INHERIT))
    topics.append(TopicConfig(RMQ_SYS_TRANS_HALF_TOPIC, read_queue_nums=1, write_queue_nums=1))
    topics.append(TopicConfig(RMQ_SYS_TRANS_OP_HALF_TOPIC, read_queue_nums=1, write_queue_nums=1))
    return topics


class TopicConfigManager:
    """The topic table of one broker and its file."""

    def __init__(
        self, config: BrokerConfig, file: ConfigFile, *, wall_ms: Callable[[], int]
    ) -> None:
        self._config = config
        self._file = file
        self._wall_ms = wall_ms
        self._table: dict[str, TopicConfig] = {}
        self._system_topics: set[str] = set(SYSTEM_TOPICS)
        self.data_version = DataVersion(timestamp=wall_ms())
        self._listeners: list[Callable[[], None]] = []

    def load(self) -> None:
        """Built-in system topics, then `topics.json` over them. Blocking (startup).

        Raises `ConfigFileError` if the file and its `.bak` are both unparsable.
        """
        for topic_config in system_topic_configs(self._config):
            self._table[topic_config.topic_name] = topic_config
            self._system_topics.add(topic_config.topic_name)
        value = self._file.load()
        if value is None:
            return
        try:
            wrapper = TopicConfigAndMappingSerializeWrapper.from_json_value(
                value, self._file.path.name
            )
        except BodyDecodeError as err:
            raise ConfigFileError(f"{self._file.path}: {err}") from err
        self._table.update(wrapper.topic_config_table)
        self.data_version = wrapper.data_version
        log.info("loaded topic configs path=%s topics=%d", self._file.path,
                 len(wrapper.topic_config_table))

    def add_change_listener(self, listener: Callable[[], None]) -> None:
        """`listener()` runs after each persisted change (e.g. "register with name servers")."""
        self._listeners.append(listener)

    def select(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

    def __contains__(self, topic: object) -> bool:
        return topic in self._table

    def __iter__(self) -> Iterator[TopicConfig]:
        return iter(list(self._table.values()))

    def __len__(self) -> int:
        return len(self._table)

    def is_system_topic(self, topic: str) -> bool:
        return topic in self._system_topics or topic.startswith(SYSTEM_TOPIC_PREFIX)

    def is_order_topic(self, topic: str) -> bool:
        found = self._table.get(topic)
        return found is not None and found.order

    async def create_in_send_message(
        self, topic: str, default_topic: str, *, client_queue_nums: int, topic_sys_flag: int
    ) -> TopicConfig | None:
        """The config of `topic`, auto-creating it from `default_topic`; None if the template
        is missing or does not allow inheriting."""
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        template = self._table.get(default_topic)
        if template is None:
            log.warning("topic not created: default topic missing topic=%s default_topic=%s",
                        topic, default_topic)
            return None
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and \
                not self._config.auto_create_topic_enable:
            template = dataclasses.replace(template, perm=PERM_READ | PERM_WRITE)
        created = derive_auto_created_topic(
            topic, template, client_queue_nums=client_queue_nums, topic_sys_flag=topic_sys_flag
        )
        if created is None:
            log.warning("topic not created: default topic has no inherit permission topic=%s "
                        "default_topic=%s perm=%d", topic, default_topic, template.perm)
            return None
        log.info("auto-created topic topic=%s default_topic=%s queues=%d perm=%d", topic,
                 default_topic, created.write_queue_nums, created.perm)
        await self._put(created)
        return created

    async def create_in_send_back(
        self, topic: str, *, queue_nums: int, perm: int, topic_sys_flag: int,
        order: bool | None = None,
    ) -> TopicConfig:
        """The config of a retry or DLQ `topic`, created with these settings if absent. With
        `order` given, an existing topic's `order` flag is updated to it."""
        existing = self._table.get(topic)
        if existing is not None:
            if order is not None and existing.order != order:
                existing = dataclasses.replace(existing, order=order)
                await self._put(existing)
            return existing
        created = TopicConfig(
            topic_name=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=perm,
            topic_sys_flag=topic_sys_flag, order=bool(order),
        )
        log.info("created topic topic=%s queues=%d perm=%d", topic, queue_nums, perm)
        await self._put(created)
        return created

    async def update(self, topic_config: TopicConfig) -> bool:
        """Create or replace a topic (admin). False if it equals the stored one (no change)."""
        if self._table.get(topic_config.topic_name) == topic_config:
            return False
        log.info("updated topic config=%s", topic_config)
        await self._put(topic_config)
        return True

    async def _put(self, topic_config: TopicConfig) -> None:
        self._table[topic_config.topic_name] = topic_config
        self.next_data_version()
        await self.persist()
        for listener in self._listeners:
            listener()

    async def replace_from_master(self, table: Mapping[str, TopicConfig],
                                  version: DataVersion) -> None:
        """A slave takes its master's whole table and version (broker/slave_synchronize.py):
        topics the master lacks are removed; persisted, then the listeners are told."""
        self._table = dict(table)
        self.data_version = version
        await self.persist()
        for listener in self._listeners:
            listener()

    def next_data_version(self, state_version: int | None = None) -> None:
        """`DataVersion.nextVersion`: counter + 1, timestamp now, state version kept or set."""
        version = self.data_version
        self.data_version = DataVersion(
            state_version=version.state_version if state_version is None else state_version,
            timestamp=self._wall_ms(),
            counter=version.counter + 1,
        )

    def serialize_wrapper(self, *, broker_permission: int = PERM_READ | PERM_WRITE,
                          ) -> TopicConfigAndMappingSerializeWrapper:
        """The table as registered with name servers and served to slaves. When the broker
        itself is not readable or writable, each topic's permission is cut to the broker's."""
        table = dict(self._table)
        if not is_writeable(broker_permission) or not is_readable(broker_permission):
            table = {
                name: dataclasses.replace(config, perm=config.perm & broker_permission)
                for name, config in table.items()
            }
        return TopicConfigAndMappingSerializeWrapper(
            topic_config_table=table,
            data_version=self.data_version,
            mapping_data_version=DataVersion(timestamp=self.data_version.timestamp),
        )

    def encode(self) -> PrettyValue:
        """`topics.json` (`TopicConfigSerializeWrapper`): dataVersion, topicConfigTable."""
        table: dict[str, PrettyValue] = {
            name: config.to_json_value() for name, config in self._table.items()
        }
        value: dict[str, PrettyValue] = {
            "dataVersion": self.data_version.to_json_value(),
            "topicConfigTable": table,
        }
        return value

    async def persist(self) -> None:
        await self._file.persist(self.encode)

