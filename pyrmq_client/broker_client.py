"""One connection to one broker: send, batch send, pull and the consumer bookkeeping around them.

Built on `remoting.RemotingClient`, with no routing and no retries (`pyrmq_client.cluster` adds
name-server routing, queue selection, route refresh and bounded retries on top). It speaks exactly
what a Java client sends (SEND_MESSAGE_V2 with single-letter keys, PULL_MESSAGE with the
SUBSCRIPTION flag as a lite-pull consumer, HEART_BEAT with a fastjson `HeartbeatData`).

    async with await BrokerClient.connect("127.0.0.1", 10911) as client:
        producer = Producer(client, "PG")
        result = await producer.send(Message("TopicTest", b"hello", tags="TagA"))
        consumer = PullConsumer(client, "CG")
        pulled = await consumer.pull("TopicTest", result.queue_id, 0)

Errors: a broker answer other than success raises `BrokerClientError` with the code and remark
(a send answered 10/11/12 FLUSH_*_TIMEOUT / SLAVE_NOT_AVAILABLE is a `SendResult` with that code,
as the message was stored); transport failures raise the remoting errors.
"""

from __future__ import annotations

import enum
import ipaddress
import os
import secrets
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Self

from pyrmq_client.errors import BrokerClientError
from remoting.bodies import (
    PERM_READ,
    PERM_WRITE,
    ConsumeFromWhere,
    ConsumerData,
    ConsumerListBody,
    ConsumeType,
    HeartbeatData,
    KVTable,
    MessageModel,
    ProducerData,
    SubscriptionData,
    TopicConfigAndMappingSerializeWrapper,
)
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request_code_not_supported
from remoting.connection import RemotingConnection
from remoting.headers import (
    BoundaryType,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from remoting.local_address import local_address
from store.message_decoder import decode_record
from store.message_properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    encode_properties,
    java_string_hash,
)
from store.record_layout import TOTAL_SIZE, MessageRecord
from store.tag_filter import build_tag_filter
from store.uniq_id import UniqIdGenerator

TIMEOUT_MS_DEFAULT: Final = 3_000
PULL_TIMEOUT_EXTRA_MS: Final = 5_000
DEFAULT_TOPIC: Final = "TBW102"
DEFAULT_TOPIC_QUEUE_NUMS: Final = 4
PROPERTY_WAIT_STORE_MSG_OK: Final = "WAIT"
PULL_FLAG_COMMIT_OFFSET: Final = 0x1
PULL_FLAG_SUSPEND: Final = 0x2
PULL_FLAG_SUBSCRIPTION: Final = 0x4
_STORED_CODES: Final = frozenset({
    ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE,
})
# Batch body entry (docs/remoting-protocol.md §6.3): TOTALSIZE, MAGICCODE, BODYCRC, FLAG,
# BODYLENGTH.
_BATCH_ENTRY_HEAD: Final = struct.Struct(">iiiii")
_PROPERTIES_LENGTH: Final = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class Message:
    """A message to send. `keys` are space-separated (the KEYS property)."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    flag: int = 0

    def property_map(self, uniq_key: str | None) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags is not None:
            props[PROPERTY_TAGS] = self.tags
        if self.keys is not None:
            props[PROPERTY_KEYS] = self.keys
        if uniq_key is not None and PROPERTY_UNIQ_KEY not in props:
            props[PROPERTY_UNIQ_KEY] = uniq_key
        props.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true")
        return props


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a send was stored. `msg_id` is the offsetMsgId (comma-separated for a batch),
    `uniq_msg_id` the UNIQ_KEY (None for a batch), `code` 0 or a stored-but-not-confirmed code."""

    code: int
    msg_id: str
    uniq_msg_id: str | None
    queue_id: int
    queue_offset: int
    region_id: str | None
    trace_on: bool


