"""Sends: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36) (docs/remoting-protocol.md §6.1-§6.3, §6.11).

Checks come in Java's order (`AbstractSendMessageProcessor.msgCheck`, `SendMessageProcessor`),
with one deliberate difference: the message's own limits (topic length for the store, body size,
properties size) are checked *before* an unknown topic is auto-created, so a refused message
changes nothing at all (docs/reliability.md P5). The codes:
- 14 SERVICE_NOT_AVAILABLE: the store does not take writes (fenced, disk full, closed), or a
  controller-mode master's lease ran out (docs/reliability.md M17);
- 16 NO_PERMISSION: a topic clients may not send to, an order topic on a non-writable broker,
  a transactional message (pyrmq has no transactions);
- 29 INVALID_PARAMETER: a topic name `TopicValidator` refuses (characters, > 127 or > 255 for
  retry/DLQ topics), a queue id beyond the topic's queues;
- 13 MESSAGE_ILLEGAL: the store's limits (a DLQ topic over 127 chars, body over
  `maxMessageSize`, properties over 32767 bytes with the CRC reservation), a malformed batch,
  a batch to a retry topic or with a transactional/delay flag;
- 17 TOPIC_NOT_EXIST: unknown topic and no auto-creation; 26 for a retry topic of an unknown group.
- 1 SYSTEM_ERROR "in-sync replicas not enough": a replicated master below `minInSyncReplicas`
  (checked before the append);
- 12 FLUSH_SLAVE_TIMEOUT: stored, but the replicas the send waits for (the whole SyncStateSet
  with `allAckInSyncStateSet`, else `inSyncReplicas`) did not ack within `slaveTimeout`.
Every non-success code except 10 and 12 means nothing was appended (docs/reliability.md M2), with
one exception: SYSTEM_ERROR "appended, but it will not be served" (`DispatchError`), a record whose
consume-queue unit its queue refused (store/dispatch.py); it is in the commitlog, never served.

A message with a positive `DELAY` property is stored in `SCHEDULE_TOPIC_XXXX` (queue level - 1,
real topic and queue in `REAL_TOPIC`/`REAL_QID`, store/schedule.py); the schedule service
(broker/schedule_message_service.py) delivers it to its real topic when due. The answer names
the real queue id and the schedule queue's offset, as Java's does.

Send-back (a consumer hands a failed message back) re-stores the message in `%RETRY%<group>`
with `RETRY_TOPIC`, `ORIGIN_MESSAGE_ID` and reconsumeTimes + 1, delayed by the request's
delayLevel, or by level 3 + reconsumeTimes when it is 0; or in `%DLQ%<group>` (undelayed) once
reconsumeTimes reaches the group's maximum (16) or for delayLevel < 0.
"""

from __future__ import annotations

import functools
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol

from broker.config import BrokerConfig
from broker.metrics import BrokerMetrics
from broker.pull_hold import PullHold
from broker.subscription_groups import SubscriptionGroupManager
from broker.topic_config import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfigManager,
    dlq_topic,
    is_writeable,
    retry_topic,
    validate_topic,
)
from remoting.bodies import PERM_READ, PERM_WRITE, TopicConfig, TopicFilterType
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from store.errors import (
    DiskFullError,
    MessageIllegalError,
    RecordCorruptError,
    StoreError,
    WriteRefusedError,
)
from store.host_port import HostPort, offset_msg_id, offset_msg_ids
from store.message_batch import batch_body_is_plain, decode_batch_body, prepare_batch_body
from store.message_decoder import decode_record
from store.message_encoder import EncodedMessage, prepare_message
from store.message_properties import (
    MAX_PROPERTIES_BYTES,
    PROPERTY_CRC_RESERVED_BYTES,
    PROPERTY_UNIQ_KEY,
    encode_properties,
    parse_properties,
)
from store.message_store import AppendResult, MessageStore, PutResult, PutStatus
from store.message_sys_flag import SysFlag
from store.record_layout import RETRY_TOPIC_CHARS_MAX, TOPIC_CHARS_MAX, MessageRecord
from store.schedule import (
    parse_message_delay_level,
    time_up_message,
    transform_delay_level_message,
)
from store.transaction_type import batch_transaction_error
from store.uniq_id import UniqIdGenerator

