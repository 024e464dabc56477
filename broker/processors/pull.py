"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361, same request) with long polling
(docs/remoting-protocol.md §6.4).

Java's `PullMessageProcessor` and `DefaultPullMessageResultHandler`, for a master:
1. the group must exist or be auto-created (26), consume-enabled (16); the topic must exist (17)
   and be readable (16); the queue id within its read queues (29);
2. the filter comes from the request (SUBSCRIPTION flag) or from the group's heartbeat
   subscription (24 if none, 25 if older than the request's subVersion); only TAG expressions
   (SQL92 is refused with 1, as Java does without `enablePropertyFilter`);
3. the store reads at most min(maxMsgNums, maxTransferCountOnMessageInMemory) records and
   maxTransferBytesOnMessageInMemory bytes, skipping units whose tag hash does not match;
4. the store status becomes the response code (`pull_response_code`), the remark its name;
5. with COMMIT_OFFSET on a first attempt, `commitOffset` is stored as the group's offset;
6. PULL_NOT_FOUND with SUSPEND on a first attempt parks the request (`PullHold`) until a
   message arrives or `suspendTimeoutMillis` (long polling; else `shortPollingTimeMills`)
   passes; it is then executed once more without suspension and answered either way.
The body of a FOUND answer is the records exactly as stored, concatenated.
"""

from __future__ import annotations

import logging
from typing import Final

from broker.client_manager import ClientManager
from broker.config import BrokerConfig
from broker.consumer_offsets import ConsumerOffsetManager
from broker.metrics import BrokerMetrics
from broker.pull_hold import PullHold
from broker.subscription_groups import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager, is_readable
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    refuse_lite_topic,
)
from store.message_store import GetMessageResult, GetStatus, MessageStore
from store.tag_filter import (
    TagFilter,
    UnsupportedExpressionError,
    build_tag_filter,
    filter_of_subscription,
)

log = logging.getLogger(__name__)

FLAG_COMMIT_OFFSET: Final = 0x1
FLAG_SUSPEND: Final = 0x2
FLAG_SUBSCRIPTION: Final = 0x4
FLAG_CLASS_FILTER: Final = 0x8
FLAG_LITE_PULL: Final = 0x10
MASTER_ID: Final = 0
# A client can ask to be held for any time; a bound keeps parked requests from piling up.
SUSPEND_TIMEOUT_MAX_MS: Final = 60_000


def pull_response_code(status: GetStatus, *, request_offset: int) -> int:
    """`PullMessageProcessor.composeResponseHeader`: the response code of a store status."""
    match status:
        case GetStatus.FOUND:
            return ResponseCode.SUCCESS
        case GetStatus.NO_MATCHED_MESSAGE:
            return ResponseCode.PULL_RETRY_IMMEDIATELY
        case GetStatus.NO_MATCHED_LOGIC_QUEUE | GetStatus.NO_MESSAGE_IN_QUEUE:
            return ResponseCode.PULL_OFFSET_MOVED if request_offset != 0 else \
                ResponseCode.PULL_NOT_FOUND
        case GetStatus.OFFSET_OVERFLOW_ONE:
            return ResponseCode.PULL_NOT_FOUND
        case GetStatus.OFFSET_OVERFLOW_BADLY | GetStatus.OFFSET_TOO_SMALL:
            return ResponseCode.PULL_OFFSET_MOVED


_JAVA_FIELD_ORDER: Final = (
    "suggestWhichBrokerId", "groupSysFlag", "nextBeginOffset", "maxOffset", "minOffset",
    "topicSysFlag", "offsetDelta", "forbiddenType",
)


def pull_response_fields(header: PullMessageResponseHeader) -> dict[str, str]:
    """The pull answer's `extFields` in the order a Java broker writes them (its HashMap order
    for the first six, docs/remoting-protocol.md §15.3), so the header is byte-identical."""
    fields = header.to_ext_fields()
    return {key: fields[key] for key in _JAVA_FIELD_ORDER if key in fields}


class PullProcessor:
    """Serves pulls from the store, parking those that find nothing."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        store: MessageStore,
        topic_configs: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        consumer_offsets: ConsumerOffsetManager,
        clients: ClientManager,
        pull_hold: PullHold,
        metrics: BrokerMetrics,
    ) -> None:
        self._config = config
        self._store = store
        self._topics = topic_configs
        self._groups = subscription_groups
        self._offsets = consumer_offsets
        self._clients = clients
        self._pull_hold = pull_hold
        self._metrics = metrics

    async def pull_message(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """Answer PULL_MESSAGE, holding it first if it may be suspended and finds nothing."""
        header = PullMessageRequestHeader.from_ext_fields(request.ext_fields)
        refuse_lite_topic(header)
        response, tag_filter = await self._process(request, header, allow_suspend=True)
        if response is not None:
            return response
        assert tag_filter is not None
        timeout_ms = header.suspend_timeout_millis if self._config.long_polling_enable \
            else self._config.short_polling_time_ms
        timeout_ms = max(0, min(timeout_ms, SUSPEND_TIMEOUT_MAX_MS))
        await self._pull_hold.park(header.topic, header.queue_id, header.queue_offset,
                                   tag_filter, timeout_ms=timeout_ms)
        response, _ = await self._process(request, header, allow_suspend=False)
        assert response is not None
        return response

    async def _process(
        self, request: RemotingCommand, header: PullMessageRequestHeader, *, allow_suspend: bool
    ) -> tuple[RemotingCommand | None, TagFilter | None]:
        """(response, None), or (None, filter) when the pull is to be parked."""
        if not is_readable(self._config.broker_permission):
            return self._error(request, ResponseCode.NO_PERMISSION,
                               f"the broker[{self._config.broker_ip1}] pulling message is "
                               "forbidden"), None
        group_config = await self._groups.find_or_create(header.consumer_group)
        if group_config is None:
            return self._error(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                               f"subscription group [{header.consumer_group}] does not "
                               "exist"), None
        if not group_config.consume_enable:
            return self._error(request, ResponseCode.NO_PERMISSION,
                               f"subscription group no permission, {header.consumer_group}"), None
        topic_config = self._topics.select(header.topic)
        if topic_config is None:
            return self._error(request, ResponseCode.TOPIC_NOT_EXIST,
                               f"topic[{header.topic}] not exist, apply first please!"), None
        if not is_readable(topic_config.perm):
            return self._error(request, ResponseCode.NO_PERMISSION,
                               f"the topic[{header.topic}] pulling message is forbidden"), None
        if not 0 <= header.queue_id < topic_config.read_queue_nums:
            return self._error(
                request, ResponseCode.INVALID_PARAMETER,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}]",
            ), None
        filter_or_error = self._tag_filter(request, header)
        if isinstance(filter_or_error, RemotingCommand):
            return filter_or_error, None
        tag_filter = filter_or_error
        result = self._store.get_messages(
            header.topic, header.queue_id, header.queue_offset,
            max_count=max(1, min(header.max_msg_nums,
                                 self._config.max_transfer_count_on_message_in_memory)),
            max_bytes=self._config.max_transfer_bytes_on_message_in_memory,
            tags_codes=tag_filter.codes,
        )
        code = pull_response_code(result.status, request_offset=header.queue_offset)
        # tryCommitOffset: only on a first attempt, and before any suspension.
        if allow_suspend and header.sys_flag & FLAG_COMMIT_OFFSET:
            self._offsets.commit_offset(header.consumer_group, header.topic, header.queue_id,
                                        header.commit_offset)
        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and \
                header.sys_flag & FLAG_SUSPEND:
            return None, tag_filter
        if code == ResponseCode.PULL_OFFSET_MOVED:
            log.info("pull offset moved topic=%s queue_id=%d group=%s request_offset=%d "
                     "new_offset=%d", header.topic, header.queue_id, header.consumer_group,
                     header.queue_offset, result.next_begin_offset)
        return self._answer(request, header, result, code, topic_config.topic_sys_flag,
                            group_config.group_sys_flag), None

    def _tag_filter(
        self, request: RemotingCommand, header: PullMessageRequestHeader
    ) -> TagFilter | RemotingCommand:
        try:
            if header.sys_flag & FLAG_SUBSCRIPTION:
                return build_tag_filter(header.subscription, header.expression_type)
            group = self._clients.consumer_group(header.consumer_group)
            if group is None:
                return self._error(request, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                   "the consumer's group info not exist")
            subscription = group.subscriptions.get(header.topic)
            if subscription is None:
                return self._error(request, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                   "the consumer's subscription not exist")
            if subscription.sub_version < header.sub_version:
                return self._error(request, ResponseCode.SUBSCRIPTION_NOT_LATEST,
                                   "the consumer's subscription not latest")
            return filter_of_subscription(subscription.sub_string,
                                          subscription.expression_type,
                                          subscription.code_set)
        except UnsupportedExpressionError as err:
            return self._error(request, ResponseCode.SYSTEM_ERROR, str(err))

    def _error(self, request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        return request.make_response(code, remark=remark)

    def _answer(
        self, request: RemotingCommand, header: PullMessageRequestHeader,
        result: GetMessageResult, code: int, topic_sys_flag: int, group_sys_flag: int,
    ) -> RemotingCommand:
        response_header = PullMessageResponseHeader(
            suggest_which_broker_id=MASTER_ID,
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
            topic_sys_flag=topic_sys_flag,
            group_sys_flag=group_sys_flag,
        )
        body = b""
        if code == ResponseCode.SUCCESS:
            body = result.body
            self._metrics.message_out(
                header.topic, header.consumer_group, count=len(result.sizes),
                bytes_out=len(body), is_system=self._topics.is_system_topic(header.topic),
            )
        return request.make_response(code, remark=result.status.value,
                                     ext_fields=pull_response_fields(response_header), body=body)
