"""Producer and consumer channels learnt from heartbeats, and consumer-ids-changed notifications.

`ClientManager` is RocketMQ's ProducerManager + ConsumerManager + ClientHousekeepingService:
- HEART_BEAT registers the connection ("channel") as a producer of each producer group and a
  consumer of each consumer group, with the group's subscriptions;
- a channel is removed by UNREGISTER_CLIENT, when its connection closes, or when it has not
  sent a heartbeat for `channelExpiredTimeout` (120 s; scanned every 10 s);
- when a consumer group's membership (or its set of subscribed topics) changes, every consumer
  of that group gets NOTIFY_CONSUMER_IDS_CHANGED (oneway), unless the group is in broadcasting
  mode or notifications are off, so clients rebalance at once instead of at their next 20 s poll.

`ConsumerIdsNotifier` sends those notifications from its own loop: a changed group is queued
(coalesced: a group queued twice is notified once, with the channels of the moment), so a slow
consumer never delays a heartbeat answer.

Invariants:
- A group with no channel left is removed (and so are its subscriptions).
- Expiry uses the monotonic clock (`monotonic_ms`), never the wall clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from remoting.bodies import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData
from remoting.codes import LanguageCode, RequestCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.errors import RemotingError
from remoting.headers import NotifyConsumerIdsChangedRequestHeader

log = logging.getLogger(__name__)

HOUSEKEEPING_INTERVAL_MS: Final = 10_000  # ClientHousekeepingService's scan period
NOTIFY_TIMEOUT_MS: Final = 1_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class ClientChannelInfo:
    """One client connection as seen by heartbeats."""

    connection: RemotingConnection
    client_id: str
    language: LanguageCode
    version: int
    last_update_ms: int


@dataclass(slots=True)
class ConsumerGroupInfo:
    """A consumer group's live channels and subscriptions (`ConsumerGroupInfo.java`)."""

    group_name: str
    consume_type: ConsumeType | None
    message_model: MessageModel | None
    consume_from_where: ConsumeFromWhere | None
    channels: dict[RemotingConnection, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]

    def update_subscriptions(self, subscriptions: Iterable[SubscriptionData]) -> bool:
        """Java's `updateSubscription`: True if a topic was added or removed (a newer
        subVersion of a known topic replaces it without counting as a change)."""
        changed = False
        topics: set[str] = set()
        for subscription in subscriptions:
            topics.add(subscription.topic)
            old = self.subscriptions.get(subscription.topic)
            if old is None:
                self.subscriptions[subscription.topic] = subscription
                changed = True
            elif subscription.sub_version > old.sub_version:
                self.subscriptions[subscription.topic] = subscription
        for topic in [topic for topic in self.subscriptions if topic not in topics]:
            del self.subscriptions[topic]
            changed = True
        return changed