class PullStatus(enum.Enum):
    """Java's `PullStatus`, from the response code."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_PULL_STATUS: Final[dict[int, PullStatus]] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(frozen=True, slots=True)
class PullResult:
    """A pull's answer: `messages` decoded (and re-filtered by tag, as Java clients do), or,
    for a pull with `decode=False`, `body` as the broker sent it (records back to back, not
    re-filtered; `messages` empty); `remark` is the broker's store status name (FOUND,
    OFFSET_OVERFLOW_ONE, ...)."""

    status: PullStatus
    remark: str | None
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    messages: tuple[MessageRecord, ...]
    body: bytes = b""


def encode_batch_body(messages: Sequence[tuple[int, bytes, bytes]]) -> bytes:
    """The SEND_BATCH_MESSAGE body of (flag, body, properties) entries (§6.3)."""
    parts: list[bytes] = []
    for flag, body, properties in messages:
        total = 22 + len(body) + len(properties)
        parts += (
            _BATCH_ENTRY_HEAD.pack(total, 0, 0, flag, len(body)),
            body,
            _PROPERTIES_LENGTH.pack(len(properties)),
            properties,
        )
    return b"".join(parts)


def decode_records(body: bytes) -> list[MessageRecord]:
    """The records of a FOUND pull body (whole commitlog records, back to back)."""
    records: list[MessageRecord] = []
    pos = 0
    while pos + 4 <= len(body):
        (size,) = TOTAL_SIZE.unpack_from(body, pos)
        if size <= 0 or pos + size > len(body):
            raise ValueError(f"pull body: record at {pos} has size {size} beyond the body")
        records.append(decode_record(body[pos : pos + size]))
        pos += size
    return records


def new_client_id() -> str:
    """`ip@pid#random`, shaped like a Java client id (`ip@instanceName`)."""
    return f"{local_address()}@{os.getpid()}#{secrets.token_hex(4)}"


def _check(response: RemotingCommand, what: str, *codes: int) -> RemotingCommand:
    if response.code not in (codes or (ResponseCode.SUCCESS,)):
        raise BrokerClientError(what, response.code, response.remark)
    return response


class BrokerClient:
    """One connection to one broker. Build with `connect`; also an async context manager."""

    def __init__(self, remoting: RemotingClient, client_id: str) -> None:
        self.remoting = remoting
        self.client_id = client_id
        self._uniq_ids = UniqIdGenerator(ipaddress.ip_address(local_address()).packed)
        self.notified_groups: list[str] = []

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        client_id: str | None = None,
        on_consumer_ids_changed: Callable[[str], None] | None = None,
        connect_timeout_ms: int = TIMEOUT_MS_DEFAULT,
    ) -> Self:
        """Connect; `on_consumer_ids_changed(group)` is called for each NOTIFY push (they are
        also recorded in `notified_groups`)."""
        holder: list[BrokerClient] = []

        async def handle(connection: RemotingConnection,
                         request: RemotingCommand) -> RemotingCommand | None:
            if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
                header = NotifyConsumerIdsChangedRequestHeader.from_ext_fields(
                    request.ext_fields
                )
                if holder:
                    holder[0].notified_groups.append(header.consumer_group)
                if on_consumer_ids_changed is not None:
                    on_consumer_ids_changed(header.consumer_group)
                return None
            return request_code_not_supported(request)

        remoting = await RemotingClient.connect(host, port, connect_timeout_ms=connect_timeout_ms,
                                                handler=handle)
        client = cls(remoting, client_id or new_client_id())
        holder.append(client)
        return client

    async def close(self) -> None:
        await self.remoting.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def invoke(self, request: RemotingCommand,
                     timeout_ms: int = TIMEOUT_MS_DEFAULT) -> RemotingCommand:
        """Send any request and return the raw response."""
        return await self.remoting.invoke(request, timeout_ms)

    # -- producing ---------------------------------------------------------------------------

    def _send_header(self, topic: str, *, producer_group: str, queue_id: int, properties: str,
                     flag: int, batch: bool) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            producer_group=producer_group, topic=topic, default_topic=DEFAULT_TOPIC,
            default_topic_queue_nums=DEFAULT_TOPIC_QUEUE_NUMS, queue_id=queue_id, sys_flag=0,
            born_timestamp=time.time_ns() // 1_000_000, flag=flag, properties=properties,
            reconsume_times=0, unit_mode=False, batch=batch,
        )

    def _send_result(self, response: RemotingCommand, what: str,
                     uniq_msg_id: str | None) -> SendResult:
        _check(response, what, *_STORED_CODES)
        fields = response.ext_fields
        return SendResult(
            code=response.code,
            msg_id=fields["msgId"],
            uniq_msg_id=uniq_msg_id,
            queue_id=int(fields["queueId"]),
            queue_offset=int(fields["queueOffset"]),
            region_id=fields.get("MSG_REGION"),
            trace_on=fields.get("TRACE_ON", "true") == "true",
        )

    async def send(
        self, message: Message, *, producer_group: str, queue_id: int = -1, v2: bool = True,
        timeout_ms: int = TIMEOUT_MS_DEFAULT,
    ) -> SendResult:
        """Send one message (SEND_MESSAGE_V2, or SEND_MESSAGE with `v2=False`); queue -1 lets
        the broker choose."""
        uniq = self._uniq_ids.next_id()
        properties = encode_properties(message.property_map(uniq)).decode()
        header = self._send_header(message.topic, producer_group=producer_group,
                                   queue_id=queue_id, properties=properties, flag=message.flag,
                                   batch=False)
        if v2:
            request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                              header.to_ext_fields_v2(), message.body)
        else:
            request = RemotingCommand.request(RequestCode.SEND_MESSAGE, header.to_ext_fields(),
                                              message.body)
        response = await self.invoke(request, timeout_ms)
        return self._send_result(response, f"send to {message.topic}", uniq)

    async def send_batch(
        self, messages: Sequence[Message], *, producer_group: str, queue_id: int = -1,
        timeout_ms: int = TIMEOUT_MS_DEFAULT,
    ) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE (one record each)."""
        if not messages:
            raise ValueError("send_batch needs at least one message")
        topic = messages[0].topic
        if any(message.topic != topic for message in messages):
            raise ValueError("a batch holds messages of one topic")
        entries = [
            (message.flag, message.body,
             encode_properties(message.property_map(self._uniq_ids.next_id())))
            for message in messages
        ]
        header = self._send_header(topic, producer_group=producer_group, queue_id=queue_id,
                                   properties=f"{PROPERTY_WAIT_STORE_MSG_OK}\x01true\x02",
                                   flag=0, batch=True)
        request = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE,
                                          header.to_ext_fields_v2(), encode_batch_body(entries))
        response = await self.invoke(request, timeout_ms)
        return self._send_result(response, f"batch send to {topic}", None)

    # -- consuming ---------------------------------------------------------------------------

    async def pull(
        self, group: str, topic: str, queue_id: int, offset: int, *, max_nums: int = 32,
        subscription: str = "*", suspend_timeout_ms: int | None = None,
        commit_offset: int | None = None, timeout_ms: int | None = None, decode: bool = True,
    ) -> PullResult:
        """PULL_MESSAGE with the SUBSCRIPTION flag. `suspend_timeout_ms` sets SUSPEND (long
        polling: the broker holds the pull until messages arrive or that time passes);
        `commit_offset` sets COMMIT_OFFSET (the broker stores it as the group's offset);
        `decode=False` keeps the records undecoded in `body` (a caller that decodes in bulk)."""
        sys_flag = PULL_FLAG_SUBSCRIPTION
        if suspend_timeout_ms is not None:
            sys_flag |= PULL_FLAG_SUSPEND
        if commit_offset is not None:
            sys_flag |= PULL_FLAG_COMMIT_OFFSET
        header = PullMessageRequestHeader(
            consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset,
            max_msg_nums=max_nums, sys_flag=sys_flag, commit_offset=commit_offset or 0,
            suspend_timeout_millis=suspend_timeout_ms or 0, sub_version=0,
            subscription=subscription, expression_type="TAG",
        )
        if timeout_ms is None:
            timeout_ms = (suspend_timeout_ms or 0) + PULL_TIMEOUT_EXTRA_MS
        response = await self.invoke(
            RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields()), timeout_ms
        )
        status = _PULL_STATUS.get(response.code)
        if status is None:
            raise BrokerClientError(f"pull {topic}:{queue_id}@{offset}", response.code,
                                    response.remark)
        fields = response.ext_fields
        found = status is PullStatus.FOUND
        messages = decode_records(response.body) if found and decode else []
        tag_filter = build_tag_filter(subscription)
        if tag_filter.codes is not None:
            messages = [
                record for record in messages
                if record.tags is not None and java_string_hash(record.tags) in tag_filter.codes
            ]
        return PullResult(
            status=status, remark=response.remark,
            next_begin_offset=int(fields["nextBeginOffset"]),
            min_offset=int(fields["minOffset"]), max_offset=int(fields["maxOffset"]),
            suggest_which_broker_id=int(fields.get("suggestWhichBrokerId", "0")),
            messages=tuple(messages),
            body=response.body if found and not decode else b"",
        )

    async def heartbeat(
        self, *, producer_groups: Sequence[str] = (),
        consumer_groups: Mapping[str, Mapping[str, str]] | None = None,
        consume_type: ConsumeType = ConsumeType.CONSUME_ACTIVELY,
        message_model: MessageModel = MessageModel.CLUSTERING,
    ) -> None:
        """HEART_BEAT; `consumer_groups` maps group -> {topic: TAG expression}."""
        consumers = []
        for group, subscriptions in (consumer_groups or {}).items():
            subs = []
            for topic, expression in subscriptions.items():
                tag_filter = build_tag_filter(expression)
                tags = tuple(t.strip() for t in expression.split("||") if t.strip()) \
                    if tag_filter.codes is not None else ()
                subs.append(SubscriptionData(
                    topic=topic, sub_string=expression, tags_set=tags,
                    code_set=tuple(java_string_hash(tag) for tag in tags),
                    sub_version=time.time_ns() // 1_000_000,
                ))
            consumers.append(ConsumerData(
                group_name=group, consume_type=consume_type, message_model=message_model,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                subscription_data_set=tuple(subs),
            ))
        data = HeartbeatData(
            client_id=self.client_id,
            producer_data_set=tuple(ProducerData(group) for group in producer_groups),
            consumer_data_set=tuple(consumers),
        )
        response = await self.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, {},
                                                             data.encode()))
        _check(response, "heartbeat")

    async def unregister(self, *, producer_group: str | None = None,
                         consumer_group: str | None = None) -> None:
        header = UnregisterClientRequestHeader(client_id=self.client_id,
                                               producer_group=producer_group,
                                               consumer_group=consumer_group)
        response = await self.invoke(RemotingCommand.request(RequestCode.UNREGISTER_CLIENT,
                                                             header.to_ext_fields()))
        _check(response, "unregister client")

    async def consumer_ids(self, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP: the client ids of the group's live consumers."""
        header = GetConsumerListByGroupRequestHeader(consumer_group=group)
        response = await self.invoke(RemotingCommand.request(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP, header.to_ext_fields()))
        _check(response, f"consumer list of {group}")
        return list(ConsumerListBody.decode(response.body).consumer_id_list)

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset, or None (QUERY_NOT_FOUND)."""
        header = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=topic,
                                                  queue_id=queue_id, set_zero_if_not_found=False)
        response = await self.invoke(RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext_fields()))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        _check(response, f"query offset {group} {topic}:{queue_id}")
        return int(response.ext_fields["offset"])

    async def update_consumer_offset(self, group: str, topic: str, queue_id: int,
                                     offset: int) -> None:
        header = UpdateConsumerOffsetRequestHeader(consumer_group=group, topic=topic,
                                                   queue_id=queue_id, commit_offset=offset)
        response = await self.invoke(RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields()))
        _check(response, f"update offset {group} {topic}:{queue_id}")

    async def max_offset(self, topic: str, queue_id: int) -> int:
        header = GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id)
        response = await self.invoke(RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                                             header.to_ext_fields()))
        return int(_check(response, f"max offset {topic}:{queue_id}").ext_fields["offset"])

    async def min_offset(self, topic: str, queue_id: int) -> int:
        header = GetMinOffsetRequestHeader(topic=topic, queue_id=queue_id)
        response = await self.invoke(RemotingCommand.request(RequestCode.GET_MIN_OFFSET,
                                                             header.to_ext_fields()))
        return int(_check(response, f"min offset {topic}:{queue_id}").ext_fields["offset"])

    async def search_offset(self, topic: str, queue_id: int, timestamp_ms: int, *,
                            upper: bool = False) -> int:
        header = SearchOffsetRequestHeader(
            topic=topic, queue_id=queue_id, timestamp=timestamp_ms,
            boundary_type=BoundaryType.UPPER if upper else BoundaryType.LOWER,
        )
        response = await self.invoke(RemotingCommand.request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header.to_ext_fields()))
        return int(_check(response, f"search offset {topic}:{queue_id}").ext_fields["offset"])

    async def send_back(self, group: str, record: MessageRecord, *, delay_level: int = 0,
                        max_reconsume_times: int | None = None) -> None:
        """CONSUMER_SEND_MSG_BACK: hand a message the consumer failed on back to the broker."""
        header = ConsumerSendMsgBackRequestHeader(
            offset=record.phy_offset, group=group, delay_level=delay_level,
            origin_msg_id=record.uniq_key, origin_topic=record.topic,
            max_reconsume_times=max_reconsume_times,
        )
        response = await self.invoke(RemotingCommand.request(
            RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields()))
        _check(response, f"send back to {group}")

    # -- admin -------------------------------------------------------------------------------

    async def create_topic(self, topic: str, *, read_queue_nums: int = 8,
                           write_queue_nums: int = 8, perm: int = PERM_READ | PERM_WRITE,
                           order: bool = False, topic_filter_type: str = "SINGLE_TAG") -> None:
        """UPDATE_AND_CREATE_TOPIC (what `mqadmin updateTopic` sends)."""
        header = CreateTopicRequestHeader(
            topic=topic, default_topic=DEFAULT_TOPIC, read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums, perm=perm, topic_filter_type=topic_filter_type,
            topic_sys_flag=0, order=order,
        )
        response = await self.invoke(RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields()))
        _check(response, f"create topic {topic}")

    async def topic_configs(self) -> TopicConfigAndMappingSerializeWrapper:
        response = await self.invoke(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        _check(response, "get all topic config")
        return TopicConfigAndMappingSerializeWrapper.decode(response.body)

    async def runtime_info(self) -> dict[str, str]:
        response = await self.invoke(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        _check(response, "runtime info")
        return dict(KVTable.decode(response.body).table)


class Producer:
    """Sends as one producer group through a `BrokerClient`."""

    def __init__(self, client: BrokerClient, group: str) -> None:
        self.client = client
        self.group = group

    async def send(self, message: Message, *, queue_id: int = -1) -> SendResult:
        return await self.client.send(message, producer_group=self.group, queue_id=queue_id)

    async def send_batch(self, messages: Sequence[Message], *, queue_id: int = -1) -> SendResult:
        return await self.client.send_batch(messages, producer_group=self.group,
                                            queue_id=queue_id)


class PullConsumer:
    """Pulls, commits and queries offsets as one consumer group through a `BrokerClient`."""

    def __init__(self, client: BrokerClient, group: str) -> None:
        self.client = client
        self.group = group

    async def subscribe(self, subscriptions: Mapping[str, str]) -> None:
        """Register with a heartbeat: {topic: TAG expression}."""
        await self.client.heartbeat(consumer_groups={self.group: subscriptions})

    async def pull(self, topic: str, queue_id: int, offset: int, *, max_nums: int = 32,
                   subscription: str = "*", suspend_timeout_ms: int | None = None,
                   commit_offset: int | None = None) -> PullResult:
        return await self.client.pull(
            self.group, topic, queue_id, offset, max_nums=max_nums, subscription=subscription,
            suspend_timeout_ms=suspend_timeout_ms, commit_offset=commit_offset,
        )

    async def commit(self, topic: str, queue_id: int, offset: int) -> None:
        await self.client.update_consumer_offset(self.group, topic, queue_id, offset)

    async def committed(self, topic: str, queue_id: int) -> int | None:
        return await self.client.query_consumer_offset(self.group, topic, queue_id)
