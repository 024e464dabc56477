"""`broker.conf`: RocketMQ's broker properties file as one typed, frozen `BrokerConfig`.

Each supported key (camelCase, exactly as RocketMQ spells it in `BrokerConfig`,
`MessageStoreConfig` and `NettyServerConfig`) maps to one snake_case field, with units last
(`flushIntervalCommitLog` -> `flush_interval_commit_log_ms`). Defaults are Java's except where
the comment on the field says otherwise. The MessageStoreConfig keys the store reads set the
embedded `StoreConfig` (`config.store`, the one home of those fields and their defaults).

Loading (`load_broker_config`) is stricter than Java, which silently ignores both unknown keys
and values it cannot parse:
- a value that does not parse as the key's type is a `BrokerConfigError` naming the file, the
  line, the key and the value (the broker does not start);
- an unknown key is a warning (returned, and logged by the caller); keys Java knows but pyrmq
  has no use for (thread-pool sizes and the like) are accepted quietly (`IGNORED_KEYS`);
- a key given twice: the last one wins, as in Java, with a warning.
Value text is stripped of surrounding whitespace (Java keeps trailing blanks, which then fail
its own number parsing silently).

Invariants:
- `BrokerConfig` values are always valid for their type and range (checked at load).
- `ha_listen_port` is never 0 once built from a file: absent, it is `listen_port + 1` (Java's
  `BrokerStartup`), except when `listen_port` is 0 (tests bind any free port).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from broker.errors import BrokerConfigError
from ha.config import HAConfig
from remoting.fastjson import java_int
from remoting.local_address import local_address
from remoting.properties import PropertiesSyntaxError, PropertyEntry, parse_properties
from store.config import FlushDiskType, StoreConfig
from store.schedule import parse_message_delay_level


class BrokerRole(enum.Enum):
    """`BrokerRole.java`. Ignored in controller mode (the controller decides)."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class MetricsExporterType(enum.Enum):
    """`MetricsExporterType.java`. pyrmq serves PROM (Prometheus text) only; OTLP_GRPC and LOG
    are accepted and treated as DISABLE (with a warning from the node)."""

    DISABLE = "DISABLE"
    OTLP_GRPC = "OTLP_GRPC"
    PROM = "PROM"
    LOG = "LOG"


