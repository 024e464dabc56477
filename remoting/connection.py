"""One remoting connection, either end: frames in and out, requests both ways, bounded.

`RemotingConnection` is the `asyncio.Protocol` both `RemotingServer` and `RemotingClient` run.
It feeds received bytes to a `FrameDecoder`, hands each request to a `RequestHandler` in its own
task and writes the answer, matches responses to its own outstanding `invoke`s by opaque, and
enforces the per-connection limits of `ConnectionLimits`:
- a frame whose first byte arrived more than `frame_read_timeout_ms` ago and is still incomplete
  closes the connection (slowloris), unless reading was paused by this side;
- no bytes either way for `idle_timeout_ms`, with nothing in flight, closes the connection;
- reading pauses while `requests_in_flight_max` of the peer's requests are being handled, while
  the transport's write buffer is above `write_buffer_high_bytes` (a peer that does not read its
  responses), or while the owner's global in-flight byte budget is spent;
- a frame that breaks the protocol closes this connection only, with one WARNING.

Invariants:
- Every request that is not oneway gets exactly one response carrying its opaque and the
  response bit, unless the handler returns None or the connection closes first; a handler
  exception becomes SYSTEM_ERROR with the exception as remark and never closes the connection.
- A handler task is never cancelled because its peer went away (it may be half-way through a
  durable step); it finishes and its response is dropped. `RequestTasks.close` bounds the wait.
- `charged bytes == decoder.buffered_bytes + bytes of requests being handled`, reported to the
  owner as deltas, and returned in full when the connection is lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast

from remoting.codec import FRAME_BYTES_MAX, FrameDecoder, encode_head
from remoting.codes import ONEWAY_FLAG, RESPONSE_FLAG
from remoting.command import RemotingCommand, request_code_not_supported, system_error
from remoting.errors import (
    CommandEncodeError,
    RemotingCommandError,
    RemotingConnectionClosedError,
    RemotingProtocolError,
    RemotingTimeoutError,
    RemotingTooManyRequestsError,
)

log = logging.getLogger(__name__)

RequestHandler = Callable[
    ["RemotingConnection", RemotingCommand], Awaitable[RemotingCommand | None]
]
"""Answers one request: returns the response, or None to send nothing (always the case for
oneway requests, whatever it returns). Raising answers SYSTEM_ERROR with the exception text."""

_OPAQUE_MASK: Final = 0x7FFFFFFF
ONEWAY_TIMEOUT_MS_DEFAULT: Final = 3_000


async def not_supported_handler(
    connection: RemotingConnection, command: RemotingCommand
) -> RemotingCommand:
    """A handler that answers every request with REQUEST_CODE_NOT_SUPPORTED (3)."""
    return request_code_not_supported(command)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Bounds of one connection. None disables a timeout."""

    frame_bytes_max: int = FRAME_BYTES_MAX
    frame_read_timeout_ms: int | None = None
    idle_timeout_ms: int | None = None
    requests_in_flight_max: int = 1024
    invokes_in_flight_max: int = 65_535
    write_buffer_high_bytes: int = 1024 * 1024
    write_buffer_low_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        for name in ("requests_in_flight_max", "invokes_in_flight_max", "write_buffer_high_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")
        for name in ("frame_read_timeout_ms", "idle_timeout_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name}={value} must be positive or None")
        if not 0 <= self.write_buffer_low_bytes <= self.write_buffer_high_bytes:
            raise ValueError(
                f"write_buffer_low_bytes={self.write_buffer_low_bytes} outside "
                f"0..write_buffer_high_bytes={self.write_buffer_high_bytes}"
            )


class ConnectionOwner(Protocol):
    """What a server provides to its connections: admission and the global byte budget."""

    def connection_opened(self, connection: RemotingConnection) -> bool:
        """Register a new connection; False means "over the cap", and it is closed at once."""

    def connection_closed(self, connection: RemotingConnection) -> None:
        """Forget a connection (also one that `connection_opened` refused)."""

    def charge_in_flight_bytes(self, delta: int) -> None:
        """Add `delta` (may be negative) to the bytes held for requests across connections."""


