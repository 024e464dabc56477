"""`RemotingClient`: one connection to a remoting server, for requests with timeouts.

`RemotingClient.connect(host, port)` opens the connection within a deadline; `invoke` sends a
request and waits (bounded) for the response with the same opaque; `invoke_oneway` sends without
waiting; `invoke_once(addr, request, timeout_ms)` is one request on a connection of its own
(connect, invoke, close: what a tool asking a name server or controller once does); requests
the server pushes (NOTIFY_CONSUMER_IDS_CHANGED, NOTIFY_BROKER_ROLE_CHANGED,
...) go to the `handler` given at connect time (default: REQUEST_CODE_NOT_SUPPORTED).

Every failure is typed: RemotingConnectError (RemotingConnectTimeoutError when the deadline
passed), RemotingTimeoutError, RemotingConnectionClosedError, RemotingTooManyRequestsError.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Self

from remoting.codec import FRAME_BYTES_MAX
from remoting.command import RemotingCommand
from remoting.connection import (
    ONEWAY_TIMEOUT_MS_DEFAULT,
    ConnectionLimits,
    RemotingConnection,
    RequestHandler,
    RequestTasks,
    not_supported_handler,
)
from remoting.errors import RemotingConnectError, RemotingConnectTimeoutError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_MS_DEFAULT: Final = 3_000  # Java `connectTimeoutMillis`


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """Bounds of a client connection. `idle_timeout_ms` None keeps an idle connection open."""

    frame_bytes_max: int = FRAME_BYTES_MAX
    invokes_in_flight_max: int = 65_535  # Java `clientAsyncSemaphoreValue`
    requests_in_flight_max: int = 64  # requests pushed by the server, handled at once
    idle_timeout_ms: int | None = None
    write_buffer_high_bytes: int = 1024 * 1024
    write_buffer_low_bytes: int = 256 * 1024
    close_timeout_ms: int = 3_000

    def connection_limits(self) -> ConnectionLimits:
        """The per-connection part of these limits."""
        return ConnectionLimits(
            frame_bytes_max=self.frame_bytes_max,
            idle_timeout_ms=self.idle_timeout_ms,
            requests_in_flight_max=self.requests_in_flight_max,
            invokes_in_flight_max=self.invokes_in_flight_max,
            write_buffer_high_bytes=self.write_buffer_high_bytes,
            write_buffer_low_bytes=self.write_buffer_low_bytes,
        )


class RemotingClient:
    """One client connection; build it with `connect`. Also an async context manager."""

    def __init__(
        self, connection: RemotingConnection, tasks: RequestTasks, limits: ClientLimits
    ) -> None:
        self._connection = connection
        self._tasks = tasks
        self._limits = limits

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        connect_timeout_ms: int = CONNECT_TIMEOUT_MS_DEFAULT,
        limits: ClientLimits | None = None,
        handler: RequestHandler = not_supported_handler,
    ) -> Self:
        """Connect to `host:port` within `connect_timeout_ms`.

        Raises RemotingConnectTimeoutError when the deadline passes and RemotingConnectError
        when the connection is refused or fails otherwise.
        """
        limits = ClientLimits() if limits is None else limits
        connection_limits = limits.connection_limits()
        tasks = RequestTasks()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(connect_timeout_ms / 1000):
                _, connection = await loop.create_connection(
                    lambda: RemotingConnection(handler, connection_limits, tasks), host, port
                )
        except TimeoutError:
            raise RemotingConnectTimeoutError(
                f"connect to {host}:{port}: not connected within connect_timeout_ms="
                f"{connect_timeout_ms}"
            ) from None
        except OSError as err:
            raise RemotingConnectError(f"connect to {host}:{port}: {err}") from err
        return cls(connection, tasks, limits)

    @property
    def connection(self) -> RemotingConnection:
        return self._connection

    @property
    def peer(self) -> str:
        """The server's `host:port`."""
        return self._connection.peer

    @property
    def is_closed(self) -> bool:
        """True once the connection is closing or closed (a closed client is not reopened)."""
        return self._connection.is_closing

    async def invoke(self, command: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        """Send `command` and return the response with its opaque; see
        `RemotingConnection.invoke` for the errors."""
        return await self._connection.invoke(command, timeout_ms)

    async def invoke_oneway(
        self, command: RemotingCommand, timeout_ms: int = ONEWAY_TIMEOUT_MS_DEFAULT
    ) -> None:
        """Send `command` as oneway: no response; see `RemotingConnection.send_oneway`."""
        await self._connection.send_oneway(command, timeout_ms)

    async def close(self) -> None:
        """Close gracefully: take no more pushed requests, let running handlers answer (up to
        `close_timeout_ms`), then close the connection after flushing what was written."""
        self._connection.stop_reading()
        await self._tasks.close(timeout_ms=self._limits.close_timeout_ms)
        self._connection.close()
        try:
            async with asyncio.timeout(self._limits.close_timeout_ms / 1000):
                await self._connection.wait_closed()
        except TimeoutError:
            self._connection.abort("close timed out: the server does not read")
            await self._connection.wait_closed()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


def split_host_port(addr: str) -> tuple[str, int]:
    """`host:port` -> (host, port); ValueError naming `addr` when it is not of that form."""
    host, _, port = addr.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address {addr!r} is not host:port")
    return host, int(port)


async def invoke_once(addr: str, command: RemotingCommand, timeout_ms: int) -> RemotingCommand:
    """`command` on a connection of its own to `addr` (host:port), connected within and
    answered within `timeout_ms` each, closed afterwards. Raises what `connect` and `invoke`
    raise."""
    host, port = split_host_port(addr)
    async with await RemotingClient.connect(host, port, connect_timeout_ms=timeout_ms) as client:
        return await client.invoke(command, timeout_ms)