def _default_namesrv_addr() -> str | None:
    return os.environ.get("NAMESRV_ADDR") or None


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Every `broker.conf` key pyrmq supports, typed. Build it with `load_broker_config`."""

    # -- identity and network (BrokerConfig, NettyServerConfig)
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = field(default_factory=socket.gethostname)
    broker_id: int = 0
    broker_ip1: str = field(default_factory=local_address)
    broker_ip2: str = ""  # empty: same as broker_ip1
    bind_address: str = "0.0.0.0"  # noqa: S104 - Java's default: every interface
    listen_port: int = 10911
    ha_listen_port: int = 0  # 0: listen_port + 1
    namesrv_addr: str | None = field(default_factory=_default_namesrv_addr)
    broker_permission: int = 6
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    server_channel_max_idle_time_seconds: int = 120
    server_socket_backlog: int = 1024
    # -- topics, groups, clients
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    revive_queue_num: int = 8
    validate_system_topic_when_update_topic: bool = True
    reject_transaction_message: bool = False
    notify_consumer_ids_changed_enable: bool = True
    channel_expired_timeout_ms: int = 120_000
    flush_consumer_offset_interval_ms: int = 5_000
    long_polling_enable: bool = True
    short_polling_time_ms: int = 1_000
    slave_read_enable: bool = False
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    start_accept_send_request_timestamp_ms: int = 0
    # -- name server registration
    register_name_server_period_ms: int = 30_000
    register_broker_timeout_ms: int = 24_000
    enable_slave_acting_master: bool = False
    # -- controller mode (docs/replicas-manager.md §2); enableControllerMode is
    # `store.enable_controller_mode` (dispatch stops at confirm_offset)
    controller_addr: str = ""
    fetch_controller_addr_by_dns_lookup: bool = False
    sync_controller_metadata_period_ms: int = 10_000
    sync_broker_metadata_period_ms: int = 5_000
    check_sync_state_set_period_ms: int = 5_000
    broker_heartbeat_interval_ms: int = 1_000
    send_heartbeat_timeout_ms: int = 1_000
    controller_heart_beat_timeout_ms: int = 10_000
    broker_election_priority: int = 2**31 - 1
    # -- HA (docs/ha-protocol.md §13)
    ha_send_heartbeat_interval_ms: int = 5_000
    ha_housekeeping_interval_ms: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_max_time_slave_not_catchup_ms: int = 15_000
    ha_flow_control_enable: bool = False
    max_ha_transfer_byte_in_second: int = 100 * 1024 * 1024
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    sync_from_last_file: bool = False
    async_learner: bool = False
    total_replicas: int = 1
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    # pyrmq default true (Java: false): an acknowledged message survives the loss of the master.
    all_ack_in_sync_state_set: bool = True
    enable_auto_in_sync_replicas: bool = False
    slave_timeout_ms: int = 3_000
    # -- pyrmq: a fixed HA role, given by a test fixture until the controller work lands.
    # "" (none: the broker stays fenced), "master" or "slave"; brokerId is the controller id.
    pyrmq_ha_role: str = ""
    pyrmq_ha_master_epoch: int = 1
    pyrmq_ha_master_address: str = ""  # slave: the master's brokerIP2:haListenPort
    pyrmq_ha_sync_state_set: str = ""  # master: comma-separated broker ids
    pyrmq_ha_replica_ids: str = ""  # master: ids allowed to handshake, comma-separated
    # slave: the master's remoting address ip:listenPort for the metadata sync
    # (broker/slave_synchronize.py); "" = the HA address's host with its port - 1
    pyrmq_ha_master_remoting_address: str = ""
    # controller mode: a slave's HA connection must come from the host the controller
    # registered for its id (broker/ha_peers.py)
    pyrmq_ha_check_peer_address: bool = True
    # -- slave metadata sync (docs/remoting-protocol.md §10; 5.5.0 paging)
    enable_split_metadata: bool = True
    split_metadata_size: int = 2_000
    pyrmq_slave_sync_interval_ms: int = 3_000  # pyrmq: Java syncs every 3 s (at most every 10 s)
    # -- metrics (pyrmq default PROM; Java: DISABLE)
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.PROM
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: int = 5557
    # -- pyrmq's own: the event-loop lag monitor (broker/loop_monitor.py); interval 0: off
    event_loop_lag_sample_interval_ms: int = 5
    event_loop_stall_threshold_ms: int = 20
    # -- store: the MessageStoreConfig keys the store reads (its one home, store/config.py)
    store: StoreConfig = field(default_factory=lambda: StoreConfig(Path.home() / "store"))
    # MessageStoreConfig keys only the broker reads (the schedule service)
    flush_delay_offset_interval_ms: int = 10_000

    def __post_init__(self) -> None:
        if self.ha_listen_port == 0 and self.listen_port != 0:
            object.__setattr__(self, "ha_listen_port", self.listen_port + 1)
        if not self.broker_ip2:
            object.__setattr__(self, "broker_ip2", self.broker_ip1)

    @property
    def namesrv_addr_list(self) -> tuple[str, ...]:
        """The name servers of `namesrvAddr` (`;`-separated), without blanks."""
        if not self.namesrv_addr:
            return ()
        return tuple(part.strip() for part in self.namesrv_addr.split(";") if part.strip())

    @property
    def register_name_server_period_effective_ms(self) -> int:
        """Java clamps the registration period to 10..60 s."""
        return max(10_000, min(self.register_name_server_period_ms, 60_000))

    def to_ha_config(self) -> HAConfig:
        """The HA service's settings (docs/ha-protocol.md §13); `brokerId` is the controller id."""
        return HAConfig(
            broker_id=self.broker_id,
            ha_listen_port=self.ha_listen_port,
            bind_address=self.bind_address,
            ha_send_heartbeat_interval_ms=self.ha_send_heartbeat_interval_ms,
            ha_housekeeping_interval_ms=self.ha_housekeeping_interval_ms,
            ha_transfer_batch_size=self.ha_transfer_batch_size,
            ha_max_time_slave_not_catchup_ms=self.ha_max_time_slave_not_catchup_ms,
            check_sync_state_set_period_ms=self.check_sync_state_set_period_ms,
            all_ack_in_sync_state_set=self.all_ack_in_sync_state_set,
            in_sync_replicas=self.in_sync_replicas,
            min_in_sync_replicas=self.min_in_sync_replicas,
            slave_timeout_ms=self.slave_timeout_ms,
            sync_from_last_file=self.sync_from_last_file,
            async_learner=self.async_learner,
        )