class RequestTasks:
    """Owner of request-handling tasks, which may outlive the connection that read them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self.spawned = 0  # tasks started so far (the loop monitor's measure of work)

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run `coroutine` as a task owned by this set until it finishes."""
        self.spawned += 1
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self, *, timeout_ms: int) -> None:
        """Wait up to `timeout_ms` for the running tasks, then cancel and await the rest."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_ms / 1000)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


# Why reading is paused (bits of `RemotingConnection._pause`); it resumes when none is left.
# Plain ints: this is tested once per frame, and IntFlag operators cost a function call each.
_PAUSE_BUDGET: Final = 1  # the owner's global in-flight byte budget is spent
_PAUSE_WRITE_BUFFER: Final = 2  # our write buffer is above its high-water mark: peer not reading
_PAUSE_REQUESTS: Final = 4  # requests_in_flight_max of the peer's requests are being handled
_PAUSE_STOPPED: Final = 8  # the owner is shutting down: no new requests, running ones finish
# Reasons that also stop handing already-buffered frames to the handler; the budget does not,
# since handling a request that is already in memory is what frees the budget.
_STOPS_DISPATCH: Final = _PAUSE_WRITE_BUFFER | _PAUSE_REQUESTS | _PAUSE_STOPPED


def _with_opaque(command: RemotingCommand, opaque: int, flag: int) -> RemotingCommand:
    """`command` with another opaque and flag (`dataclasses.replace`, without its overhead)."""
    return RemotingCommand(
        command.code,
        command.language,
        command.version,
        opaque,
        flag,
        command.remark,
        command.ext_fields,
        command.body,
        command.serialize_type,
    )


def _peer_name(transport: asyncio.BaseTransport) -> str:
    peername = transport.get_extra_info("peername")
    if isinstance(peername, tuple) and len(peername) >= 2:  # (host, port) or IPv6 (host, port, ...)
        return f"{peername[0]}:{peername[1]}"
    return str(peername)


class RemotingConnection(asyncio.Protocol):
    """One TCP connection speaking the remoting protocol, in either direction.

    Built by `RemotingServer` and `RemotingClient`; handlers receive it to push requests to the
    peer (`send_oneway`, `invoke`) or to notice that the peer went away (`is_closing`).
    """

    def __init__(
        self,
        handler: RequestHandler,
        limits: ConnectionLimits,
        tasks: RequestTasks,
        *,
        owner: ConnectionOwner | None = None,
    ) -> None:
        self._handler = handler
        self._limits = limits
        self._tasks = tasks
        self._owner = owner
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._peer = "unconnected"
        self._decoder = FrameDecoder(frame_bytes_max=limits.frame_bytes_max)
        self._closing = False
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._pause = 0
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._last_opaque = 0
        self._requests_in_flight = 0
        self._charged_buffer = 0
        self._last_activity = self._loop.time()
        self._partial_since: float | None = None
        self._partial_frame_seq = 0
        self._frame_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    # -- state for handlers, owners and tests ----------------------------------------------

    @property
    def peer(self) -> str:
        """The peer's `host:port`."""
        return self._peer

    @property
    def local_address(self) -> str:
        """This side's `host:port` (the address the peer connected to, on a server)."""
        if self._transport is None:
            return "unconnected"
        host, port = self._transport.get_extra_info("sockname")[:2]
        return f"{host}:{port}"

    @property
    def is_closing(self) -> bool:
        """True once the connection is closing or closed; nothing more is sent or read."""
        return self._closing

    @property
    def reading_paused(self) -> bool:
        """True while this side has stopped reading from the peer (any reason)."""
        return bool(self._pause)

    @property
    def write_buffer_bytes(self) -> int:
        """Bytes written but not yet handed to the kernel."""
        if self._transport is None:
            return self._out_bytes
        return self._out_bytes + self._transport.get_write_buffer_size()

    @property
    def requests_in_flight(self) -> int:
        """The peer's requests being handled now."""
        return self._requests_in_flight

    async def wait_closed(self) -> None:
        """Return once the connection is closed."""
        await asyncio.shield(self._closed)

    def add_close_callback(self, callback: Callable[[RemotingConnection], None]) -> None:
        """Call `callback(self)` from the event loop once the connection is closed (soon, if
        it already is). Used by owners of per-connection state (e.g. a broker's client table)."""
        self._closed.add_done_callback(lambda _: callback(self))

    # -- sending ---------------------------------------------------------------------------

    async def invoke(self, command: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        """Send `command` as a request and return the peer's response.

        The opaque is assigned here. Raises RemotingTimeoutError if no response arrives within
        `timeout_ms` (waiting for a full write buffer to drain counts), RemotingTooManyRequests
        Error past `invokes_in_flight_max` outstanding invokes, RemotingConnectionClosedError if
        the connection is or becomes closed, CommandEncodeError if it cannot be encoded.
        """
        if len(self._pending) >= self._limits.invokes_in_flight_max:
            raise RemotingTooManyRequestsError(
                f"invoke code={command.code} to {self._peer}: {len(self._pending)} invokes "
                f"outstanding, invokes_in_flight_max={self._limits.invokes_in_flight_max}"
            )
        opaque = self._take_opaque()
        response: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[opaque] = response
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await self._wait_writable()
                self._write_command(
                    _with_opaque(command, opaque, command.flag & ~(RESPONSE_FLAG | ONEWAY_FLAG))
                )
                return await response
        except TimeoutError:
            raise RemotingTimeoutError(
                f"invoke code={command.code} opaque={opaque} to {self._peer}: no response "
                f"within timeout_ms={timeout_ms}"
            ) from None
        finally:
            del self._pending[opaque]

    async def send_oneway(
        self, command: RemotingCommand, timeout_ms: int = ONEWAY_TIMEOUT_MS_DEFAULT
    ) -> None:
        """Send `command` as a oneway request (no response will come).

        Waits at most `timeout_ms` for room in the write buffer, so a peer that stopped reading
        cannot make us queue without bound: raises RemotingTimeoutError then, and
        RemotingConnectionClosedError if the connection is closed.
        """
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await self._wait_writable()
        except TimeoutError:
            raise RemotingTimeoutError(
                f"oneway code={command.code} to {self._peer}: write buffer still above "
                f"{self._limits.write_buffer_high_bytes} bytes after timeout_ms={timeout_ms}"
            ) from None
        flag = (command.flag | ONEWAY_FLAG) & ~RESPONSE_FLAG
        self._write_command(_with_opaque(command, self._take_opaque(), flag))

    def close(self) -> None:
        """Close gracefully: what is already written is flushed first."""
        if self._transport is not None and not self._closing:
            self._closing = True
            self._flush()
            self._transport.close()

    def abort(self, reason: str) -> None:
        """Close at once, dropping unsent bytes (also after `close()` when the peer does not
        read); logs one WARNING with `reason`."""
        if self._transport is not None and not self._closed.done():
            log.warning("closing remoting connection peer=%s reason=%s", self._peer, reason)
            self._closing = True
            self._transport.abort()

    def _take_opaque(self) -> int:
        opaque = (self._last_opaque + 1) & _OPAQUE_MASK
        while opaque in self._pending:
            opaque = (opaque + 1) & _OPAQUE_MASK
        self._last_opaque = opaque
        return opaque

    async def _wait_writable(self) -> None:
        while not self._can_write.is_set():
            await self._can_write.wait()
        if self._closing:
            raise RemotingConnectionClosedError(f"connection to {self._peer} is closed")

    def _write_command(self, command: RemotingCommand) -> None:
        head = encode_head(command)
        self._out.append(head)
        self._out_bytes += len(head)
        if command.body:
            self._out.append(command.body)
            self._out_bytes += len(command.body)
        self._last_activity = self._loop.time()
        if self.write_buffer_bytes > self._limits.write_buffer_high_bytes:
            # Hand it to the transport now, so its high-water mark sees it and pauses us. What
            # the transport already holds counts too: responses coalescing here on top of a
            # transport just below its mark overshot it by up to the mark again (a flood test
            # saw 16 KiB past the bound of one write plus the handlers in flight).
            self._flush()
        elif not self._flush_scheduled:
            # One transport write per loop iteration instead of one per frame: several times
            # faster for pipelined small frames (ARCHITECTURE.md, measured figures).
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        self._out_bytes = 0
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.writelines(out)

    # -- asyncio.Protocol callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._peer = _peer_name(transport)
        self._decoder = FrameDecoder(frame_bytes_max=self._limits.frame_bytes_max, peer=self._peer)
        self._transport.set_write_buffer_limits(
            high=self._limits.write_buffer_high_bytes, low=self._limits.write_buffer_low_bytes
        )
        if self._owner is not None and not self._owner.connection_opened(self):
            self.abort("connections_max reached")
            return
        if self._pause:
            # uvloop starts reading right after connection_made returns, undoing a pause made
            # in it (asyncio does not): pause again once that has happened.
            self._loop.call_soon(self._pause_reading_again)
        if self._limits.idle_timeout_ms is not None:
            self._idle_timer = self._loop.call_later(
                self._limits.idle_timeout_ms / 1000, self._on_idle_check
            )

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._can_write.set()  # wake writers: they see the close
        for timer in (self._frame_timer, self._idle_timer):
            if timer is not None:
                timer.cancel()
        for opaque, response in self._pending.items():
            if not response.done():
                response.set_exception(
                    RemotingConnectionClosedError(
                        f"connection to {self._peer} closed before the response to opaque="
                        f"{opaque} ({exc or 'closed'})"
                    )
                )
        self._charge(-self._charged_buffer)
        self._charged_buffer = 0
        if self._owner is not None:
            self._owner.connection_closed(self)
        if not self._closed.done():
            self._closed.set_result(None)
        log.debug("remoting connection closed peer=%s error=%s", self._peer, exc)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._pause:
            self._pause_reading_again()  # a read that raced our pause; stop the next one
        self._last_activity = self._loop.time()
        try:
            self._decoder.feed(data)
        except RemotingProtocolError as err:
            self.abort(str(err))
            return
        self._charge(len(data))
        self._charged_buffer += len(data)
        self._pump()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def pause_writing(self) -> None:
        self._can_write.clear()
        self._set_paused(_PAUSE_WRITE_BUFFER, paused=True)

    def resume_writing(self) -> None:
        self._can_write.set()
        self._set_paused(_PAUSE_WRITE_BUFFER, paused=False)

    # -- reading ---------------------------------------------------------------------------

    def set_budget_paused(self, *, paused: bool) -> None:
        """Pause or resume reading for the owner's global byte budget."""
        self._set_paused(_PAUSE_BUDGET, paused=paused)

    def stop_reading(self) -> None:
        """Take no new requests (first step of a graceful close); responses still go out."""
        self._set_paused(_PAUSE_STOPPED, paused=True)

    def _set_paused(self, reason: int, *, paused: bool) -> None:
        before = self._pause
        self._pause = before | reason if paused else before & ~reason
        if self._transport is None or self._closing:
            return
        if self._pause and not before:
            self._transport.pause_reading()
        elif before and not self._pause:
            self._transport.resume_reading()
        if not paused and before & _STOPS_DISPATCH and not self._pause & _STOPS_DISPATCH:
            self._pump()  # frames that arrived before the pause are still buffered

    def _pause_reading_again(self) -> None:
        if self._pause and self._transport is not None and not self._closing:
            self._transport.pause_reading()

    def _charge(self, delta: int) -> None:
        if self._owner is not None and delta:
            self._owner.charge_in_flight_bytes(delta)

    def _pump(self) -> None:
        """Hand every complete buffered frame on, unless dispatch is paused."""
        while not self._closing and not self._pause & _STOPS_DISPATCH:
            buffered_before = self._decoder.buffered_bytes
            try:
                command = self._decoder.next_command()
            except RemotingProtocolError as err:
                self.abort(str(err))
                return
            if command is None:
                break
            frame_bytes = buffered_before - self._decoder.buffered_bytes
            self._charged_buffer -= frame_bytes
            if command.is_response:
                self._charge(-frame_bytes)
                self._complete(command)
            else:
                self._dispatch(command, frame_bytes)  # its charge moves to the request
        self._track_partial_frame()

    def _complete(self, response: RemotingCommand) -> None:
        waiter = self._pending.get(response.opaque)
        if waiter is None or waiter.done():
            log.debug(
                "response without a waiting invoke peer=%s opaque=%d code=%d (timed out?)",
                self._peer,
                response.opaque,
                response.code,
            )
            return
        waiter.set_result(response)

    def _dispatch(self, request: RemotingCommand, frame_bytes: int) -> None:
        self._requests_in_flight += 1
        if self._requests_in_flight >= self._limits.requests_in_flight_max:
            self._set_paused(_PAUSE_REQUESTS, paused=True)
        self._tasks.spawn(self._handle(request, frame_bytes))

    async def _handle(self, request: RemotingCommand, frame_bytes: int) -> None:
        try:
            response = await self._answer(request)
            if response is not None and not request.is_oneway and not self._closing:
                self._respond(request, response)
        finally:
            self._requests_in_flight -= 1
            self._charge(-frame_bytes)
            if self._requests_in_flight < self._limits.requests_in_flight_max:
                self._set_paused(_PAUSE_REQUESTS, paused=False)

    async def _answer(self, request: RemotingCommand) -> RemotingCommand | None:
        try:
            return await self._handler(self, request)
        except RemotingCommandError as err:
            log.warning(
                "bad request peer=%s code=%d opaque=%d error=%s",
                self._peer,
                request.code,
                request.opaque,
                err,
            )
            return system_error(request, str(err))
        except Exception as err:
            log.exception(
                "request handler failed peer=%s code=%d opaque=%d",
                self._peer,
                request.code,
                request.opaque,
            )
            return system_error(request, f"{type(err).__name__}: {err}")

    def _respond(self, request: RemotingCommand, response: RemotingCommand) -> None:
        if response.opaque != request.opaque or not response.is_response:
            response = _with_opaque(response, request.opaque, response.flag | RESPONSE_FLAG)
        try:
            self._write_command(response)
        except CommandEncodeError as err:
            log.exception("response cannot be encoded peer=%s code=%d", self._peer, request.code)
            self._write_command(system_error(request, str(err)))

    # -- deadlines -------------------------------------------------------------------------

    def _track_partial_frame(self) -> None:
        """Start the frame-read clock when a new frame begins; stop it when none is pending."""
        timeout_ms = self._limits.frame_read_timeout_ms
        if timeout_ms is None:
            return
        if self._decoder.buffered_bytes == 0:
            self._partial_since = None
            return
        if self._partial_since is None or self._partial_frame_seq != self._decoder.frames_decoded:
            self._partial_since = self._loop.time()
            self._partial_frame_seq = self._decoder.frames_decoded
            if self._frame_timer is None:
                self._frame_timer = self._loop.call_at(
                    self._partial_since + timeout_ms / 1000, self._on_frame_deadline
                )

    def _on_frame_deadline(self) -> None:
        self._frame_timer = None
        timeout_ms = self._limits.frame_read_timeout_ms
        if self._closing or self._partial_since is None or timeout_ms is None:
            return
        now = self._loop.time()
        deadline = self._partial_since + timeout_ms / 1000
        if now < deadline:
            self._frame_timer = self._loop.call_at(deadline, self._on_frame_deadline)
        elif self._pause & _STOPS_DISPATCH:
            # We stopped reading, not the peer: its frame may be complete in the kernel.
            self._partial_since = now
            self._frame_timer = self._loop.call_at(now + timeout_ms / 1000, self._on_frame_deadline)
        else:
            self.abort(
                f"frame incomplete after frame_read_timeout_ms={timeout_ms} "
                f"({self._decoder.buffered_bytes} bytes buffered)"
            )

    def _on_idle_check(self) -> None:
        self._idle_timer = None
        timeout_ms = self._limits.idle_timeout_ms
        if self._closing or timeout_ms is None:
            return
        now = self._loop.time()
        if self._requests_in_flight or self._pending:
            next_check = now + timeout_ms / 1000  # work in progress is not idleness
        elif now - self._last_activity >= timeout_ms / 1000:
            self.abort(f"idle for idle_timeout_ms={timeout_ms}")
            return
        else:
            next_check = self._last_activity + timeout_ms / 1000
        self._idle_timer = self._loop.call_at(next_check, self._on_idle_check)
