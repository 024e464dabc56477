"""Admin and slave-sync codes: UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21),
GET_BROKER_RUNTIME_INFO (28), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), GET_TOPIC_STATS_INFO (202), GET_TOPIC_CONFIG (351),
GET_ALL_MESSAGE_REQUEST_MODE (402), GET_BROKER_HA_STATUS (907) and GET_BROKER_EPOCH_CACHE (1007)
(docs/remoting-protocol.md §6.11, §9.2, §10).

The slave-sync tables are served as Java 5.5.0 serves them: GET_ALL_TOPIC_CONFIG and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG page (by name order, `page_bounds` of
broker/slave_synchronize.py) when `enableSplitMetadata` is on and the request carries a paging
field, else return the whole table; both always answer the total count (`totalTopicNum`,
`totalGroupNum`). A page of groups carries the forbidden-table entries of its groups only. A
negative `topicSeq`/`groupSeq`, a page size below 1 or a `dataVersion` that is not DataVersion
JSON is SYSTEM_ERROR naming the field. GET_ALL_MESSAGE_REQUEST_MODE answers an empty map (pyrmq
has no POP request modes), so a Java slave's sync of it succeeds.

UPDATE_AND_CREATE_TOPIC follows Java 5.3.3's `AdminBrokerProcessor.updateAndCreateTopic`:
an invalid name or (with `validateSystemTopicWhenUpdateTopic`) a system topic is 29; a config
equal to the stored one is 0 with no change; otherwise the config is stored, persisted,
registered with the name servers (the topic manager's change listener) and answered 0.
Topic `attributes` (`+key=value,...`) are stored as given; Java also checks them against its
known attribute names, pyrmq does not.

GET_TOPIC_STATS_INFO and GET_TOPIC_CONFIG are what `mqadmin topicStatus` asks. The first follows
`getTopicStatsInfo`: 17 for an unknown topic, else a `TopicStatsTable` with min and max offset and
the store time of the last message of each queue up to max(read, write) queue nums (`topicPutTps`
is 0.0: pyrmq keeps no per-topic TPS yet). The second answers 17 for an unknown topic, else the
`TopicConfig` as JSON (Java's `TopicConfigAndQueueMapping` with no mapping detail, which fastjson
omits: the same bytes).

GET_BROKER_HA_STATUS (`mqadmin haStatus`) answers RocketMQ's `HARuntimeInfo` as JSON (the spec
lacks this body; its fields are those of Java's class, see `remoting.bodies.HARuntimeInfo`), from
`AutoSwitchHAService.runtime_info`. A broker without controller mode has no HA service: it
answers as Java's DefaultHAService does for a master with no slave.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.config_file import dump_pretty
from broker.consumer_offsets import ConsumerOffsetManager
from broker.metrics import BrokerMetrics
from broker.runtime_stats import RuntimeStats
from broker.slave_synchronize import decode_data_version, page_bounds
from broker.subscription_groups import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager, validate_topic
from controller.messages import EpochEntryCache
from remoting.bodies import DataVersion, HARuntimeInfo, KVTable, TopicConfig, TopicFilterType
from remoting.codes import PYRMQ_VERSION, PYRMQ_VERSION_DESC, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.errors import BodyDecodeError, HeaderFieldError
from remoting.fastjson import dump_fastjson
from remoting.headers import (
    CommandHeader,
    CreateTopicRequestHeader,
    GetAllSubscriptionGroupRequestHeader,
    GetAllSubscriptionGroupResponseHeader,
    GetAllTopicConfigRequestHeader,
    GetAllTopicConfigResponseHeader,
)
from store.message_store import MessageStore


@dataclass(frozen=True, slots=True)
class GetTopicStatsInfoRequestHeader(CommandHeader):
    """GET_TOPIC_STATS_INFO (202). Java's header also inherits `lo` and `bname` (static
    topics), which pyrmq does not serve and ignores."""

    topic: str


@dataclass(frozen=True, slots=True)
class GetTopicConfigRequestHeader(CommandHeader):
    """GET_TOPIC_CONFIG (351). `lo` asks for the static-topic mapping, which pyrmq has none of;
    Java's header also inherits `bname`, ignored here."""

    topic: str
    lo: bool | None = None


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """One queue's row of a `TopicStatsTable`."""

    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