class ClientManager:
    """Every producer and consumer channel of this broker."""

    def __init__(
        self,
        *,
        channel_expired_timeout_ms: int,
        on_group_changed: Callable[[str], None],
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._expired_timeout_ms = channel_expired_timeout_ms
        self._on_group_changed = on_group_changed
        self._clock_ms = clock_ms
        self._consumers: dict[str, ConsumerGroupInfo] = {}
        self._producers: dict[str, dict[RemotingConnection, ClientChannelInfo]] = {}
        self._notify_enabled: dict[str, bool] = {}
        self._watched: set[RemotingConnection] = set()

    # -- registration ------------------------------------------------------------------------

    def channel_info(
        self, connection: RemotingConnection, client_id: str, language: LanguageCode,
        version: int,
    ) -> ClientChannelInfo:
        """A fresh channel record (heartbeat time = now); watches the connection's close."""
        if connection not in self._watched:
            self._watched.add(connection)
            connection.add_close_callback(self.connection_closed)
        return ClientChannelInfo(connection, client_id, language, version, self._clock_ms())

    def register_consumer(
        self,
        group: str,
        info: ClientChannelInfo,
        *,
        consume_type: ConsumeType | None,
        message_model: MessageModel | None,
        consume_from_where: ConsumeFromWhere | None,
        subscriptions: Iterable[SubscriptionData] | None,
        notify_enabled: bool,
    ) -> bool:
        """Add or refresh a consumer channel; `subscriptions` None keeps the group's current
        ones (heartbeat V2 `withoutSub`). Returns True (and queues a notification) if the
        group's channels or subscribed topics changed."""
        consumer_group = self._consumers.get(group)
        if consumer_group is None:
            consumer_group = ConsumerGroupInfo(group, consume_type, message_model,
                                               consume_from_where)
            self._consumers[group] = consumer_group
        consumer_group.consume_type = consume_type
        consumer_group.message_model = message_model
        consumer_group.consume_from_where = consume_from_where
        old = consumer_group.channels.get(info.connection)
        channel_added = old is None
        if old is not None and old.client_id != info.client_id:
            log.warning("consumer channel changed client id group=%s peer=%s old=%s new=%s",
                        group, info.connection.peer, old.client_id, info.client_id)
        consumer_group.channels[info.connection] = info
        if channel_added:
            log.info("new consumer connected group=%s client_id=%s peer=%s", group,
                     info.client_id, info.connection.peer)
        topics_changed = (
            consumer_group.update_subscriptions(subscriptions)
            if subscriptions is not None else False
        )
        self._notify_enabled[group] = notify_enabled
        changed = channel_added or topics_changed
        if changed:
            self._group_changed(consumer_group)
        return changed

    def unregister_consumer(self, group: str, connection: RemotingConnection) -> None:
        """UNREGISTER_CLIENT for a consumer group; notifies the rest of the group."""
        consumer_group = self._consumers.get(group)
        if consumer_group is None:
            return
        removed = consumer_group.channels.pop(connection, None)
        if removed is not None:
            log.info("consumer unregistered group=%s client_id=%s", group, removed.client_id)
        self._drop_if_empty(consumer_group)
        self._group_changed(consumer_group)

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        channels = self._producers.setdefault(group, {})
        if info.connection not in channels:
            log.info("new producer connected group=%s client_id=%s peer=%s", group,
                     info.client_id, info.connection.peer)
        channels[info.connection] = info

    def unregister_producer(self, group: str, connection: RemotingConnection) -> None:
        channels = self._producers.get(group)
        if channels is not None and channels.pop(connection, None) is not None and not channels:
            del self._producers[group]

    # -- removal -----------------------------------------------------------------------------

    def connection_closed(self, connection: RemotingConnection) -> None:
        """Drop every registration of a closed connection (Java's channel close event)."""
        self._watched.discard(connection)
        self._remove_channels(lambda info: info.connection is connection, "closed")

    def scan_expired(self) -> None:
        """Drop channels silent for longer than `channelExpiredTimeout` (and closed ones)."""
        now = self._clock_ms()
        self._remove_channels(
            lambda info: info.connection.is_closing
            or now - info.last_update_ms > self._expired_timeout_ms,
            "expired",
        )

    def _remove_channels(self, doomed: Callable[[ClientChannelInfo], bool], why: str) -> None:
        for group, channels in list(self._producers.items()):
            for connection in [c for c, info in channels.items() if doomed(info)]:
                info = channels.pop(connection)
                log.info("producer channel removed (%s) group=%s client_id=%s", why, group,
                         info.client_id)
            if not channels:
                del self._producers[group]
        for consumer_group in list(self._consumers.values()):
            gone = [c for c, info in consumer_group.channels.items() if doomed(info)]
            for connection in gone:
                info = consumer_group.channels.pop(connection)
                log.info("consumer channel removed (%s) group=%s client_id=%s", why,
                         consumer_group.group_name, info.client_id)
            if gone:
                self._drop_if_empty(consumer_group)
                self._group_changed(consumer_group)

    def _drop_if_empty(self, consumer_group: ConsumerGroupInfo) -> None:
        if not consumer_group.channels:
            self._consumers.pop(consumer_group.group_name, None)
            log.info("consumer group has no connection left, removed group=%s",
                     consumer_group.group_name)

    def _group_changed(self, consumer_group: ConsumerGroupInfo) -> None:
        if consumer_group.message_model is MessageModel.BROADCASTING:
            return
        if not self._notify_enabled.get(consumer_group.group_name, True):
            return
        self._on_group_changed(consumer_group.group_name)

    # -- queries -----------------------------------------------------------------------------

    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self._consumers.get(group)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        consumer_group = self._consumers.get(group)
        return None if consumer_group is None else consumer_group.subscriptions.get(topic)

    def consumer_channels(self, group: str) -> list[RemotingConnection]:
        consumer_group = self._consumers.get(group)
        return [] if consumer_group is None else list(consumer_group.channels)

    @property
    def consumer_group_count(self) -> int:
        return len(self._consumers)

    @property
    def producer_connection_count(self) -> int:
        return sum(len(channels) for channels in self._producers.values())

    @property
    def consumer_connection_count(self) -> int:
        return sum(len(group.channels) for group in self._consumers.values())

    async def run(self) -> None:
        """Scan for expired channels every 10 s, until cancelled."""
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_MS / 1000)
            self.scan_expired()


class ConsumerIdsNotifier:
    """Sends NOTIFY_CONSUMER_IDS_CHANGED to every consumer of a changed group."""

    def __init__(self, *, enabled: bool, timeout_ms: int = NOTIFY_TIMEOUT_MS) -> None:
        self._enabled = enabled
        self._timeout_ms = timeout_ms
        self._pending: set[str] = set()
        self._wakeup = asyncio.Event()
        self._channels: Callable[[str], list[RemotingConnection]] = lambda _group: []

    def bind(self, channels: Callable[[str], list[RemotingConnection]]) -> None:
        """Where the notifier finds a group's channels at send time."""
        self._channels = channels

    def request(self, group: str) -> None:
        """Queue a notification for `group` (coalesced with one already queued)."""
        if self._enabled:
            self._pending.add(group)
            self._wakeup.set()

    async def run(self) -> None:
        """Send queued notifications until cancelled."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            groups, self._pending = self._pending, set()
            for group in groups:
                await self._notify(group)

    async def _notify(self, group: str) -> None:
        header = NotifyConsumerIdsChangedRequestHeader(consumer_group=group).to_ext_fields()
        channels = self._channels(group)
        if not channels:
            return
        results = await asyncio.gather(
            *(
                connection.send_oneway(
                    RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header),
                    self._timeout_ms,
                )
                for connection in channels
            ),
            return_exceptions=True,
        )
        for connection, result in zip(channels, results, strict=True):
            if isinstance(result, RemotingError):
                log.warning("notify consumer ids changed failed group=%s peer=%s error=%s",
                            group, connection.peer, result)
            elif isinstance(result, BaseException):
                raise result
        log.debug("notified consumer ids changed group=%s channels=%d", group, len(channels))
