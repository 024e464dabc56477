"""A client of a whole cluster: name-server routing over `BrokerClient` connections.

`ClusterClient(["127.0.0.1:9876"])` asks the name servers for topic routes
(GET_ROUTEINFO_BY_TOPIC, trying each name server in turn), keeps one `BrokerClient` per broker
address, and routes each request to the master of the queue's broker name:

- `send` picks the queue with a `QueueSelector` (or takes the one given) and retries, at most
  `send_retries` more times on another queue and after a route refresh, only when nothing was
  stored: a connect failure, or a broker answer of SYSTEM_BUSY, SERVICE_NOT_AVAILABLE,
  NO_PERMISSION or TOPIC_NOT_EXIST. A timeout or a connection lost after the request was written
  is raised as is (the message may be stored: the caller decides, at least once).
- `pull` and the offset queries are reads, retried up to `read_retries` more times after a route
  refresh on any transport error, non-pull answer or missing master (a master that moved
  answers from its new address once the name server routes it there); with `failover_timeout_ms`
  they go on being retried, every `RETRY_PAUSE_MS`, until that long after the first attempt, so
  a read outlasts a controller-mode failover (the old master gone, a new one not routed yet).
- `refresh_route(topic)` re-reads a route; a failed request refreshes the route it used.

Nothing here blocks the event loop; every request has a timeout, so an unreachable broker or
name server is an error naming its address, never a hang.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Final, Self, TypeVar

from pyrmq_client.broker_client import (
    TIMEOUT_MS_DEFAULT,
    BrokerClient,
    Message,
    PullResult,
    SendResult,
    new_client_id,
)
from pyrmq_client.errors import BrokerClientError, RetriesExhaustedError, RouteError
from pyrmq_client.routing import MessageQueue, QueueSelector, TopicRoute
from remoting.bodies import TopicRouteData
from remoting.client import invoke_once, split_host_port
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingConnectError, RemotingError
from remoting.headers import GetRouteInfoRequestHeader

SEND_RETRIES_DEFAULT: Final = 2
READ_RETRIES_DEFAULT: Final = 2
RETRY_PAUSE_MS: Final = 200  # between the retries of a read past `read_retries`
# Broker answers to a send that mean the message was not stored: safe to send again.
NOT_STORED_CODES: Final = frozenset({
    ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.NO_PERMISSION,
    ResponseCode.TOPIC_NOT_EXIST,
})

T = TypeVar("T")


def split_addrs(addrs: str | Sequence[str]) -> tuple[str, ...]:
    """Name-server addresses from "a:1;b:2" (Java's namesrvAddr syntax) or a sequence."""
    items = addrs.split(";") if isinstance(addrs, str) else list(addrs)
    result = tuple(item.strip() for item in items if item.strip())
    for addr in result:
        try:
            split_host_port(addr)
        except ValueError:
            raise ValueError(f"name server address {addr!r} is not host:port") from None
    return result


class ClusterClient:
    """Routed requests to the brokers of the topics asked about. An async context manager."""

    def __init__(
        self, namesrv_addrs: str | Sequence[str], *, client_id: str | None = None,
        timeout_ms: int = TIMEOUT_MS_DEFAULT, send_retries: int = SEND_RETRIES_DEFAULT,
        read_retries: int = READ_RETRIES_DEFAULT, failover_timeout_ms: int = 0,
    ) -> None:
        self.namesrv_addrs = split_addrs(namesrv_addrs)
        if not self.namesrv_addrs:
            raise ValueError("at least one name server address is needed")
        self.client_id = client_id or new_client_id()
        self.timeout_ms = timeout_ms
        self.send_retries = send_retries
        self.read_retries = read_retries
        self.failover_timeout_ms = failover_timeout_ms
        self._routes: dict[str, TopicRoute] = {}
        self._brokers: dict[str, BrokerClient] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self._selectors: dict[str, QueueSelector] = {}

    async def close(self) -> None:
        brokers, self._brokers = self._brokers, {}
        for client in brokers.values():
            await client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    # -- routes ------------------------------------------------------------------------------

    async def fetch_route_data(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC from the first name server that answers; RouteError when none
        does or the topic has no route."""
        failures: list[str] = []
        header = GetRouteInfoRequestHeader(topic=topic)
        for addr in self.namesrv_addrs:
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              header.to_ext_fields())
            try:
                response = await invoke_once(addr, request, self.timeout_ms)
            except RemotingError as err:
                failures.append(f"{addr}: {err}")
                continue
            if response.code == ResponseCode.SUCCESS:
                return TopicRouteData.decode(response.body)
            failures.append(f"{addr}: code={response.code} remark={response.remark!r}")
        raise RouteError(f"no route for topic {topic!r} from name servers "
                         f"{';'.join(self.namesrv_addrs)}: " + "; ".join(failures))

    async def refresh_route(self, topic: str) -> TopicRoute:
        """Re-read `topic`'s route from the name servers and cache it."""
        route = TopicRoute.of(topic, await self.fetch_route_data(topic))
        self._routes[topic] = route
        return route

    async def route(self, topic: str) -> TopicRoute:
        """The cached route of `topic`, read from the name servers the first time."""
        route = self._routes.get(topic)
        return route if route is not None else await self.refresh_route(topic)

    async def read_queues(self, topic: str) -> tuple[MessageQueue, ...]:
        """The readable queues of `topic`, from a fresh route."""
        return (await self.refresh_route(topic)).read_queues

    async def broker_for(self, queue: MessageQueue) -> BrokerClient:
        """A connection to the master of `queue`'s broker name (RouteError without one)."""
        route = await self.route(queue.topic)
        addr = route.master_addr(queue.broker_name)
        if addr is None:
            route = await self.refresh_route(queue.topic)
            addr = route.master_addr(queue.broker_name)
        if addr is None:
            raise RouteError(f"{queue}: the name servers list no master for broker "
                             f"{queue.broker_name!r}")
        return await self.broker_at(addr)

    async def broker_at(self, addr: str) -> BrokerClient:
        """The open connection to `addr`, connecting (once, however many callers wait)."""
        lock = self._connecting.setdefault(addr, asyncio.Lock())
        async with lock:
            client = self._brokers.get(addr)
            if client is not None and not client.remoting.is_closed:
                return client
            client = await BrokerClient.connect(*split_host_port(addr), client_id=self.client_id,
                                                connect_timeout_ms=self.timeout_ms)
            self._brokers[addr] = client
            return client

    async def _forget(self, queue: MessageQueue) -> None:
        """After a failure on `queue`: drop the connection to its broker if it is closed, and
        the cached route (the next request re-reads it)."""
        route = self._routes.pop(queue.topic, None)
        addr = route.master_addr(queue.broker_name) if route is not None else None
        if addr is not None:
            client = self._brokers.get(addr)
            if client is not None and client.remoting.is_closed:
                del self._brokers[addr]

    # -- reads -------------------------------------------------------------------------------

    async def _read(self, queue: MessageQueue, what: str,
                    call: Callable[[BrokerClient], Awaitable[T]]) -> T:
        attempts: list[str] = []
        deadline = time.monotonic() + self.failover_timeout_ms / 1000
        while True:
            addr = "?"
            try:
                client = await self.broker_for(queue)
                addr = client.remoting.peer
                return await call(client)
            except (RemotingError, BrokerClientError, RouteError) as err:
                attempts.append(f"{addr}: {type(err).__name__}: {err}")
                await self._forget(queue)
            if len(attempts) > self.read_retries:
                if time.monotonic() >= deadline:
                    break
                await asyncio.sleep(RETRY_PAUSE_MS / 1000)
        raise RetriesExhaustedError(f"{what} {queue}", attempts)

    async def pull(
        self, group: str, queue: MessageQueue, offset: int, *, max_nums: int = 32,
        subscription: str = "*", suspend_timeout_ms: int | None = None, decode: bool = True,
    ) -> PullResult:
        """PULL_MESSAGE from the master of `queue`, retried after a route refresh
        (`BrokerClient.pull` for the arguments)."""
        return await self._read(queue, f"pull @{offset}", lambda client: client.pull(
            group, queue.topic, queue.queue_id, offset, max_nums=max_nums,
            subscription=subscription, suspend_timeout_ms=suspend_timeout_ms,
            timeout_ms=None if suspend_timeout_ms is not None else self.timeout_ms,
            decode=decode))

    async def min_offset(self, queue: MessageQueue) -> int:
        return await self._read(queue, "min offset",
                                lambda client: client.min_offset(queue.topic, queue.queue_id))

    async def max_offset(self, queue: MessageQueue) -> int:
        return await self._read(queue, "max offset",
                                lambda client: client.max_offset(queue.topic, queue.queue_id))

    async def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the first message stored at or after `timestamp_ms` (the max offset
        when there is none)."""
        return await self._read(queue, f"search offset at {timestamp_ms}",
                                lambda client: client.search_offset(queue.topic, queue.queue_id,
                                                                    timestamp_ms))

    # -- sends -------------------------------------------------------------------------------

    async def _select(self, selector: QueueSelector, topic: str,
                      failed: Sequence[str]) -> MessageQueue:
        queue = selector.select(await self.route(topic), failed)
        if queue is None:
            raise RouteError(f"topic {topic!r} has no writable queue with a master")
        return queue

    async def _send(self, topic: str, queue: MessageQueue | None, what: str,
                    call: Callable[[BrokerClient, MessageQueue], Awaitable[SendResult]],
                    ) -> tuple[MessageQueue, SendResult]:
        attempts: list[str] = []
        failed: list[str] = []
        selector = self._selectors.setdefault(topic, QueueSelector())
        for _ in range(self.send_retries + 1):
            addr = "?"
            target = queue
            try:
                if target is None:
                    target = await self._select(selector, topic, failed)
                client = await self.broker_for(target)
                addr = client.remoting.peer
                return target, await call(client, target)
            except (RemotingConnectError, RouteError) as err:
                attempts.append(f"{addr}: {type(err).__name__}: {err}")
            except BrokerClientError as err:
                if err.code not in NOT_STORED_CODES:
                    raise
                attempts.append(f"{addr}: {err}")
            if target is not None:
                failed.append(target.broker_name)
                await self._forget(target)
            else:
                self._routes.pop(topic, None)
        raise RetriesExhaustedError(f"{what} (nothing stored)", attempts)

    async def send(self, message: Message, *, producer_group: str,
                   queue: MessageQueue | None = None) -> tuple[MessageQueue, SendResult]:
        """Send one message to `queue`, or to the next writable queue of its topic; returns
        the queue used and the broker's result."""
        return await self._send(message.topic, queue, f"send to {message.topic}",
                                lambda client, target: client.send(
                                    message, producer_group=producer_group,
                                    queue_id=target.queue_id, timeout_ms=self.timeout_ms))

    async def send_batch(self, messages: Sequence[Message], *, producer_group: str,
                         queue: MessageQueue | None = None) -> tuple[MessageQueue, SendResult]:
        """Send messages of one topic as one batch to one queue (chosen as `send` does)."""
        if not messages:
            raise ValueError("send_batch needs at least one message")
        topic = messages[0].topic
        return await self._send(topic, queue, f"batch send to {topic}",
                                lambda client, target: client.send_batch(
                                    messages, producer_group=producer_group,
                                    queue_id=target.queue_id, timeout_ms=self.timeout_ms))
