"""ClusterClient's send retries, against a scripted peer that is both name server and broker
(a real broker cannot be made to answer SYSTEM_BUSY or to drop an answer on cue): a send is
retried only when the answer says nothing was stored, never after a timeout."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from pyrmq_client import BrokerClientError, ClusterClient, Message, RetriesExhaustedError
from remoting.bodies import PERM_READ, PERM_WRITE, BrokerData, QueueData, TopicRouteData
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.errors import RemotingTimeoutError
from remoting.server import RemotingServer, ServerLimits

pytestmark = pytest.mark.timeout(30)


class ScriptedPeer:
    """Routes topic T to itself (one queue) and answers sends with `answers` in turn: a response
    code, or None for no answer at all."""

    def __init__(self, answers: list[int | None]) -> None:
        self.answers = answers
        self.sends = 0
        self.server = RemotingServer(self.handle, limits=ServerLimits(close_timeout_ms=200),
                                     name="scripted")

    @property
    def addr(self) -> str:
        host, port = self.server.address
        return f"{host}:{port}"

    async def handle(self, connection: RemotingConnection,
                     request: RemotingCommand) -> RemotingCommand | None:
        if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            route = TopicRouteData(
                queue_datas=(QueueData("fake", 1, 1, PERM_READ | PERM_WRITE),),
                broker_datas=(BrokerData("C", "fake", {0: self.addr}),))
            return request.make_response(ResponseCode.SUCCESS, body=route.encode())
        self.sends += 1
        code = self.answers[min(self.sends, len(self.answers)) - 1]
        if code is None:
            return None
        fields = {"msgId": "00", "queueId": "0", "queueOffset": str(self.sends)}
        return request.make_response(code, remark="scripted", ext_fields=fields)


@asynccontextmanager
async def scripted(answers: list[int | None]) -> AsyncIterator[ScriptedPeer]:
    peer = ScriptedPeer(answers)
    await peer.server.start("127.0.0.1", 0)
    try:
        yield peer
    finally:
        await peer.server.close()


@pytest.mark.parametrize(("answers", "sends", "stored"), [
    ([ResponseCode.SUCCESS], 1, True),
    ([ResponseCode.SYSTEM_BUSY, ResponseCode.SUCCESS], 2, True),
    ([ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.NO_PERMISSION, ResponseCode.SUCCESS], 3,
     True),
    ([ResponseCode.SYSTEM_BUSY] * 5, 3, False),  # 1 + send_retries=2, then reported
    ([ResponseCode.FLUSH_DISK_TIMEOUT], 1, True),  # stored, not confirmed: never sent again
])
async def test_sends_are_retried_only_when_nothing_was_stored(
    answers: list[int | None], sends: int, stored: bool
) -> None:
    async with scripted(answers) as peer, ClusterClient(peer.addr) as client:
        if stored:
            _, result = await client.send(Message("T", b"x"), producer_group="PG")
            assert result.code == answers[sends - 1]
        else:
            with pytest.raises(RetriesExhaustedError, match="nothing stored"):
                await client.send(Message("T", b"x"), producer_group="PG")
        assert peer.sends == sends


async def test_other_refusals_are_not_retried() -> None:
    async with scripted([ResponseCode.MESSAGE_ILLEGAL]) as peer, \
            ClusterClient(peer.addr) as client:
        with pytest.raises(BrokerClientError) as caught:
            await client.send(Message("T", b"x"), producer_group="PG")
        assert caught.value.code == ResponseCode.MESSAGE_ILLEGAL
        assert peer.sends == 1


async def test_a_send_without_an_answer_is_not_retried() -> None:
    async with scripted([None]) as peer, ClusterClient(peer.addr, timeout_ms=300) as client:
        with pytest.raises(RemotingTimeoutError):
            await client.send(Message("T", b"x"), producer_group="PG")
        assert peer.sends == 1
