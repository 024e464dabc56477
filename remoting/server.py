"""`RemotingServer`: accepts remoting connections and hands their requests to one handler.

The server owns the listening socket, the set of live connections, the request tasks and one
global budget of in-flight request bytes (partial frames buffered plus requests being handled,
across all connections). Limits live in `ServerLimits`; per-connection behaviour (frame-read
deadline, idle timeout, write-buffer backpressure, bad frames) is `RemotingConnection`'s.

Invariants:
- At most `connections_max` connections are served; one more is accepted and closed at once.
- While the budget is spent (`in_flight_bytes > in_flight_bytes_max`), no connection reads;
  reading resumes once it is back at or below three quarters of the budget. Partial frames
  that stall meanwhile are closed by their frame-read deadline, which is what frees a budget
  held by slow senders. A single frame always fits: `in_flight_bytes_max >= frame_bytes_max`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Self

from remoting.codec import FRAME_BYTES_MAX
from remoting.connection import (
    ConnectionLimits,
    RemotingConnection,
    RequestHandler,
    RequestTasks,
)

log = logging.getLogger(__name__)

_MIB: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Every bound of a `RemotingServer`. Defaults follow RocketMQ where it has one (16 MiB
    frames, `serverChannelMaxIdleTimeSeconds` = 120 s) and docs/reliability.md §5 where it does not
    (30 s frame-read deadline)."""

    frame_bytes_max: int = FRAME_BYTES_MAX
    frame_read_timeout_ms: int = 30_000
    idle_timeout_ms: int = 120_000
    connections_max: int = 4096
    in_flight_bytes_max: int = 128 * _MIB
    # A push consumer keeps one long-polling pull per assigned queue outstanding on one
    # connection, so this must exceed the queues one client may hold on one broker.
    requests_in_flight_per_connection_max: int = 1024
    write_buffer_high_bytes: int = 1 * _MIB
    write_buffer_low_bytes: int = 256 * 1024
    close_timeout_ms: int = 3_000
    # Connections the kernel completes and queues before they are accepted (listen()'s
    # backlog, capped by net.core.somaxconn): RocketMQ's `serverSocketBacklog`. A connection
    # arriving at a full queue has its SYN dropped and retried a second later: with asyncio's
    # default of 100, 3 of 400 connections a client opened one after another to a broker
    # waited that second (2026-11-28). A reconnect storm after a failover is such a burst.
    backlog: int = 1024

    def __post_init__(self) -> None:
        for name in ("frame_read_timeout_ms", "idle_timeout_ms", "connections_max", "backlog"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")
        if self.close_timeout_ms < 0:
            raise ValueError(f"close_timeout_ms={self.close_timeout_ms} must not be negative")
        if self.in_flight_bytes_max < self.frame_bytes_max:
            raise ValueError(
                f"in_flight_bytes_max={self.in_flight_bytes_max} is below frame_bytes_max="
                f"{self.frame_bytes_max}: a largest frame could never complete"
            )
        self.connection_limits()  # validates the rest

    def connection_limits(self) -> ConnectionLimits:
        """The per-connection part of these limits."""
        return ConnectionLimits(
            frame_bytes_max=self.frame_bytes_max,
            frame_read_timeout_ms=self.frame_read_timeout_ms,
            idle_timeout_ms=self.idle_timeout_ms,
            requests_in_flight_max=self.requests_in_flight_per_connection_max,
            write_buffer_high_bytes=self.write_buffer_high_bytes,
            write_buffer_low_bytes=self.write_buffer_low_bytes,
        )


class RemotingServer:
    """A remoting server: `start()` binds, `close()` stops; also an async context manager.

    `handler(connection, request)` answers every request of every connection; use
    `remoting.command.request_code_not_supported` for codes it does not serve.
    """

    def __init__(
        self, handler: RequestHandler, *, limits: ServerLimits | None = None, name: str = "remoting"
    ) -> None:
        self._handler = handler
        self._limits = ServerLimits() if limits is None else limits
        self._connection_limits = self._limits.connection_limits()
        self._name = name
        self._tasks = RequestTasks()
        self._connections: set[RemotingConnection] = set()
        self._server: asyncio.Server | None = None
        self._in_flight_bytes = 0
        self._in_flight_bytes_peak = 0
        self._in_flight_bytes_resume = self._limits.in_flight_bytes_max * 3 // 4
        self._budget_paused = False
        self._connections_refused = 0

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); the port is the real one when started on port 0."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError(f"{self._name} server is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def limits(self) -> ServerLimits:
        return self._limits

    @property
    def connections(self) -> tuple[RemotingConnection, ...]:
        """The connections being served now."""
        return tuple(self._connections)

    @property
    def connections_refused(self) -> int:
        """Connections accepted and closed at once because `connections_max` was reached."""
        return self._connections_refused

    @property
    def requests_received(self) -> int:
        """Requests handed to the handler since start, over all connections."""
        return self._tasks.spawned

    @property
    def requests_being_handled(self) -> int:
        """Requests whose handler has not finished yet."""
        return len(self._tasks)

    @property
    def in_flight_bytes(self) -> int:
        """Request bytes held now: partial frames plus requests being handled."""
        return self._in_flight_bytes

    @property
    def in_flight_bytes_peak(self) -> int:
        """The highest `in_flight_bytes` seen since start."""
        return self._in_flight_bytes_peak

    @property
    def budget_paused(self) -> bool:
        """True while the global budget is spent and no connection reads."""
        return self._budget_paused

    async def start(self, host: str = "0.0.0.0", port: int = 0) -> None:  # noqa: S104
        """Bind and start accepting. Port 0 picks a free port (see `address`)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, host, port, reuse_address=True, backlog=self._limits.backlog
        )
        log.info("%s server listening address=%s:%d", self._name, *self.address)

    async def close(self) -> None:
        """Stop gracefully: stop accepting and reading, give running handlers up to
        `close_timeout_ms` to answer (then cancel them), close every connection after flushing
        what was written, and abort those whose peer does not read it within `close_timeout_ms`.
        """
        if self._server is not None:
            self._server.close()
        for connection in tuple(self._connections):
            connection.stop_reading()
        await self._tasks.close(timeout_ms=self._limits.close_timeout_ms)
        for connection in tuple(self._connections):
            connection.close()
        waiters = [asyncio.ensure_future(each.wait_closed()) for each in tuple(self._connections)]
        if waiters:
            _, pending = await asyncio.wait(waiters, timeout=self._limits.close_timeout_ms / 1000)
            if pending:  # peers that do not read what is left to flush
                for connection in tuple(self._connections):
                    connection.abort("server closing, write buffer not drained")
                await asyncio.wait(pending)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        log.info("%s server closed", self._name)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def _new_connection(self) -> RemotingConnection:
        return RemotingConnection(self._handler, self._connection_limits, self._tasks, owner=self)

    # -- ConnectionOwner -------------------------------------------------------------------

    def connection_opened(self, connection: RemotingConnection) -> bool:
        if len(self._connections) >= self._limits.connections_max:
            self._connections_refused += 1
            return False
        self._connections.add(connection)
        if self._budget_paused:
            connection.set_budget_paused(paused=True)
        return True

    def connection_closed(self, connection: RemotingConnection) -> None:
        self._connections.discard(connection)

    def charge_in_flight_bytes(self, delta: int) -> None:
        self._in_flight_bytes += delta
        if self._in_flight_bytes > self._in_flight_bytes_peak:
            self._in_flight_bytes_peak = self._in_flight_bytes
        if not self._budget_paused and self._in_flight_bytes > self._limits.in_flight_bytes_max:
            self._budget_paused = True
            log.warning(
                "%s in-flight byte budget spent, pausing reads in_flight_bytes=%d "
                "in_flight_bytes_max=%d connections=%d",
                self._name,
                self._in_flight_bytes,
                self._limits.in_flight_bytes_max,
                len(self._connections),
            )
            for each in tuple(self._connections):
                each.set_budget_paused(paused=True)
        elif self._budget_paused and self._in_flight_bytes <= self._in_flight_bytes_resume:
            self._budget_paused = False
            log.info(
                "%s in-flight byte budget recovered, resuming reads in_flight_bytes=%d",
                self._name,
                self._in_flight_bytes,
            )
            for each in tuple(self._connections):
                each.set_budget_paused(paused=False)
