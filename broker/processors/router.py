"""Hands each request to the processor of its code; unknown codes get REQUEST_CODE_NOT_SUPPORTED.

The router is the `RequestHandler` of the broker's `RemotingServer`. It also times every request
into `rocketmq_rpc_latency` (pulls that were held count as long polling). A processor raising a
`RemotingCommandError` (a missing or unparsable header field, a bad body) is answered by the
connection with SYSTEM_ERROR and the error as remark, as Java ends up answering.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping

from broker.metrics import RESULT_ONEWAY, RESULT_PROCESS_REQUEST_FAILED, BrokerMetrics
from remoting.codes import RequestCode
from remoting.command import RemotingCommand, request_code_not_supported
from remoting.connection import RemotingConnection

Processor = Callable[[RemotingConnection, RemotingCommand], Awaitable[RemotingCommand]]
_LONG_POLLING_THRESHOLD_MS = 1_000


class Router:
    """`handle(connection, request)`: dispatch by request code."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics
        self._processors: dict[int, Processor] = {}

    def register(self, codes: Mapping[int, Processor]) -> None:
        self._processors.update(codes)

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(self._processors)

    async def handle(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        processor = self._processors.get(request.code)
        if processor is None:
            return request_code_not_supported(request)
        started = time.monotonic()
        try:
            response = await processor(connection, request)
        except Exception:
            self._record(request, None, started, RESULT_PROCESS_REQUEST_FAILED)
            raise
        self._record(request, response.code, started,
                     RESULT_ONEWAY if request.is_oneway else "success")
        return response

    def _record(self, request: RemotingCommand, code: int | None, started: float,
                result: str) -> None:
        elapsed_ms = (time.monotonic() - started) * 1000
        long_polling = request.code == RequestCode.PULL_MESSAGE and \
            elapsed_ms >= _LONG_POLLING_THRESHOLD_MS
        self._metrics.rpc(request.code, code, elapsed_ms, long_polling=long_polling,
                          result=result)