def encode_topic_stats_table(
    *, broker_name: str, topic: str, offsets: Sequence[TopicOffset], topic_put_tps: float
) -> bytes:
    """`TopicStatsTable` as fastjson writes it: `offsetTable` maps a MessageQueue *object*
    (fastjson writes non-string keys as JSON objects) to its TopicOffset, fields in name order.

        {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:
            {"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0},...},"topicPutTps":0.0}

    Entries are in queue-id order (Java's come in ConcurrentHashMap order; readers use a map).
    """
    entries = ",".join(
        dump_fastjson({"brokerName": broker_name, "queueId": row.queue_id, "topic": topic})
        + ":"
        + dump_fastjson({
            "lastUpdateTimestamp": row.last_update_timestamp,
            "maxOffset": row.max_offset,
            "minOffset": row.min_offset,
        })
        for row in offsets
    )
    tps = dump_fastjson(float(topic_put_tps))
    return f'{{"offsetTable":{{{entries}}},"topicPutTps":{tps}}}'.encode()


def parse_attributes(text: str | None) -> dict[str, str]:
    """`AttributeParser.parseToMap` for additions: `+a=1,+b=2` -> {"a": "1", "b": "2"}.

    Raises ValueError for an entry that is not `+key=value` (deletions `-key` only make sense
    against an existing topic and are refused here too).
    """
    attributes: dict[str, str] = {}
    if not text:
        return attributes
    for entry in text.split(","):
        if not entry.startswith("+") or "=" not in entry:
            raise ValueError(f"attribute {entry!r} is not +key=value")
        key, value = entry[1:].split("=", 1)
        if not key:
            raise ValueError(f"attribute {entry!r} has an empty key")
        attributes[key] = value
    return attributes


def human_readable_bytes(count: int) -> str:
    """`MixAll.humanReadableByteCount(bytes, false)`: binary units, one decimal."""
    if count < 1024:
        return f"{count} B"
    units = "KMGTPE"
    exponent = 0
    value = float(count)
    while value >= 1024 and exponent < len(units):
        value /= 1024
        exponent += 1
    return f"{value:.1f} {units[exponent - 1]}iB"


def runtime_text(elapsed_ms: int) -> str:
    """Java's `StoreStatsService.getFormatRuntime`."""
    seconds = elapsed_ms // 1000
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3_600)
    minutes, seconds = divmod(seconds, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]"