# --------------------------------------------------------------------------------------------
# Key table: broker.conf key -> field and value parser


def _parse_str(text: str) -> object:
    return text


def _parse_int32(text: str) -> object:
    value = java_int(text, bits=32)
    if value is None:
        raise ValueError("is not an int32 (-2147483648..2147483647)")
    return value


def _parse_int64(text: str) -> object:
    value = java_int(text, bits=64)
    if value is None:
        raise ValueError("is not an int64")
    return value


def _non_negative(parse: Callable[[str], object]) -> Callable[[str], object]:
    def parse_non_negative(text: str) -> object:
        value = parse(text)
        assert isinstance(value, int)
        if value < 0:
            raise ValueError("must not be negative")
        return value

    return parse_non_negative


def _port(text: str) -> object:
    value = _parse_int32(text)
    assert isinstance(value, int)
    if not 0 <= value <= 65535:
        raise ValueError("is not a port (0..65535)")
    return value


def _parse_bool(text: str) -> object:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError("is not a boolean (true/false)")
    return lowered == "true"


def _parse_path(text: str) -> object:
    if not text:
        raise ValueError("is an empty path")
    return Path(text).expanduser()


def _enum_parser(enum_type: type[enum.Enum]) -> Callable[[str], object]:
    names = ", ".join(member.name for member in enum_type)

    def parse(text: str) -> object:
        try:
            return enum_type[text]
        except KeyError:
            raise ValueError(f"is not one of {names}") from None

    return parse


def _enum_text(*allowed: str) -> Callable[[str], object]:
    def parse(text: str) -> object:
        if text not in allowed:
            raise ValueError(f"is not one of {', '.join(repr(a) for a in allowed)}")
        return text

    return parse


def _perm(text: str) -> object:
    value = _parse_int32(text)
    assert isinstance(value, int)
    if not 0 <= value <= 15:
        raise ValueError("is not a permission (0..15: PRIORITY 8 | READ 4 | WRITE 2 | INHERIT 1)")
    return value


def _ratio(text: str) -> object:
    value = _parse_int32(text)
    assert isinstance(value, int)
    if not 0 <= value <= 100:
        raise ValueError("is not a percentage (0..100)")
    return value


@dataclass(frozen=True, slots=True)
class _Key:
    """One key: its field (on `BrokerConfig`, or on `StoreConfig` when `store`), its parser."""

    field_name: str
    parse: Callable[[str], object]
    important: bool = False
    store: bool = False


def _delay_levels(text: str) -> object:
    parse_message_delay_level(text)  # DelayLevelError is a ValueError: reported like others
    return text


_INT = _non_negative(_parse_int32)


def _positive_int(text: str) -> object:
    value = _parse_int32(text)
    assert isinstance(value, int)
    if value <= 0:
        raise ValueError("must be positive")
    return value


_LONG = _non_negative(_parse_int64)

