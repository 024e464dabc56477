"""Registration with the name servers: REGISTER_BROKER (103) and UNREGISTER_BROKER (104)
(docs/remoting-protocol.md §7.1, §7.2).

`NamesrvRegistration.run()` registers with every name server of `namesrvAddr` at once, then every
`registerNameServerPeriod` (clamped to 10..60 s, as Java clamps it) and right after every topic
change (`request_register()`, the topic manager's listener). Each registration sends the whole
topic table (a full registration is valid at any time; Java's single-topic "increment" shape is
refused by a name server on a first registration, so pyrmq does not use it). `unregister()`
sends UNREGISTER_BROKER to each name server at shutdown (3 s each, in parallel).

The body is a `RegisterBrokerBody` and the header carries `bodyCrc32` over the exact bytes sent;
a name server that answers 1 ("crc32 not match", "register broker failed") or does not answer is
logged (WARNING) and tried again at the next period. A connection that fails is dropped and
reopened at the next attempt.

Invariants:
- Nothing is sent while `isolated()` is true (a controller-mode broker without a role), except
  that `unregister()` always tries.
- At most one registration round runs at a time; changes during a round cause one more round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from remoting.bodies import RegisterBrokerBody, TopicConfigAndMappingSerializeWrapper
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from store.message_crc import crc32

log = logging.getLogger(__name__)

UNREGISTER_TIMEOUT_MS: Final = 3_000
CONNECT_TIMEOUT_MS: Final = 3_000


@dataclass(frozen=True, slots=True)
class BrokerRegistrationIdentity:
    """Who registers: the fields of REGISTER_BROKER's header that do not change per round."""

    cluster_name: str
    broker_name: str
    broker_addr: str  # brokerIP1:listenPort
    ha_server_addr: str  # brokerIP2:haListenPort
    broker_id: int  # 0 for a master


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (IPv6 as `[::1]:9876`) -> (host, port); raises ValueError."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"name server address {address!r} is not host:port")
    return host.strip("[]"), int(port)


class NamesrvRegistration:
    """Keeps this broker registered with its name servers."""

    def __init__(
        self,
        *,
        namesrv_addrs: tuple[str, ...],
        identity: BrokerRegistrationIdentity,
        topic_table: Callable[[], TopicConfigAndMappingSerializeWrapper],
        period_ms: int,
        timeout_ms: int,
        isolated: Callable[[], bool] = lambda: False,
        on_registered: Callable[[str, RegisterBrokerResponseHeader], None] | None = None,
    ) -> None:
        self._addrs = namesrv_addrs
        self._identity = identity
        self._topic_table = topic_table
        self._period_ms = period_ms
        self._timeout_ms = timeout_ms
        self._isolated = isolated
        self._on_registered = on_registered
        self._clients: dict[str, RemotingClient] = {}
        self._wakeup = asyncio.Event()
        self._lock = asyncio.Lock()
        self._unregistered = False
        self.registrations = 0  # successful REGISTER_BROKER answers, for tests and logs

    @property
    def broker_id(self) -> int:
        return self._identity.broker_id

    def set_broker_id(self, broker_id: int) -> None:
        """The role id changed (controller mode: 0 while master, else the controller id); the
        caller then asks for a registration."""
        self._identity = replace(self._identity, broker_id=broker_id)

    def request_register(self) -> None:
        """Register again as soon as possible (after a topic change)."""
        self._wakeup.set()

    async def run(self) -> None:
        """Register now, then at every period or request, until cancelled."""
        try:
            while True:
                self._wakeup.clear()
                await self.register_all()
                try:
                    async with asyncio.timeout(self._period_ms / 1000):
                        await self._wakeup.wait()
                except TimeoutError:
                    pass
        finally:
            await self.close()

    async def register_all(self) -> None:
        """One registration round with every name server (in parallel)."""
        if not self._addrs or self._isolated():
            return
        async with self._lock:
            if self._unregistered:
                return
            # A snapshot of frozen topic configs, taken on the loop; encoding it grows with
            # the number of topics, so it runs in a worker thread.
            wrapper = self._topic_table()
            body = await asyncio.to_thread(
                lambda: RegisterBrokerBody(topic_config_serialize_wrapper=wrapper).encode()
            )
            header = RegisterBrokerRequestHeader(
                broker_name=self._identity.broker_name,
                broker_addr=self._identity.broker_addr,
                cluster_name=self._identity.cluster_name,
                ha_server_addr=self._identity.ha_server_addr,
                broker_id=self._identity.broker_id,
                enable_acting_master=False,
                compressed=False,
                body_crc32=crc32(body),
            ).to_ext_fields()
            request = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body)
            await asyncio.gather(*(self._register_one(addr, request) for addr in self._addrs))

    async def _register_one(self, addr: str, request: RemotingCommand) -> None:
        try:
            client = await self._client(addr)
            response = await client.invoke(request, self._timeout_ms)
        except (RemotingError, OSError, ValueError) as err:
            log.warning("register broker failed namesrv=%s error=%s", addr, err)
            await self._drop(addr)
            return
        if response.code != ResponseCode.SUCCESS:
            log.warning("register broker refused namesrv=%s code=%d remark=%s", addr,
                        response.code, response.remark)
            return
        self.registrations += 1
        log.debug("registered with name server namesrv=%s", addr)
        if self._on_registered is not None:
            try:
                answer = RegisterBrokerResponseHeader.from_ext_fields(response.ext_fields)
            except RemotingError as err:
                log.warning("register broker answer unreadable namesrv=%s error=%s", addr, err)
                return
            self._on_registered(addr, answer)

    async def unregister(self) -> None:
        """UNREGISTER_BROKER to every name server (shutdown); failures are logged. No
        registration is sent after this."""
        if not self._addrs:
            return
        header = UnRegisterBrokerRequestHeader(
            broker_name=self._identity.broker_name,
            broker_addr=self._identity.broker_addr,
            cluster_name=self._identity.cluster_name,
            broker_id=self._identity.broker_id,
        ).to_ext_fields()
        request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header)
        async with self._lock:  # never while a registration round is in flight
            self._unregistered = True
            await asyncio.gather(*(self._unregister_one(addr, request) for addr in self._addrs))

    async def _unregister_one(self, addr: str, request: RemotingCommand) -> None:
        try:
            client = await self._client(addr)
            response = await client.invoke(request, UNREGISTER_TIMEOUT_MS)
        except (RemotingError, OSError, ValueError) as err:
            log.warning("unregister broker failed namesrv=%s error=%s", addr, err)
            return
        log.info("unregistered from name server namesrv=%s code=%d", addr, response.code)

    async def _client(self, addr: str) -> RemotingClient:
        client = self._clients.get(addr)
        if client is not None and not client.is_closed:
            return client
        host, port = split_address(addr)
        client = await RemotingClient.connect(host, port, connect_timeout_ms=CONNECT_TIMEOUT_MS)
        self._clients[addr] = client
        return client

    async def _drop(self, addr: str) -> None:
        client = self._clients.pop(addr, None)
        if client is not None:
            await client.close()

    async def close(self) -> None:
        """Close every name-server connection."""
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()