log = logging.getLogger(__name__)

PROPERTY_CLUSTER: Final = "CLUSTER"
PROPERTY_POP_CK: Final = "POP_CK"
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
PROPERTY_DELAY_TIME_LEVEL: Final = "DELAY"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_MSG_REGION: Final = "MSG_REGION"
PROPERTY_TRACE_SWITCH: Final = "TRACE_ON"
PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"
_DELAY_PROPERTIES: Final = ("__STARTDELIVERTIME", PROPERTY_DELAY_TIME_LEVEL, "TIMER_DELIVER_MS",
                            "TIMER_DELAY_SEC", "TIMER_DELAY_MS")
DLQ_NUMS_PER_GROUP: Final = 1
VERSION_V3_4_9: Final = 121  # MQVersion.Version.V3_4_9.ordinal(): maxReconsumeTimes honoured
_UNKNOWN_HOST: Final = HostPort(bytes(4), 0)


def born_host_of(connection: RemotingConnection) -> HostPort:
    """The producer's address as BORNHOST (the connection's peer)."""
    return _born_host_of_peer(connection.peer)


@functools.lru_cache(maxsize=4096)
def _born_host_of_peer(peer: str) -> HostPort:
    # Parsed once per peer, not once per send (it showed in profiles of single sends).
    try:
        return HostPort.from_str(peer)
    except ValueError:
        return _UNKNOWN_HOST


def message_limits_error(
    topic: str, *, body_bytes: int, properties: bytes, max_message_size: int,
    append_prop_crc: bool,
) -> str | None:
    """The store's limits on one message, checked early (before any topic is created); None
    if they hold. `prepare_message` checks them again and stays the authority (it may still
    refuse what this accepts, never the other way round)."""
    limit = RETRY_TOPIC_CHARS_MAX if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) \
        else TOPIC_CHARS_MAX
    if len(topic) > limit:
        return f"topic {topic[:60]!r}...: {len(topic)} chars exceeds the limit of {limit}"
    if body_bytes > max_message_size:
        return f"topic {topic}: body_size={body_bytes} exceeds max_message_size={max_message_size}"
    reserved = 0
    if append_prop_crc:
        # The __CRC32# reservation, and the 0x02 the store adds to an unterminated string.
        reserved = PROPERTY_CRC_RESERVED_BYTES + (1 if properties and properties[-1] != 2 else 0)
    if len(properties) + reserved > MAX_PROPERTIES_BYTES:
        return (
            f"topic {topic}: properties_size={len(properties)} (+{reserved} reserved) exceeds "
            f"the limit of {MAX_PROPERTIES_BYTES}"
        )
    return None


def send_response_fields(
    *, queue_id: int, transaction_id: str | None, msg_id: str, trace_on: bool, region_id: str,
    queue_offset: int,
) -> dict[str, str]:
    """A stored send's `extFields`, in the order a Java broker writes them (its HashMap
    order, docs/remoting-protocol.md §15.2), so the header is byte-identical."""
    fields = {"queueId": str(queue_id)}
    if transaction_id is not None:
        fields["transactionId"] = transaction_id
    fields["msgId"] = msg_id
    fields[PROPERTY_TRACE_SWITCH] = "true" if trace_on else "false"
    fields[PROPERTY_MSG_REGION] = region_id
    fields["queueOffset"] = str(queue_offset)
    return fields