KEYS: Final[Mapping[str, _Key]] = {
    "brokerClusterName": _Key("broker_cluster_name", _parse_str, important=True),
    "brokerName": _Key("broker_name", _parse_str, important=True),
    "brokerId": _Key("broker_id", _parse_int64, important=True),
    "brokerIP1": _Key("broker_ip1", _parse_str, important=True),
    "brokerIP2": _Key("broker_ip2", _parse_str),
    "bindAddress": _Key("bind_address", _parse_str),
    "listenPort": _Key("listen_port", _port, important=True),
    "haListenPort": _Key("ha_listen_port", _port, important=True),
    "namesrvAddr": _Key("namesrv_addr", _parse_str, important=True),
    "brokerPermission": _Key("broker_permission", _perm),
    "regionId": _Key("region_id", _parse_str),
    "traceOn": _Key("trace_on", _parse_bool),
    "brokerRole": _Key("broker_role", _enum_parser(BrokerRole), important=True),
    "serverChannelMaxIdleTimeSeconds": _Key("server_channel_max_idle_time_seconds", _INT),
    "serverSocketBacklog": _Key("server_socket_backlog", _positive_int),
    "autoCreateTopicEnable": _Key("auto_create_topic_enable", _parse_bool, important=True),
    "autoCreateSubscriptionGroup": _Key("auto_create_subscription_group", _parse_bool),
    "defaultTopicQueueNums": _Key("default_topic_queue_nums", _INT),
    "clusterTopicEnable": _Key("cluster_topic_enable", _parse_bool),
    "brokerTopicEnable": _Key("broker_topic_enable", _parse_bool),
    "traceTopicEnable": _Key("trace_topic_enable", _parse_bool),
    "msgTraceTopicName": _Key("msg_trace_topic_name", _parse_str),
    "reviveQueueNum": _Key("revive_queue_num", _INT),
    "validateSystemTopicWhenUpdateTopic": _Key(
        "validate_system_topic_when_update_topic", _parse_bool
    ),
    "rejectTransactionMessage": _Key("reject_transaction_message", _parse_bool),
    "notifyConsumerIdsChangedEnable": _Key("notify_consumer_ids_changed_enable", _parse_bool),
    "channelExpiredTimeout": _Key("channel_expired_timeout_ms", _LONG),
    "flushConsumerOffsetInterval": _Key("flush_consumer_offset_interval_ms", _INT),
    "longPollingEnable": _Key("long_polling_enable", _parse_bool),
    "shortPollingTimeMills": _Key("short_polling_time_ms", _LONG),
    "slaveReadEnable": _Key("slave_read_enable", _parse_bool),
    "maxTransferBytesOnMessageInMemory": _Key("max_transfer_bytes_on_message_in_memory", _INT),
    "maxTransferCountOnMessageInMemory": _Key("max_transfer_count_on_message_in_memory", _INT),
    "startAcceptSendRequestTimeStamp": _Key("start_accept_send_request_timestamp_ms", _LONG),
    "registerNameServerPeriod": _Key("register_name_server_period_ms", _INT),
    "registerBrokerTimeoutMills": _Key("register_broker_timeout_ms", _INT),
    "enableSlaveActingMaster": _Key("enable_slave_acting_master", _parse_bool),
    "enableControllerMode": _Key("enable_controller_mode", _parse_bool, important=True,
                                  store=True),
    "controllerAddr": _Key("controller_addr", _parse_str, important=True),
    "fetchControllerAddrByDnsLookup": _Key("fetch_controller_addr_by_dns_lookup", _parse_bool),
    "syncControllerMetadataPeriod": _Key("sync_controller_metadata_period_ms", _LONG),
    "syncBrokerMetadataPeriod": _Key("sync_broker_metadata_period_ms", _LONG),
    "checkSyncStateSetPeriod": _Key("check_sync_state_set_period_ms", _LONG),
    "brokerHeartbeatInterval": _Key("broker_heartbeat_interval_ms", _INT),
    "sendHeartbeatTimeoutMillis": _Key("send_heartbeat_timeout_ms", _INT),
    "controllerHeartBeatTimeoutMills": _Key("controller_heart_beat_timeout_ms", _LONG),
    "brokerElectionPriority": _Key("broker_election_priority", _parse_int32),
    "haSendHeartbeatInterval": _Key("ha_send_heartbeat_interval_ms", _INT),
    "haHousekeepingInterval": _Key("ha_housekeeping_interval_ms", _INT),
    "haTransferBatchSize": _Key("ha_transfer_batch_size", _INT),
    "haMaxTimeSlaveNotCatchup": _Key("ha_max_time_slave_not_catchup_ms", _LONG),
    "haFlowControlEnable": _Key("ha_flow_control_enable", _parse_bool),
    "maxHaTransferByteInSecond": _Key("max_ha_transfer_byte_in_second", _LONG),
    "haMaxGapNotInSync": _Key("ha_max_gap_not_in_sync", _INT),
    "syncFromLastFile": _Key("sync_from_last_file", _parse_bool),
    "asyncLearner": _Key("async_learner", _parse_bool),
    "totalReplicas": _Key("total_replicas", _INT),
    "inSyncReplicas": _Key("in_sync_replicas", _INT),
    "minInSyncReplicas": _Key("min_in_sync_replicas", _INT),
    "allAckInSyncStateSet": _Key("all_ack_in_sync_state_set", _parse_bool, important=True),
    "enableAutoInSyncReplicas": _Key("enable_auto_in_sync_replicas", _parse_bool),
    "slaveTimeout": _Key("slave_timeout_ms", _INT),
    "pyrmqHaRole": _Key("pyrmq_ha_role", _enum_text("", "master", "slave")),
    "pyrmqHaMasterEpoch": _Key("pyrmq_ha_master_epoch", _INT),
    "pyrmqHaMasterAddress": _Key("pyrmq_ha_master_address", _parse_str),
    "pyrmqHaSyncStateSet": _Key("pyrmq_ha_sync_state_set", _parse_str),
    "pyrmqHaReplicaIds": _Key("pyrmq_ha_replica_ids", _parse_str),
    "pyrmqHaMasterRemotingAddress": _Key("pyrmq_ha_master_remoting_address", _parse_str),
    "pyrmqHaCheckPeerAddress": _Key("pyrmq_ha_check_peer_address", _parse_bool),
    "enableSplitMetadata": _Key("enable_split_metadata", _parse_bool),
    "splitMetadataSize": _Key("split_metadata_size", _positive_int),
    "pyrmqSlaveSyncIntervalMs": _Key("pyrmq_slave_sync_interval_ms", _positive_int),
    "metricsExporterType": _Key("metrics_exporter_type", _enum_parser(MetricsExporterType)),
    "metricsPromExporterHost": _Key("metrics_prom_exporter_host", _parse_str),
    "metricsPromExporterPort": _Key("metrics_prom_exporter_port", _port),
    "eventLoopLagSampleIntervalMs": _Key("event_loop_lag_sample_interval_ms", _INT),
    "eventLoopStallThresholdMs": _Key("event_loop_stall_threshold_ms", _positive_int),
    "storePathRootDir": _Key("store_path_root_dir", _parse_path, important=True, store=True),
    "mappedFileSizeCommitLog": _Key("mapped_file_size_commit_log", _INT, store=True),
    "mappedFileSizeConsumeQueue": _Key("mapped_file_size_consume_queue", _INT, store=True),
    "maxMessageSize": _Key("max_message_size", _INT, store=True),
    "flushDiskType": _Key(
        "flush_disk_type", _enum_parser(FlushDiskType), important=True, store=True
    ),
    "flushIntervalCommitLog": _Key("flush_interval_commit_log_ms", _INT, store=True),
    "messageDelayLevel": _Key("message_delay_level", _delay_levels, store=True),
    "flushDelayOffsetInterval": _Key("flush_delay_offset_interval_ms", _LONG),
    "flushCommitLogLeastPages": _Key("flush_commit_log_least_pages", _INT, store=True),
    "flushIntervalConsumeQueue": _Key("flush_interval_consume_queue_ms", _INT, store=True),
    "syncFlushTimeout": _Key("sync_flush_timeout_ms", _LONG, store=True),
    "fileReservedTime": _Key("file_reserved_time_h", _INT, store=True),
    "deleteWhen": _Key("delete_when", _parse_str, store=True),
    "diskMaxUsedSpaceRatio": _Key("disk_max_used_space_ratio", _ratio, store=True),
    "diskSpaceWarningLevelRatio": _Key("disk_space_warning_level_ratio", _ratio, store=True),
    "cleanResourceInterval": _Key("clean_resource_interval_ms", _INT, store=True),
    "enabledAppendPropCRC": _Key("enabled_append_prop_crc", _parse_bool, store=True),
    "checkCRCOnRecover": _Key("check_crc_on_recover", _parse_bool, store=True),
    "forceVerifyPropCRC": _Key("force_verify_prop_crc", _parse_bool, store=True),
    "readUnCommitted": _Key("read_uncommitted", _parse_bool, store=True),
}
"""Every key pyrmq reads, with its field and parser; `important` ones are printed by `-m`."""

