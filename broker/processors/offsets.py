"""Consumer offsets and queue offsets: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), SEARCH_OFFSET_BY_TIMESTAMP (29),
GET_EARLIEST_MSG_STORETIME (32) and VIEW_MESSAGE_BY_ID (33) (docs/remoting-protocol.md §6.5-§6.7).

QUERY_CONSUMER_OFFSET without a committed offset answers 0 with offset 0 when the queue still
starts at 0 and holds a message there (Java also asks whether that message is in page cache;
pyrmq's store is memory-mapped, so it counts as such), unless `setZeroIfNotFound` is false;
otherwise 22 QUERY_NOT_FOUND.
"""

from __future__ import annotations

from broker.consumer_offsets import ConsumerOffsetManager
from broker.subscription_groups import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.headers import (
    BoundaryType,
    CommandHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    refuse_lite_topic,
)
from store.errors import RecordCorruptError
from store.message_store import MessageStore


def _timestamp_fields(timestamp: int) -> dict[str, str]:
    return {"timestamp": str(timestamp)}


class OffsetProcessor:
    """Answers the offset codes from the store and the consumer-offset table."""

    def __init__(
        self,
        *,
        store: MessageStore,
        topic_configs: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        consumer_offsets: ConsumerOffsetManager,
    ) -> None:
        self._store = store
        self._topics = topic_configs
        self._groups = subscription_groups
        self._offsets = consumer_offsets

    async def query_consumer_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = QueryConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self._offsets.query_offset(header.consumer_group, header.topic, header.queue_id)
        if offset is not None and offset >= 0:
            return self._offset_response(request, QueryConsumerOffsetResponseHeader(offset))
        if header.set_zero_if_not_found is False:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                remark="Not found, do not set to zero, maybe this group boot first",
            )
        queue = self._store.queue(header.topic, header.queue_id)
        if queue is not None and queue.min_offset <= 0 < queue.max_offset:
            return self._offset_response(request, QueryConsumerOffsetResponseHeader(0))
        return request.make_response(
            ResponseCode.QUERY_NOT_FOUND,
            remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        )

    def _offset_response(self, request: RemotingCommand, header: CommandHeader
                         ) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, ext_fields=header.to_ext_fields())

    async def update_consumer_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        if header.consumer_group not in self._groups:
            return request.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                         remark=f"Group {header.consumer_group} not exist!")
        if header.topic not in self._topics:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                         remark=f"Topic {header.topic} not exist!")
        self._offsets.commit_offset(header.consumer_group, header.topic, header.queue_id,
                                    header.commit_offset)
        return request.make_response(ResponseCode.SUCCESS)

    async def get_max_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetMaxOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self._store.max_offset_in_queue(header.topic, header.queue_id)
        return self._offset_response(request, GetMaxOffsetResponseHeader(offset))

    async def get_min_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetMinOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self._store.min_offset_in_queue(header.topic, header.queue_id)
        return self._offset_response(request, GetMinOffsetResponseHeader(offset))

    async def search_offset_by_timestamp(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """LOWER (default): the first offset stored at or after `timestamp`; UPPER: the last
        offset stored at or before it (the queue's min offset if none is)."""
        header = SearchOffsetRequestHeader.from_ext_fields(request.ext_fields)
        refuse_lite_topic(header)
        if header.boundary_type is BoundaryType.UPPER:
            after = self._store.offset_by_time(header.topic, header.queue_id,
                                               header.timestamp + 1)
            minimum = self._store.min_offset_in_queue(header.topic, header.queue_id)
            offset = max(minimum, after - 1)
        else:
            offset = self._store.offset_by_time(header.topic, header.queue_id, header.timestamp)
        return self._offset_response(request, SearchOffsetResponseHeader(offset))

    async def get_earliest_msg_store_time(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetMinOffsetRequestHeader.from_ext_fields(request.ext_fields)
        queue = self._store.queue(header.topic, header.queue_id)
        timestamp = -1
        if queue is not None and queue.max_offset > queue.min_offset:
            phy, size, _ = queue.unit_at(queue.min_offset)
            try:
                timestamp = self._store.store_timestamp_at(phy, size)
            except IndexError:
                timestamp = -1
        return request.make_response(ResponseCode.SUCCESS,
                                     ext_fields=_timestamp_fields(timestamp))

    async def view_message_by_id(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """Body = the raw record at commitlog `offset`; 1 SYSTEM_ERROR when there is none."""
        text = request.ext_fields.get("offset")
        offset = _parse_offset(text)
        record = None
        if offset is not None:
            try:
                record = self._store.read_record_at(offset)
            except RecordCorruptError:
                record = None
        if record is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         remark=f"can not find message by the offset, {text}")
        return request.make_response(ResponseCode.SUCCESS, body=record)


def _parse_offset(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 <= value < 2**63 else None