def message_type_of(properties: Mapping[str, str]) -> str:
    """`BrokerMetricsManager.getMessageType`: the `message_type` label of a send."""
    if _true(properties.get(PROPERTY_TRANSACTION_PREPARED)):
        return "transaction"
    if PROPERTY_SHARDING_KEY in properties:
        return "fifo"
    if any(properties.get(key) is not None for key in _DELAY_PROPERTIES):
        return "delay"
    return "normal"


def _true(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


PROPERTY_WAIT: Final = "WAIT"


class Replication(Protocol):
    """What sends need from the HA service (ha/service.py) on a master."""

    def in_sync_replicas_enough(self) -> bool: ...

    async def wait_for_replicas(self, end_offset: int) -> bool: ...


def _waits_for_replicas(wait: str | None) -> bool:
    """Java waits unless the WAIT property is present and not "true" (ignoring case)."""
    return wait is None or wait.lower() == "true"


class SendProcessor:
    """Stores sent messages. `store_host` is this broker's `brokerIP1:listenPort` (STOREHOST
    of every record and the host part of every msgId)."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        store: MessageStore,
        topic_configs: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        pull_hold: PullHold,
        metrics: BrokerMetrics,
        uniq_ids: UniqIdGenerator,
        store_host: HostPort,
        replication: Replication | None = None,
        write_refusal: Callable[[], str | None] | None = None,
    ) -> None:
        self._config = config
        self._write_refusal = write_refusal
        self._replication = replication
        self._store = store
        self._topics = topic_configs
        self._groups = subscription_groups
        self._pull_hold = pull_hold
        self._metrics = metrics
        self._uniq_ids = uniq_ids
        self.store_host = store_host
        self.max_delay_level = len(parse_message_delay_level(config.store.message_delay_level))

    # -- responses -------------------------------------------------------------------------

    def _trailer(self) -> dict[str, str]:
        return {
            PROPERTY_TRACE_SWITCH: "true" if self._config.trace_on else "false",
            PROPERTY_MSG_REGION: self._config.region_id,
        }

    def _refuse(self, request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        return request.make_response(code, remark=remark, ext_fields=self._trailer())

    def _stored(
        self, request: RemotingCommand, code: int, *, msg_id: str, queue_id: int,
        queue_offset: int, transaction_id: str | None,
    ) -> RemotingCommand:
        return request.make_response(code, ext_fields=send_response_fields(
            queue_id=queue_id, transaction_id=transaction_id, msg_id=msg_id,
            trace_on=self._config.trace_on, region_id=self._config.region_id,
            queue_offset=queue_offset,
        ))

    def _put_code(self, result: PutResult) -> int:
        if result.status is PutStatus.FLUSH_DISK_TIMEOUT:
            return ResponseCode.FLUSH_DISK_TIMEOUT
        return ResponseCode.SUCCESS

    def _in_sync_replicas_refusal(self, request: RemotingCommand, wait: str | None
                                  ) -> RemotingCommand | None:
        """`minInSyncReplicas`, checked before the append (a definite refusal, §11 step 2)."""
        replication = self._replication
        if replication is None or not _waits_for_replicas(wait):
            return None
        if replication.in_sync_replicas_enough():
            return None
        return self._refuse(request, ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough")

    async def _replicated_code(self, result: PutResult, wait: str | None) -> int:
        """SUCCESS only once the replicas acked (allAckInSyncStateSet / inSyncReplicas); a
        timeout is FLUSH_SLAVE_TIMEOUT, which wins over FLUSH_DISK_TIMEOUT (§11 step 5)."""
        replication = self._replication
        if replication is not None and _waits_for_replicas(wait) and \
                not await replication.wait_for_replicas(result.append.end_offset):
            return ResponseCode.FLUSH_SLAVE_TIMEOUT
        return self._put_code(result)

    def _store_refusal(self, request: RemotingCommand, err: StoreError) -> RemotingCommand:
        if isinstance(err, MessageIllegalError):
            return self._refuse(request, ResponseCode.MESSAGE_ILLEGAL, str(err))
        if isinstance(err, WriteRefusedError | DiskFullError):
            return self._refuse(
                request, ResponseCode.SERVICE_NOT_AVAILABLE,
                f"service not available now: {err}",
            )
        log.error("append failed error=%s", err)
        return self._refuse(request, ResponseCode.SYSTEM_ERROR, f"append failed: {err}")

    def _not_writable(self) -> str | None:
        if self._store.fenced:
            return "service not available now: the store is fenced (no role that takes writes)"
        if self._store.disk_full:
            return "service not available now: the broker's disk is full"
        if self._write_refusal is not None:
            return self._write_refusal()  # the master lease (docs/reliability.md M17)
        return None

    # -- the common checks (msgCheck) ------------------------------------------------------

    def _check_topic(self, request: RemotingCommand, topic: str) -> RemotingCommand | None:
        if not is_writeable(self._config.broker_permission) and self._topics.is_order_topic(topic):
            return self._refuse(request, ResponseCode.NO_PERMISSION,
                                f"the broker[{self._config.broker_ip1}] sending message is "
                                "forbidden")
        invalid = validate_topic(topic)
        if invalid is not None:
            return self._refuse(request, ResponseCode.INVALID_PARAMETER, invalid)
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return self._refuse(request, ResponseCode.NO_PERMISSION,
                                f"Sending message to topic[{topic}] is forbidden.")
        return None

    async def _topic_config(
        self, request: RemotingCommand, header: SendMessageRequestHeader
    ) -> TopicConfig | RemotingCommand:
        topic = header.topic
        topic_sys_flag = 0
        if header.unit_mode:
            topic_sys_flag = 0x2 if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else 0x1
        found = await self._topics.create_in_send_message(
            topic, header.default_topic, client_queue_nums=header.default_topic_queue_nums,
            topic_sys_flag=topic_sys_flag,
        )
        if found is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            found = await self._topics.create_in_send_back(
                topic, queue_nums=1, perm=PERM_READ | PERM_WRITE, topic_sys_flag=topic_sys_flag
            )
        if found is None:
            return self._refuse(request, ResponseCode.TOPIC_NOT_EXIST,
                                f"topic[{topic}] not exist, apply first please!")
        if header.queue_id >= max(found.write_queue_nums, found.read_queue_nums):
            return self._refuse(
                request, ResponseCode.INVALID_PARAMETER,
                f"request queueId[{header.queue_id}] is illegal, topic {topic} has "
                f"{found.write_queue_nums} write / {found.read_queue_nums} read queues",
            )
        return found

    # -- SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE -----------------------------------

    async def send_message(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """Answer 10, 310 or 320 (a batch is recognised by `batch == true`, as in Java)."""
        if request.code == RequestCode.SEND_MESSAGE:
            header = SendMessageRequestHeader.from_ext_fields(request.ext_fields)
        else:
            header = SendMessageRequestHeader.from_ext_fields_v2(request.ext_fields)
        now_ms = time.time_ns() // 1_000_000
        if now_ms < self._config.start_accept_send_request_timestamp_ms:
            return self._refuse(request, ResponseCode.SYSTEM_ERROR,
                                "broker unable to service, until "
                                f"{self._config.start_accept_send_request_timestamp_ms}")
        unavailable = self._not_writable()
        if unavailable is not None:
            return self._refuse(request, ResponseCode.SERVICE_NOT_AVAILABLE, unavailable)
        refused = self._check_topic(request, header.topic)
        if refused is not None:
            return refused
        if header.batch:
            return await self._send_batch(connection, request, header)
        return await self._send_one(connection, request, header)

    async def _send_one(
        self, connection: RemotingConnection, request: RemotingCommand,
        header: SendMessageRequestHeader,
    ) -> RemotingCommand:
        properties = parse_properties((header.properties or "").encode())
        message_type = message_type_of(properties)
        properties.pop(PROPERTY_POP_CK, None)
        if _true(properties.get(PROPERTY_TRANSACTION_PREPARED)):
            return self._refuse(request, ResponseCode.NO_PERMISSION,
                                f"the broker[{self._config.broker_ip1}] sending transaction "
                                "message is forbidden (pyrmq has no transactions)")
        transaction_id = properties.get(PROPERTY_UNIQ_KEY)
        if not transaction_id:
            transaction_id = self._uniq_ids.next_id()
            properties[PROPERTY_UNIQ_KEY] = transaction_id
        properties[PROPERTY_CLUSTER] = self._config.broker_cluster_name
        topic = header.topic
        refused = self._check_limits(request, topic, properties)
        if refused is not None:
            return refused
        queue_id = header.queue_id
        reconsume_times = header.reconsume_times or 0
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = topic.removeprefix(RETRY_GROUP_TOPIC_PREFIX)
            group_config = await self._groups.find_or_create(group)
            if group_config is None:
                return self._refuse(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                    f"subscription group not exist, {group}")
            max_reconsume_times = group_config.retry_max_times
            if request.version >= VERSION_V3_4_9 and header.max_reconsume_times is not None:
                max_reconsume_times = header.max_reconsume_times
            if reconsume_times > max_reconsume_times:
                properties[PROPERTY_DELAY_TIME_LEVEL] = "-1"
                topic = dlq_topic(group)
                refused = self._check_limits(request, topic, properties)
                if refused is not None:
                    return refused
                queue_id = secrets.randbelow(DLQ_NUMS_PER_GROUP)
                self._metrics.send_to_dlq(header.topic, group, is_system=False)
        if topic != header.topic:
            topic_config = await self._topics.create_in_send_back(
                topic, queue_nums=DLQ_NUMS_PER_GROUP, perm=PERM_READ | PERM_WRITE,
                topic_sys_flag=0,
            )
        else:
            found = await self._topic_config(request, header)
            if isinstance(found, RemotingCommand):
                return found
            topic_config = found
            if queue_id < 0:
                queue_id = secrets.randbelow(max(1, topic_config.write_queue_nums))
        sys_flag = header.sys_flag
        if topic_config.topic_filter_type is TopicFilterType.MULTI_TAG:
            sys_flag |= SysFlag.MULTI_TAGS_FLAG
        real_queue_id = queue_id
        try:
            topic, queue_id = transform_delay_level_message(
                topic, queue_id, properties, sys_flag=sys_flag,
                max_delay_level=self.max_delay_level,
            )
        except ValueError as err:
            return self._refuse(request, ResponseCode.SYSTEM_ERROR, str(err))
        refused = self._in_sync_replicas_refusal(request, properties.get(PROPERTY_WAIT))
        if refused is not None:
            return refused
        try:
            # The store's own limits (`config.store`, the same as self._config.store); the
            # common message is encoded and appended in one C call.
            result = await self._store.put_message_fields(
                topic=topic, queue_id=queue_id, flag=header.flag, body=request.body,
                properties=encode_properties(properties), sys_flag=sys_flag,
                born_timestamp=header.born_timestamp, born_host=born_host_of(connection),
                store_host=self.store_host, reconsume_times=reconsume_times,
            )
        except StoreError as err:
            return self._store_refusal(request, err)
        code = await self._replicated_code(result, properties.get(PROPERTY_WAIT))
        self._after_append(topic, queue_id, result.append, result.append.tags_code,
                           message_type)
        return self._stored(
            request, code,
            msg_id=offset_msg_id(self.store_host, result.append.phy_offset),
            queue_id=real_queue_id,
            queue_offset=result.append.queue_offset, transaction_id=transaction_id,
        )

    def _check_limits(self, request: RemotingCommand, topic: str,
                      properties: dict[str, str]) -> RemotingCommand | None:
        """The store's limits (module docstring), before anything is created: 13 or None."""
        try:
            properties_raw = encode_properties(properties)
        except MessageIllegalError as err:
            return self._refuse(request, ResponseCode.MESSAGE_ILLEGAL, str(err))
        illegal = message_limits_error(
            topic, body_bytes=len(request.body), properties=properties_raw,
            max_message_size=self._config.store.max_message_size,
            append_prop_crc=self._config.store.enabled_append_prop_crc,
        )
        if illegal is not None:
            return self._refuse(request, ResponseCode.MESSAGE_ILLEGAL, illegal)
        return None

    async def _send_batch(
        self, connection: RemotingConnection, request: RemotingCommand,
        header: SendMessageRequestHeader,
    ) -> RemotingCommand:
        topic = header.topic
        if len(topic) > TOPIC_CHARS_MAX:
            return self._refuse(request, ResponseCode.MESSAGE_ILLEGAL,
                                f"message topic length too long {len(topic)}")
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self._refuse(request, ResponseCode.MESSAGE_ILLEGAL,
                                f"batch request does not support retry group {topic}")
        batch_properties = parse_properties((header.properties or "").encode())
        if _true(batch_properties.get(PROPERTY_TRANSACTION_PREPARED)):
            return self._refuse(request, ResponseCode.MESSAGE_ILLEGAL,
                                "batch message does not support transaction")
        transaction_refusal = batch_transaction_error(header.sys_flag)
        if transaction_refusal is not None:  # the store refuses it too; refused before creating
            return self._refuse(request, ResponseCode.MESSAGE_ILLEGAL, transaction_refusal)
        delay = batch_properties.get(PROPERTY_DELAY_TIME_LEVEL)
        if delay is not None and delay.strip() not in ("", "0"):
            return self._refuse(request, ResponseCode.MESSAGE_ILLEGAL,
                                "batch message does not support delay level")
        if len(request.body) > self._config.store.max_message_size:
            return self._refuse(
                request, ResponseCode.MESSAGE_ILLEGAL,
                f"topic {topic}: batch body_size={len(request.body)} exceeds max_message_size="
                f"{self._config.store.max_message_size}",
            )
        illegal = self._batch_body_error(topic, request.body)
        if illegal is not None:
            return self._refuse(request, ResponseCode.MESSAGE_ILLEGAL, illegal)
        found = await self._topic_config(request, header)
        if isinstance(found, RemotingCommand):
            return found
        queue_id = header.queue_id
        if queue_id < 0:
            queue_id = secrets.randbelow(max(1, found.write_queue_nums))
        sys_flag = header.sys_flag
        if found.topic_filter_type is TopicFilterType.MULTI_TAG:
            sys_flag |= SysFlag.MULTI_TAGS_FLAG
        refused = self._in_sync_replicas_refusal(request, batch_properties.get(PROPERTY_WAIT))
        if refused is not None:
            return refused
        try:
            batch = prepare_batch_body(
                topic=topic, queue_id=queue_id, body=request.body, sys_flag=sys_flag,
                born_timestamp=header.born_timestamp, born_host=born_host_of(connection),
                store_host=self.store_host, reconsume_times=header.reconsume_times or 0,
                append_prop_crc=self._config.store.enabled_append_prop_crc,
                max_message_size=self._config.store.max_message_size,
            )
            result = await self._store.put_batch(batch)
        except StoreError as err:
            return self._store_refusal(request, err)
        code = await self._replicated_code(result, batch_properties.get(PROPERTY_WAIT))
        self._after_append(topic, queue_id, result.append, None,
                           message_type_of(batch_properties))
        phy = result.append.phy_offset
        msg_id = offset_msg_ids(self.store_host, [phy + start for start in batch.bounds[:-1]])
        return self._stored(
            request, code, msg_id=msg_id, queue_id=queue_id,
            queue_offset=result.append.queue_offset,
            transaction_id=batch_properties.get(PROPERTY_UNIQ_KEY),
        )

    def _batch_body_error(self, topic: str, body: bytes) -> str | None:
        """Why a SEND_BATCH_MESSAGE body is refused before its topic is looked up (or created),
        None if it is not. The common body is checked in C in one walk."""
        append_prop_crc = self._config.store.enabled_append_prop_crc
        if batch_body_is_plain(body, append_prop_crc):
            return None
        try:
            inner = decode_batch_body(body)
        except MessageIllegalError as err:
            return str(err)
        if not inner:
            return f"topic {topic}: batch has no messages"
        for index, (_, _, raw_properties) in enumerate(inner):
            illegal = message_limits_error(
                topic, body_bytes=0, properties=raw_properties,
                max_message_size=self._config.store.max_message_size,
                append_prop_crc=append_prop_crc,
            )
            if illegal is not None:
                return f"batch message {index}: {illegal}"
        return None

    def _after_append(self, topic: str, queue_id: int, append: AppendResult,
                      tags_code: int | None, message_type: str) -> None:
        self._pull_hold.notify_message_arriving(
            topic, queue_id, self._store.max_offset_in_queue(topic, queue_id), tags_code
        )
        self._metrics.message_in(
            topic, count=append.msg_count, stored_bytes=append.wrote_bytes,
            message_type=message_type, is_system=self._topics.is_system_topic(topic),
        )

    # -- delivery of due scheduled messages ------------------------------------------------

    async def put_time_up(self, records: Sequence[MessageRecord]) -> int:
        """Put due `SCHEDULE_TOPIC_XXXX` messages under their real topics and queues, in order
        (Java's `messageTimeUp`, store/schedule.py `time_up_message`), in one store call.
        Returns how many of `records` were taken (a prefix): put, or logged and dropped when
        one has no real destination or cannot be encoded. Fewer than all: the store refused
        the next one (try it again later)."""
        append_prop_crc = self._config.store.enabled_append_prop_crc
        max_message_size = self._config.store.max_message_size
        msgs: list[EncodedMessage] = []
        record_index: list[int] = []  # msgs[i] is the message of records[record_index[i]]
        for index, record in enumerate(records):
            try:
                msgs.append(time_up_message(record, append_prop_crc=append_prop_crc,
                                            max_message_size=max_message_size))
                record_index.append(index)
            except (ValueError, MessageIllegalError):
                log.exception("scheduled message dropped phy_offset=%d", record.phy_offset)
        result = await self._store.put_messages(msgs)
        for msg, append in zip(msgs, result.appended, strict=False):
            self._pull_hold.notify_message_arriving(
                msg.topic, msg.queue_id, append.queue_offset + append.msg_count, msg.tags_code
            )
        self._count_time_up(msgs, result.appended)
        if result.refused is None:
            return len(records)
        log.warning("scheduled message not delivered yet topic=%s error=%s",
                    msgs[len(result.appended)].topic, result.refused)
        return record_index[len(result.appended)]

    def _count_time_up(self, msgs: Sequence[EncodedMessage],
                       appended: Sequence[AppendResult]) -> None:
        """The metrics of the re-puts: one `message_in` per topic of the batch."""
        by_topic: dict[str, tuple[int, int]] = {}
        for msg, append in zip(msgs, appended, strict=False):
            count, stored_bytes = by_topic.get(msg.topic, (0, 0))
            by_topic[msg.topic] = (count + 1, stored_bytes + append.wrote_bytes)
        for topic, (count, stored_bytes) in by_topic.items():
            self._metrics.message_in(
                topic, count=count, stored_bytes=stored_bytes, message_type="normal",
                is_system=self._topics.is_system_topic(topic),
            )

    # -- CONSUMER_SEND_MSG_BACK -------------------------------------------------------------

    def look_message_by_offset(self, phy_offset: int) -> MessageRecord | None:
        """The verified record at commitlog `phy_offset`, or None if there is none."""
        try:
            raw = self._store.read_record_at(phy_offset)
            return decode_record(raw) if raw is not None else None
        except (RecordCorruptError, ValueError) as err:
            log.warning("no message at phy_offset=%d error=%s", phy_offset, err)
            return None

    async def consumer_send_msg_back(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """Answer 36: re-store a message the consumer failed to process (module docstring)."""
        header = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        group_config = await self._groups.find_or_create(header.group)
        if group_config is None:
            return request.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                         remark=f"subscription group not exist, {header.group}")
        if not is_writeable(self._config.broker_permission):
            return request.make_response(ResponseCode.NO_PERMISSION,
                                         remark=f"the broker[{self._config.broker_ip1}] "
                                         "sending message is forbidden")
        if group_config.retry_queue_nums <= 0:
            return request.make_response(ResponseCode.SUCCESS)
        unavailable = self._not_writable()
        if unavailable is not None:
            return request.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, remark=unavailable)
        topic = retry_topic(header.group)
        queue_id = secrets.randbelow(group_config.retry_queue_nums)
        topic_sys_flag = 0x2 if header.unit_mode else 0
        topic_config = await self._topics.create_in_send_back(
            topic, queue_nums=group_config.retry_queue_nums, perm=PERM_READ | PERM_WRITE,
            topic_sys_flag=topic_sys_flag,
        )
        if not is_writeable(topic_config.perm):
            return request.make_response(ResponseCode.NO_PERMISSION,
                                         remark=f"the topic[{topic}] sending message is forbidden")
        original = self.look_message_by_offset(header.offset)
        if original is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         remark=f"look message by offset failed, {header.offset}")
        properties = original.properties_map()
        properties.setdefault(PROPERTY_RETRY_TOPIC, original.topic)
        max_reconsume_times = group_config.retry_max_times
        if request.version >= VERSION_V3_4_9 and header.max_reconsume_times is not None:
            max_reconsume_times = header.max_reconsume_times
        if original.reconsume_times >= max_reconsume_times or header.delay_level < 0:
            topic = dlq_topic(header.group)
            queue_id = secrets.randbelow(DLQ_NUMS_PER_GROUP)
            await self._topics.create_in_send_back(
                topic, queue_nums=DLQ_NUMS_PER_GROUP, perm=PERM_READ | PERM_WRITE,
                topic_sys_flag=0,
            )
            self._metrics.send_to_dlq(header.origin_topic or original.topic, header.group,
                                      is_system=False)
        else:
            # Delayed by the schedule service: level 3 + reconsumeTimes unless the consumer
            # asked for a level (Java's consumerSendMsgBack).
            delay_level = header.delay_level or 3 + original.reconsume_times
            properties[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
            topic, queue_id = transform_delay_level_message(
                topic, queue_id, properties, sys_flag=original.sys_flag,
                max_delay_level=self.max_delay_level,
            )
        if not properties.get(PROPERTY_ORIGIN_MESSAGE_ID):
            properties[PROPERTY_ORIGIN_MESSAGE_ID] = offset_msg_id(original.store_host,
                                                                   original.phy_offset)
        try:
            msg = prepare_message(
                topic=topic, queue_id=queue_id, flag=original.flag, body=original.body,
                properties=encode_properties(properties), sys_flag=original.sys_flag,
                born_timestamp=original.born_timestamp, born_host=original.born_host,
                store_host=self.store_host, reconsume_times=original.reconsume_times + 1,
                append_prop_crc=self._config.store.enabled_append_prop_crc,
                max_message_size=self._config.store.max_message_size,
            )
            result = await self._store.put_message(msg)
        except StoreError as err:
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark=str(err))
        self._after_append(topic, queue_id, result.append, msg.tags_code, "normal")
        log.debug("sent back message group=%s topic=%s reconsume_times=%d", header.group, topic,
                  original.reconsume_times + 1)
        return request.make_response(ResponseCode.SUCCESS)