IGNORED_KEYS: Final = frozenset(
    {
        # Java knows these; pyrmq has no thread pools, native selectors or these features.
        "sendMessageThreadPoolNums",
        "pullMessageThreadPoolNums",
        "queryMessageThreadPoolNums",
        "adminBrokerThreadPoolNums",
        "clientManageThreadPoolNums",
        "consumerManageThreadPoolNums",
        "heartbeatThreadPoolNums",
        "serverWorkerThreads",
        "serverCallbackExecutorThreads",
        "serverSelectorThreads",
        "clientWorkerThreads",
        "useEpollNativeSelector",
        "useReentrantLockWhenPutMessage",
        "transientStorePoolEnable",
        "transferMsgByHeap",
        "isolateLogEnable",
        "forceRegister",
        "enableDetailStat",
        "rocketmqHome",
        "messageIndexEnable",
        "osPageCacheBusyTimeOutMills",
        "waitTimeMillsInSendQueue",
        "brokerFastFailureEnable",
        "autoMessageVersionOnTopicLen",
        "offsetCheckInSlave",
    }
)
"""Java keys accepted without effect and without a warning."""

assert all(
    key.field_name
    in {f.name for f in dataclasses.fields(StoreConfig if key.store else BrokerConfig)}
    for key in KEYS.values()
)


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A loaded `broker.conf`: the config and the warnings to log (unknown or repeated keys)."""

    config: BrokerConfig
    warnings: tuple[str, ...]


_FIXED_STORE_PATHS: Final = {
    "storePathCommitLog": "commitlog",
    "storePathConsumeQueue": "consumequeue",
    "storePathEpochFile": "epochFileCheckpoint",
    "storePathBrokerIdentity": "brokerIdentity",
}
"""Java keys that move one store file or directory; pyrmq keeps them all under the root."""

_UNSUPPORTED_TRUE: Final = ("duplicationEnable", "enableDLegerCommitLog")
"""Boolean Java keys whose `true` asks for a feature pyrmq does not have."""


def _store_path_checks(
    entries: Mapping[str, PropertyEntry], root: Path, path: str
) -> None:
    """A store-path key is accepted only where pyrmq keeps that file anyway; a feature key
    pyrmq lacks is accepted only when off."""
    for key, name in _FIXED_STORE_PATHS.items():
        entry = entries.get(key)
        if entry is None:
            continue
        given = Path(entry.value.strip()).expanduser()
        if given != root / name:
            raise BrokerConfigError(
                f"{key}={entry.value!r}: pyrmq keeps this in storePathRootDir/{name} "
                f"({root / name}); remove the key or make them agree",
                path=path, line=entry.line, key=key,
            )
    for key in _UNSUPPORTED_TRUE:
        entry = entries.get(key)
        if entry is None:
            continue
        value = entry.value.strip()
        if value.lower() not in ("true", "false"):
            raise BrokerConfigError(f"{key}={value!r} is not a boolean (true/false)", path=path,
                                    line=entry.line, key=key)
        if value.lower() == "true":
            raise BrokerConfigError(f"{key}=true is not supported by pyrmq", path=path,
                                    line=entry.line, key=key)


def config_from_properties(
    entries: list[PropertyEntry], *, path: str = "broker.conf",
    overrides: Mapping[str, str] | None = None,
) -> LoadedConfig:
    """Build a `BrokerConfig` from parsed entries, then `overrides` (command line, no line).

    Raises `BrokerConfigError` for a value that does not parse, naming path, line and key.
    """
    warnings: list[str] = []
    last: dict[str, PropertyEntry] = {}
    for entry in entries:
        if entry.key in last:
            warnings.append(
                f"{path}:{entry.line}: key {entry.key} repeats line {last[entry.key].line}; "
                "the last value wins"
            )
        last[entry.key] = entry
    values: dict[str, object] = {}
    store_values: dict[str, object] = {"store_path_root_dir": Path.home() / "store"}
    for key, entry in last.items():
        spec = KEYS.get(key)
        if spec is None:
            if key not in IGNORED_KEYS and key not in _FIXED_STORE_PATHS \
                    and key not in _UNSUPPORTED_TRUE:
                warnings.append(f"{path}:{entry.line}: unknown key {key} ignored")
            continue
        (store_values if spec.store else values)[spec.field_name] = _parse_value(
            spec, key, entry.value, path=path, line=entry.line)
    for key, text in (overrides or {}).items():
        spec = KEYS[key]
        (store_values if spec.store else values)[spec.field_name] = _parse_value(
            spec, key, text, path="command line", line=None)
    try:
        store = StoreConfig(**store_values)  # type: ignore[arg-type]  # the store's own checks
        config = BrokerConfig(store=store, **values)  # type: ignore[arg-type]
    except ValueError as err:
        bad_key = next((k for k, spec in KEYS.items() if spec.field_name in str(err)), None)
        bad_entry = last.get(bad_key) if bad_key is not None else None
        raise BrokerConfigError(
            f"{bad_key}: {err}" if bad_key is not None else str(err), path=path,
            line=bad_entry.line if bad_entry is not None else None, key=bad_key,
        ) from err
    _store_path_checks(last, config.store.store_path_root_dir, path)
    return LoadedConfig(config, tuple(warnings))


def _parse_value(spec: _Key, key: str, text: str, *, path: str, line: int | None) -> object:
    stripped = text.strip()
    try:
        return spec.parse(stripped)
    except ValueError as err:
        raise BrokerConfigError(f"{key}={stripped!r} {err}", path=path, line=line, key=key) \
            from err


def load_broker_config(
    path: Path, *, overrides: Mapping[str, str] | None = None
) -> LoadedConfig:
    """Read and check `broker.conf` at `path` (UTF-8). `overrides` (e.g. `-n`) win.

    Raises `BrokerConfigError` for an unreadable file or a bad value (naming key and line).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise BrokerConfigError(f"cannot read the config file: {err}", path=str(path)) from err
    try:
        entries = parse_properties(text)
    except PropertiesSyntaxError as err:
        raise BrokerConfigError(err.detail, path=str(path), line=err.line) from err
    return config_from_properties(entries, path=str(path), overrides=overrides)


def config_items(config: BrokerConfig, *, important_only: bool = False) -> list[tuple[str, str]]:
    """`(key, value)` of every supported key (or the important ones), for `-p` / `-m`."""
    items: list[tuple[str, str]] = []
    for key, spec in KEYS.items():
        if important_only and not spec.important:
            continue
        value = getattr(config.store if spec.store else config, spec.field_name)
        if isinstance(value, enum.Enum):
            text = value.name
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif value is None:
            text = ""
        else:
            text = str(value)
        items.append((key, text))
    return items
