"""Consumer groups' settings (`SubscriptionGroupManager`) and `config/subscriptionGroup.json`.

A group is created on first use (heartbeat, pull, send-back) when `autoCreateSubscriptionGroup`
is on and its name is valid (`TopicValidator.validateGroup`). The file has Java's shape:
`{"dataVersion":{..},"forbiddenTable":{..},"subscriptionGroupTable":{"<group>":{..}}}`; the
properties pyrmq does not interpret (`groupRetryPolicy`, `subscriptionDataSet`, `attributes`,
the forbidden table) are kept as read and written back unchanged.

Invariants:
- Every change bumps `data_version` and is persisted before the caller answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from broker.config_file import ConfigFile, PrettyValue
from broker.errors import ConfigFileError
from remoting.bodies import DataVersion, get_property, read_bool, read_int, read_long
from remoting.errors import BodyDecodeError
from remoting.fastjson import JSONValue

log = logging.getLogger(__name__)

GROUP_CHARS_MAX: Final = 120
_VALID_CHARS: Final = frozenset(
    "%|-_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)
RETRY_MAX_TIMES_DEFAULT: Final = 16
SYSTEM_GROUPS: Final = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
)
"""Groups a Java broker creates at start (`SubscriptionGroupManager.init`)."""


def validate_group(group: str) -> str | None:
    """`TopicValidator.validateGroup`: None if valid, else Java's remark."""
    if not group.strip():
        return "The specified group is blank."
    if not set(group) <= _VALID_CHARS:
        return (
            f"The specified group: {group}, contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$"
        )
    if len(group) > GROUP_CHARS_MAX:
        return f"The specified group: {group}, is longer than group max length: {GROUP_CHARS_MAX}"
    return None


