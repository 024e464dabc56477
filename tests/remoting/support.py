"""Helpers for the remoting tests: hex dumps from the spec, polling with a deadline, raw sockets."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from enum import IntEnum

from remoting.client import RemotingClient
from remoting.codec import FrameDecoder
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request_code_not_supported
from remoting.connection import RemotingConnection, RequestHandler, not_supported_handler
from remoting.headers import GetMaxOffsetRequestHeader, NotifyConsumerIdsChangedRequestHeader
from remoting.server import RemotingServer, ServerLimits


def hexdump(text: str) -> bytes:
    """Bytes of a spec hex dump: `0010: 07 00 ...` rows (offset prefixes dropped) or bare hex."""
    rows = (line.split(":", 1)[-1] for line in text.strip().splitlines())
    return bytes.fromhex(" ".join(rows))


def compact_json(text: str) -> bytes:
    """A JSON example from the spec, wrapped over lines there, joined without the line breaks."""
    return re.sub(r"\n\s*", "", text.strip()).encode()


async def wait_until(
    predicate: Callable[[], bool], *, timeout_s: float, what: str, interval_s: float = 0.01
) -> None:
    """Poll `predicate` until it holds; fail with `what` after `timeout_s` (no fixed sleeps)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for: {what}")
        await asyncio.sleep(interval_s)


class RawPeer:
    """A plain TCP peer for hostile-client tests: writes any bytes, reads frames back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()

    @classmethod
    async def connect(cls, address: tuple[str, int]) -> RawPeer:
        reader, writer = await asyncio.open_connection(*address)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_command(self, *, timeout_s: float = 5.0) -> RemotingCommand:
        """The next frame from the server; fails on EOF or after `timeout_s`."""
        async with asyncio.timeout(timeout_s):
            while (command := self.decoder.next_command()) is None:
                data = await self.reader.read(65536)
                assert data, "server closed the connection"
                self.decoder.feed(data)
        return command

    async def closed_by_server(self, *, timeout_s: float) -> bool:
        """True once the server closes (EOF or reset) within `timeout_s`; False if it stays open."""
        try:
            async with asyncio.timeout(timeout_s):
                while await self.reader.read(65536):
                    pass
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        return True

    async def close(self) -> None:
        self.writer.close()
        with suppress(ConnectionError):
            await self.writer.wait_closed()


class AppCode(IntEnum):
    """Request codes of the test application (not RocketMQ codes)."""

    ECHO = 9001  # answer with the request's ext fields and body
    FAIL = 9002  # raise from the handler
    BAD_HEADER = 9003  # decode a GetMaxOffsetRequestHeader from the ext fields
    BIG_RESPONSE = 9004  # answer with BIG_RESPONSE_BYTES of body
    HOLD = 9005  # answer once `App.release` is set
    PUSH_NOTIFY = 9006  # push NOTIFY_CONSUMER_IDS_CHANGED to the client, then answer
    INVOKE_CLIENT = 9007  # invoke GET_CONSUMER_RUNNING_INFO on the client, answer its remark


BIG_RESPONSE_BYTES = 64 * 1024


class App:
    """A server handler with observable behaviour, one code per behaviour."""

    def __init__(self) -> None:
        self.handled: list[RemotingCommand] = []
        self.release = asyncio.Event()

    async def handle(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        self.handled.append(request)
        match request.code:
            case AppCode.ECHO:
                return request.make_response(
                    ResponseCode.SUCCESS, ext_fields=request.ext_fields, body=request.body
                )
            case AppCode.FAIL:
                raise RuntimeError("handler exploded")
            case AppCode.BAD_HEADER:
                GetMaxOffsetRequestHeader.from_ext_fields(request.ext_fields)
                return request.make_response(ResponseCode.SUCCESS)
            case AppCode.BIG_RESPONSE:
                return request.make_response(ResponseCode.SUCCESS, body=bytes(BIG_RESPONSE_BYTES))
            case AppCode.HOLD:
                await self.release.wait()
                return request.make_response(ResponseCode.SUCCESS, remark=request.remark)
            case AppCode.PUSH_NOTIFY:
                notify = NotifyConsumerIdsChangedRequestHeader(consumer_group="CG")
                await connection.send_oneway(
                    RemotingCommand.request(
                        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, notify.to_ext_fields()
                    )
                )
                return request.make_response(ResponseCode.SUCCESS)
            case AppCode.INVOKE_CLIENT:
                answer = await connection.invoke(
                    RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO), 2000
                )
                return request.make_response(ResponseCode.SUCCESS, remark=answer.remark)
        return request_code_not_supported(request)

    def count(self, code: int) -> int:
        return sum(1 for request in self.handled if request.code == code)


@asynccontextmanager
async def serving(app: App, **limits: int) -> AsyncIterator[RemotingServer]:
    """A started server on 127.0.0.1 with test-sized `limits`; closed on exit."""
    server = RemotingServer(app.handle, limits=ServerLimits(**{"close_timeout_ms": 500, **limits}))
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        app.release.set()
        await server.close()


def rss_bytes() -> int:
    """Resident set size of this process (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@asynccontextmanager
async def serving_with_client(
    app: App, *, handler: RequestHandler = not_supported_handler, **limits: int
) -> AsyncIterator[tuple[RemotingServer, RemotingClient]]:
    """`serving(app, **limits)` plus a client connected to it (`handler` answers pushes)."""
    async with serving(app, **limits) as server:
        client = await RemotingClient.connect(*server.address, handler=handler)
        try:
            yield server, client
        finally:
            await client.close()
