"""The Prometheus scrape endpoint: a minimal HTTP/1.0 server on `metricsPromExporterPort`.

A shell: one asyncio server; each connection sends one request (read within
`READ_TIMEOUT_MS`, at most `REQUEST_BYTES_MAX` bytes of head), gets the exposition text of
`render()` (any path and method but HEAD get the body), and is closed. Bounded on purpose: a
scrape endpoint must not become a way to hold the broker's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

READ_TIMEOUT_MS: Final = 5_000
REQUEST_BYTES_MAX: Final = 16 * 1024


class MetricsHttpServer:
    """Serves `render()` over HTTP; `start()`, then `close()`."""

    def __init__(self, render: Callable[[], bytes]) -> None:
        self._render = render
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("metrics server is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(
            self._serve, host or "0.0.0.0", port, limit=REQUEST_BYTES_MAX  # noqa: S104
        )
        log.info("metrics server listening address=%s:%d", *self.address)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_MS / 1000):
                head = await reader.readuntil(b"\r\n\r\n")
            method = head.split(b" ", 1)[0]
            body = self._render()
            writer.write(
                b"HTTP/1.0 200 OK\r\nContent-Type: " + CONTENT_TYPE_LATEST.encode()
                + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
            )
            if method != b"HEAD":
                writer.write(body)
            async with asyncio.timeout(READ_TIMEOUT_MS / 1000):
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError) as err:
            log.debug("metrics request dropped error=%s", err)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(READ_TIMEOUT_MS / 1000):
                    await writer.wait_closed()