def _default_retry_policy() -> JSONValue:
    return {"type": "CUSTOMIZED"}


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """`SubscriptionGroupConfig.java`, defaults as Java's."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = RETRY_MAX_TIMES_DEFAULT
    group_retry_policy: JSONValue = field(default_factory=_default_retry_policy)
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    subscription_data_set: JSONValue = None
    attributes: JSONValue = field(default_factory=dict)

    def to_json_value(self) -> dict[str, JSONValue]:
        value: dict[str, JSONValue] = {
            "attributes": self.attributes,
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "consumeMessageOrderly": self.consume_message_orderly,
            "consumeTimeoutMinute": self.consume_timeout_minute,
            "groupName": self.group_name,
            "groupRetryPolicy": self.group_retry_policy,
            "groupSysFlag": self.group_sys_flag,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
        }
        if self.subscription_data_set is not None:
            value["subscriptionDataSet"] = self.subscription_data_set
        value["whichBrokerWhenConsumeSlowly"] = self.which_broker_when_consume_slowly
        return value

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> SubscriptionGroupConfig:
        """Read one entry; raises `BodyDecodeError` naming the path of a wrongly typed value."""
        if not isinstance(value, dict):
            raise BodyDecodeError(f"{path} is not an object")
        defaults = cls(group_name="")

        def boolean(key: str, default: bool) -> bool:
            return get_property(value, key, path, read_bool, default)

        def integer(key: str, default: int) -> int:
            return get_property(value, key, path, read_int, default)

        def long(key: str, default: int) -> int:
            return get_property(value, key, path, read_long, default)

        name = value.get("groupName")
        if not isinstance(name, str):
            raise BodyDecodeError(f"{path}.groupName={name!r} is not a string")
        return cls(
            group_name=name,
            consume_enable=boolean("consumeEnable", defaults.consume_enable),
            consume_from_min_enable=boolean("consumeFromMinEnable",
                                            defaults.consume_from_min_enable),
            consume_broadcast_enable=boolean("consumeBroadcastEnable",
                                             defaults.consume_broadcast_enable),
            consume_message_orderly=boolean("consumeMessageOrderly",
                                            defaults.consume_message_orderly),
            retry_queue_nums=integer("retryQueueNums", defaults.retry_queue_nums),
            retry_max_times=integer("retryMaxTimes", defaults.retry_max_times),
            group_retry_policy=value.get("groupRetryPolicy", defaults.group_retry_policy),
            broker_id=long("brokerId", defaults.broker_id),
            which_broker_when_consume_slowly=long("whichBrokerWhenConsumeSlowly",
                                                  defaults.which_broker_when_consume_slowly),
            notify_consumer_ids_changed_enable=boolean(
                "notifyConsumerIdsChangedEnable", defaults.notify_consumer_ids_changed_enable
            ),
            group_sys_flag=integer("groupSysFlag", defaults.group_sys_flag),
            consume_timeout_minute=integer("consumeTimeoutMinute",
                                           defaults.consume_timeout_minute),
            subscription_data_set=value.get("subscriptionDataSet"),
            attributes=value.get("attributes", {}),
        )


def _read_file(
    value: JSONValue, path: str
) -> tuple[dict[str, SubscriptionGroupConfig], dict[str, JSONValue], DataVersion]:
    if not isinstance(value, dict):
        raise BodyDecodeError(f"{path} is not an object")
    raw_table = value.get("subscriptionGroupTable") or {}
    if not isinstance(raw_table, dict):
        raise BodyDecodeError(f"{path}.subscriptionGroupTable is not an object")
    table = {
        name: SubscriptionGroupConfig.from_json_value(
            item, f"{path}.subscriptionGroupTable[{name!r}]"
        )
        for name, item in raw_table.items()
    }
    forbidden = value.get("forbiddenTable") or {}
    if not isinstance(forbidden, dict):
        raise BodyDecodeError(f"{path}.forbiddenTable is not an object")
    version = DataVersion.from_json_value(value.get("dataVersion") or {}, f"{path}.dataVersion")
    return table, dict(forbidden), version


class SubscriptionGroupManager:
    """The consumer-group table of one broker and its file."""

    def __init__(
        self, file: ConfigFile, *, auto_create: bool, wall_ms: Callable[[], int]
    ) -> None:
        self._file = file
        self._auto_create = auto_create
        self._wall_ms = wall_ms
        self._table: dict[str, SubscriptionGroupConfig] = {
            name: SubscriptionGroupConfig(group_name=name) for name in SYSTEM_GROUPS
        }
        self._forbidden_table: dict[str, JSONValue] = {}
        self.data_version = DataVersion(timestamp=wall_ms())

    def load(self) -> None:
        """Read `subscriptionGroup.json` over the built-in groups. Blocking (startup).

        Raises `ConfigFileError` if the file and its `.bak` are both unparsable.
        """
        value = self._file.load()
        if value is None:
            return
        try:
            table, forbidden, version = _read_file(value, self._file.path.name)
        except BodyDecodeError as err:
            raise ConfigFileError(f"{self._file.path}: {err}") from err
        self._table.update(table)
        self._forbidden_table = forbidden
        self.data_version = version
        log.info("loaded subscription groups path=%s groups=%d", self._file.path, len(table))

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, never creating it."""
        return self._table.get(group)

    def __contains__(self, group: object) -> bool:
        return group in self._table

    def __len__(self) -> int:
        return len(self._table)

    @property
    def table(self) -> Mapping[str, SubscriptionGroupConfig]:
        return self._table

    async def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """`findSubscriptionGroupConfig`: the group's config, created (and persisted) when
        absent if auto-creation is on and the name is valid; else None."""
        found = self._table.get(group)
        if found is not None:
            return found
        if not self._auto_create or validate_group(group) is not None:
            return None
        created = SubscriptionGroupConfig(group_name=group)
        self._table[group] = created
        log.info("auto-created subscription group group=%s", group)
        self._next_data_version()
        await self.persist()
        return created

    async def update(self, config: SubscriptionGroupConfig) -> None:
        """Create or replace a group's config (admin)."""
        self._table[config.group_name] = config
        self._next_data_version()
        await self.persist()

    async def replace_from_master(self, table: Mapping[str, SubscriptionGroupConfig],
                                  version: DataVersion) -> None:
        """A slave takes its master's groups and version (broker/slave_synchronize.py); its
        own forbidden table stays (neither Java release's slave applies the master's)."""
        self._table = dict(table)
        self.data_version = version
        await self.persist()

    def _next_data_version(self) -> None:
        version = self.data_version
        self.data_version = DataVersion(
            state_version=version.state_version, timestamp=self._wall_ms(),
            counter=version.counter + 1,
        )

    def encode(self, names: Iterable[str] | None = None) -> PrettyValue:
        """`subscriptionGroup.json`: dataVersion, forbiddenTable, subscriptionGroupTable; with
        `names`, only those groups and their forbidden entries (a 5.5.0 page)."""
        chosen = self._table if names is None else \
            {name: self._table[name] for name in names if name in self._table}
        table: dict[str, PrettyValue] = {
            name: config.to_json_value() for name, config in chosen.items()
        }
        forbidden = self._forbidden_table if names is None else \
            {name: entry for name, entry in self._forbidden_table.items() if name in chosen}
        value: dict[str, PrettyValue] = {
            "dataVersion": self.data_version.to_json_value(),
            "forbiddenTable": dict(forbidden),
            "subscriptionGroupTable": table,
        }
        return value

    async def persist(self) -> None:
        await self._file.persist(self.encode)
