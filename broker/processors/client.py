"""Client registration: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38)
(docs/remoting-protocol.md §6.8-§6.10).

A heartbeat registers the connection for each of its producer and consumer groups; for each
consumer group it also creates (if absent) the subscription group and the retry topic
`%RETRY%<group>`, as Java's `ClientManageProcessor` does. pyrmq does not implement heartbeat V2,
so its answer carries no `IS_SUPPORT_HEART_BEAT_V2` (clients then keep sending full heartbeats);
a `withoutSub` heartbeat still keeps the subscriptions the broker has.
"""

from __future__ import annotations

import logging

from broker.client_manager import ClientManager
from broker.subscription_groups import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager, retry_topic
from remoting.bodies import PERM_READ, PERM_WRITE, ConsumerListBody, HeartbeatData
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.headers import GetConsumerListByGroupRequestHeader, UnregisterClientRequestHeader

log = logging.getLogger(__name__)


class ClientProcessor:
    """Heartbeats, unregistration and consumer lists."""

    def __init__(
        self,
        *,
        clients: ClientManager,
        topic_configs: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
    ) -> None:
        self._clients = clients
        self._topics = topic_configs
        self._groups = subscription_groups

    async def heart_beat(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        data = HeartbeatData.decode(request.body)
        info = self._clients.channel_info(connection, data.client_id, request.language,
                                          request.version)
        for consumer in data.consumer_data_set:
            group_config = await self._groups.find_or_create(consumer.group_name)
            if group_config is None:
                log.warning("heartbeat for an unknown group that cannot be created group=%s "
                            "client_id=%s", consumer.group_name, data.client_id)
                continue
            has_order_topic = any(
                self._topics.is_order_topic(sub.topic) for sub in consumer.subscription_data_set
            )
            await self._topics.create_in_send_back(
                retry_topic(consumer.group_name), queue_nums=group_config.retry_queue_nums,
                perm=PERM_READ | PERM_WRITE, topic_sys_flag=0x2 if consumer.unit_mode else 0,
                order=has_order_topic,
            )
            self._clients.register_consumer(
                consumer.group_name, info,
                consume_type=consumer.consume_type,
                message_model=consumer.message_model,
                consume_from_where=consumer.consume_from_where,
                subscriptions=None if data.without_sub else consumer.subscription_data_set,
                notify_enabled=group_config.notify_consumer_ids_changed_enable,
            )
        for producer in data.producer_data_set:
            self._clients.register_producer(producer.group_name, info)
        return request.make_response(ResponseCode.SUCCESS)

    async def unregister_client(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = UnregisterClientRequestHeader.from_ext_fields(request.ext_fields)
        if header.producer_group is not None:
            self._clients.unregister_producer(header.producer_group, connection)
        if header.consumer_group is not None:
            self._clients.unregister_consumer(header.consumer_group, connection)
        return request.make_response(ResponseCode.SUCCESS)

    async def get_consumer_list_by_group(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetConsumerListByGroupRequestHeader.from_ext_fields(request.ext_fields)
        group = self._clients.consumer_group(header.consumer_group)
        client_ids = group.client_ids() if group is not None else []
        if not client_ids:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"no consumer for this group, {header.consumer_group}",
            )
        return request.make_response(
            ResponseCode.SUCCESS, body=ConsumerListBody(tuple(client_ids)).encode()
        )