class AdminProcessor:
    """Topic administration, runtime information and the tables slaves copy."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        store: MessageStore,
        topic_configs: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        consumer_offsets: ConsumerOffsetManager,
        metrics: BrokerMetrics,
        runtime_stats: RuntimeStats,
        boot_timestamp_ms: int,
        delay_offsets_json: Callable[[], str | None] = lambda: None,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        ha_runtime_info: Callable[[], HARuntimeInfo] | None = None,
        role_id: Callable[[], int] | None = None,
    ) -> None:
        self._config = config
        self._store = store
        self._topics = topic_configs
        self._groups = subscription_groups
        self._offsets = consumer_offsets
        self._metrics = metrics
        self._stats = runtime_stats
        self._boot_timestamp_ms = boot_timestamp_ms
        self._delay_offsets_json = delay_offsets_json
        self._wall_ms = wall_ms
        self._ha_runtime_info = ha_runtime_info
        self._role_id = role_id or (lambda: config.broker_id)

    async def update_and_create_topic(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
        invalid = validate_topic(header.topic)
        if invalid is not None:
            return request.make_response(ResponseCode.INVALID_PARAMETER, remark=invalid)
        if self._config.validate_system_topic_when_update_topic and \
                self._topics.is_system_topic(header.topic):
            return request.make_response(
                ResponseCode.INVALID_PARAMETER,
                remark=f"The topic[{header.topic}] is conflict with system topic.",
            )
        try:
            filter_type = TopicFilterType[header.topic_filter_type]
            attributes = parse_attributes(header.attributes)
        except (KeyError, ValueError) as err:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"topic {header.topic}: bad topicFilterType or attributes: {err}",
            )
        topic_config = TopicConfig(
            topic_name=header.topic,
            read_queue_nums=header.read_queue_nums,
            write_queue_nums=header.write_queue_nums,
            perm=header.perm,
            topic_filter_type=filter_type,
            topic_sys_flag=header.topic_sys_flag or 0,
            order=header.order,
            attributes=attributes,
        )
        await self._topics.update(topic_config)
        return request.make_response(ResponseCode.SUCCESS)

    async def get_all_topic_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetAllTopicConfigRequestHeader.from_ext_fields(request.ext_fields)
        wrapper = self._topics.serialize_wrapper()
        table = wrapper.topic_config_table
        names = self._page(
            "GetAllTopicConfigRequestHeader", table, wrapper.data_version,
            (header.topic_seq, "topicSeq"), header.data_version,
            (header.max_topic_num, "maxTopicNum"),
        )
        if names is not None:
            wrapper = dataclasses.replace(
                wrapper, topic_config_table={name: table[name] for name in names})
        fields = GetAllTopicConfigResponseHeader(total_topic_num=len(table)).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, ext_fields=fields,
                                     body=wrapper.encode())

    async def get_all_subscription_group_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetAllSubscriptionGroupRequestHeader.from_ext_fields(request.ext_fields)
        groups = self._groups
        names = self._page(
            "GetAllSubscriptionGroupRequestHeader", groups.table, groups.data_version,
            (header.group_seq, "groupSeq"), header.data_version,
            (header.max_group_num, "maxGroupNum"),
        )
        body = dump_pretty(groups.encode(names), pretty=False).encode("utf-8")
        fields = GetAllSubscriptionGroupResponseHeader(total_group_num=len(groups)
                                                       ).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, ext_fields=fields, body=body)

    def _page(
        self, header: str, table: Mapping[str, object], version: DataVersion,
        seq: tuple[int | None, str], asked_version: str | None,
        max_num: tuple[int | None, str],
    ) -> list[str] | None:
        """The names of the page asked for, or None for the whole table (no paging field, or
        `enableSplitMetadata` off). Raises HeaderFieldError for a field it cannot use."""
        (seq_value, seq_key), (max_value, max_key) = seq, max_num
        if not self._config.enable_split_metadata or \
                (seq_value is None and asked_version is None and max_value is None):
            return None
        if seq_value is not None and seq_value < 0:
            raise HeaderFieldError(header, seq_key, str(seq_value), "is negative")
        if max_value is not None and max_value < 1:
            raise HeaderFieldError(header, max_key, str(max_value), "is below 1")
        same_version = False
        if asked_version is not None and asked_version.strip():
            try:
                same_version = decode_data_version(asked_version, "dataVersion") == version
            except BodyDecodeError as err:
                raise HeaderFieldError(header, "dataVersion", asked_version,
                                       f"is not DataVersion JSON ({err})") from err
        page_size = self._config.split_metadata_size
        if max_value is not None:
            page_size = min(page_size, max_value)
        names = sorted(table)
        begin, end = page_bounds(len(names), seq=seq_value or 0, same_version=same_version,
                                 page_size=page_size)
        return names[begin:end]

    async def get_all_consumer_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        body = dump_fastjson(self._offsets.encode_json_value()).encode("utf-8")
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def get_all_delay_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        content = self._delay_offsets_json()
        if not content:
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         remark="Get all delay offset from master error.")
        return request.make_response(ResponseCode.SUCCESS, body=content.encode("utf-8"))

    async def get_all_message_request_mode(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=b'{"messageRequestModeMap":{}}')

    async def get_topic_stats_info(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetTopicStatsInfoRequestHeader.from_ext_fields(request.ext_fields)
        topic_config = self._topics.select(header.topic)
        if topic_config is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                         remark=f"topic[{header.topic}] not exist")
        queue_nums = max(topic_config.write_queue_nums, topic_config.read_queue_nums)
        body = encode_topic_stats_table(
            broker_name=self._config.broker_name, topic=header.topic,
            offsets=[self._topic_offset(header.topic, q) for q in range(queue_nums)],
            topic_put_tps=0.0,
        )
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def get_topic_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetTopicConfigRequestHeader.from_ext_fields(request.ext_fields)
        topic_config = self._topics.select(header.topic)
        if topic_config is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                         remark=f"No topic in this broker. topic: {header.topic}")
        return request.make_response(ResponseCode.SUCCESS, body=topic_config.encode())

    def _topic_offset(self, topic: str, queue_id: int) -> TopicOffset:
        """Java clamps negative offsets to 0; the timestamp is the last message's (0: none)."""
        queue = self._store.queue(topic, queue_id)
        if queue is None:
            return TopicOffset(queue_id, 0, 0, 0)
        min_offset, max_offset = max(0, queue.min_offset), max(0, queue.max_offset)
        timestamp = 0
        if max_offset > min_offset:
            try:
                phy_offset, size, _ = queue.unit_at(max_offset - 1)
                timestamp = self._store.store_timestamp_at(phy_offset, size)
            except IndexError:
                timestamp = 0
        return TopicOffset(queue_id, min_offset, max_offset, timestamp)

    async def get_broker_runtime_info(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        return request.make_response(
            ResponseCode.SUCCESS, body=KVTable(self.runtime_info()).encode()
        )

    async def get_broker_ha_status(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        if self._ha_runtime_info is not None:
            info = self._ha_runtime_info()
        else:
            info = HARuntimeInfo(master=True,
                                 master_commit_log_max_offset=self._store.max_phy_offset)
        return request.make_response(ResponseCode.SUCCESS, body=info.encode())

    async def get_broker_epoch_cache(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """`mqadmin getBrokerEpoch`: the store's epoch entries (the last one open-ended, as
        Java's), the role id (0 on the master) and the max offset. Controller mode only."""
        if not self._config.store.enable_controller_mode:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark="GET_BROKER_EPOCH_CACHE needs enableControllerMode=true",
            )
        cache = EpochEntryCache(
            cluster_name=self._config.broker_cluster_name,
            broker_name=self._config.broker_name,
            broker_id=self._role_id(),
            epoch_list=self._store.epoch_cache.entries,
            max_offset=self._store.max_phy_offset,
        )
        return request.make_response(ResponseCode.SUCCESS, body=cache.encode())

    def runtime_info(self) -> dict[str, str]:
        """The KVTable of GET_BROKER_RUNTIME_INFO: Java's keys that `mqadmin clusterList` and
        `brokerStatus` read, with the same meaning and format."""
        now = self._wall_ms()
        store = self._store
        root = self._config.store.store_path_root_dir
        try:
            usage = shutil.disk_usage(root)
            disk_ratio = usage.used / usage.total if usage.total else 0.0
            capacity = (f"Total : {human_readable_bytes(usage.total)}, "
                        f"Free : {human_readable_bytes(usage.free)}.")
        except OSError:
            disk_ratio, capacity = -1.0, ""
        earliest = 0
        if store.max_phy_offset > store.min_phy_offset:
            try:
                earliest = store.store_timestamp_at(store.min_phy_offset, 0)
            except IndexError:
                earliest = 0
        return {
            "brokerVersionDesc": PYRMQ_VERSION_DESC,
            "brokerVersion": str(PYRMQ_VERSION),
            "brokerActive": "true",
            "bootTimestamp": str(self._boot_timestamp_ms),
            "runtime": runtime_text(now - self._boot_timestamp_ms),
            "msgPutTotalYesterdayMorning": "0",
            "msgPutTotalTodayMorning": "0",
            "msgPutTotalTodayNow": str(self._metrics.put_message_count),
            "msgGetTotalYesterdayMorning": "0",
            "msgGetTotalTodayMorning": "0",
            "msgGetTotalTodayNow": str(self._metrics.get_message_count),
            "commitLogMinOffset": str(store.min_phy_offset),
            "commitLogMaxOffset": str(store.max_phy_offset),
            "commitLogDiskRatio": str(disk_ratio),
            "consumeQueueDiskRatio": str(disk_ratio),
            "commitLogDirCapacity": capacity,
            "dispatchBehindBytes": str(store.dispatch_behind_bytes),
            "remainHowManyDataToFlush": human_readable_bytes(
                max(0, store.max_phy_offset - store.commitlog.flushed_where)
            ),
            "pageCacheLockTimeMills": "0",
            "earliestMessageTimeStamp": str(earliest),
            "startAcceptSendRequestTimeStamp": str(
                self._config.start_accept_send_request_timestamp_ms
            ),
            "putTps": self._stats.put.text(),
            "getTransferredTps": self._stats.get.text(),
            "putMessageTimesTotal": str(self._metrics.put_message_count),
            # pyrmq has no thread pools and no timer store: these are Java's idle values.
            "sendThreadPoolQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "timerReadBehind": "0",
            "timerOffsetBehind": "0",
            "timerCongestNum": "0",
            "timerEnqueueTps": "0.0",
            "timerDequeueTps": "0.0",
            "topicNumber": str(len(self._topics)),
            "subscriptionGroupNumber": str(len(self._groups)),
        }
