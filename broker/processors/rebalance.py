"""Orderly-consumption locks: LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) (docs/remoting-protocol.md
§6.11), the shell around `broker.rebalance_lock.RebalanceLockManager`.

Both bodies are `LockBatchRequestBody`; the lock answer's body is `LockBatchResponseBody` with
the queues the client now holds, the unlock answer has none. Like a Java broker without
`lockInStrictMode` (the default), only this broker's table is consulted, whatever
`onlyThisBroker` says.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from broker.rebalance_lock import RebalanceLockManager
from remoting.bodies import LockBatchRequestBody, LockBatchResponseBody, MessageQueue
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection

log = logging.getLogger(__name__)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class RebalanceProcessor:
    """LOCK_BATCH_MQ and UNLOCK_BATCH_MQ against one lock table."""

    def __init__(
        self,
        *,
        locks: RebalanceLockManager[MessageQueue],
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self._locks = locks
        self._wall_ms = wall_ms

    async def lock_batch_mq(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        body = LockBatchRequestBody.decode(request.body or b"")
        outcome = self._locks.try_lock_batch(
            body.consumer_group, body.mq_set, body.client_id, now_ms=self._wall_ms()
        )
        for mq, old_client_id in outcome.taken_over:
            log.warning("lock of an expired queue taken over group=%s mq=%s old_client_id=%s "
                        "client_id=%s", body.consumer_group, mq, old_client_id, body.client_id)
        if outcome.held_by_others and log.isEnabledFor(logging.DEBUG):
            log.debug("queues locked by other clients group=%s client_id=%s held=%s",
                      body.consumer_group, body.client_id, outcome.held_by_others)
        answer = LockBatchResponseBody(lock_ok_mq_set=outcome.locked)
        return request.make_response(ResponseCode.SUCCESS, body=answer.encode())

    async def unlock_batch_mq(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        body = LockBatchRequestBody.decode(request.body or b"")
        self._locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.make_response(ResponseCode.SUCCESS)
