"""Server and client on real loopback TCP: answers, oneway, errors, pushes, timeouts (P4, P6)."""

from __future__ import annotations

import asyncio
import select
import socket
import time
from pathlib import Path

import pytest

from remoting.client import ClientLimits, RemotingClient
from remoting.codec import encode
from remoting.codes import (
    ONEWAY_FLAG,
    PYRMQ_VERSION,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.errors import (
    RemotingConnectError,
    RemotingConnectionClosedError,
    RemotingTimeoutError,
    RemotingTooManyRequestsError,
)
from remoting.headers import NotifyConsumerIdsChangedRequestHeader
from remoting.server import ServerLimits
from tests.remoting.support import App, AppCode, RawPeer, serving, serving_with_client, wait_until

pytestmark = pytest.mark.timeout(20)


async def test_response_echoes_opaque_and_sets_the_response_flag() -> None:
    app = App()
    async with serving(app) as server:
        peer = await RawPeer.connect(server.address)
        request = RemotingCommand(code=AppCode.ECHO, opaque=77, ext_fields={"k": "v"}, body=b"hi")
        await peer.send(encode(request))
        response = await peer.read_command()
        assert (response.opaque, response.flag, response.code) == (77, 1, ResponseCode.SUCCESS)
        assert (response.language, response.version) == (LanguageCode.JAVA, PYRMQ_VERSION)
        assert (response.ext_fields, response.body) == ({"k": "v"}, b"hi")
        assert response.serialize_type == SerializeType.JSON
        await peer.close()


async def test_response_uses_the_serialize_type_of_the_request() -> None:
    app = App()
    async with serving(app) as server:
        peer = await RawPeer.connect(server.address)
        request = RemotingCommand(
            code=AppCode.ECHO, opaque=5, serialize_type=SerializeType.ROCKETMQ
        )
        await peer.send(encode(request))
        response = await peer.read_command()
        assert (response.opaque, response.serialize_type) == (5, SerializeType.ROCKETMQ)
        await peer.close()


async def test_oneway_request_gets_no_response() -> None:
    app = App()
    async with serving(app) as server:
        peer = await RawPeer.connect(server.address)
        await peer.send(encode(RemotingCommand(code=AppCode.ECHO, opaque=1, flag=ONEWAY_FLAG)))
        await wait_until(lambda: app.count(AppCode.ECHO) == 1, timeout_s=5, what="oneway handled")
        await peer.send(encode(RemotingCommand(code=AppCode.ECHO, opaque=2)))
        assert (await peer.read_command()).opaque == 2  # nothing was sent for opaque 1
        await peer.send(encode(RemotingCommand(code=AppCode.FAIL, opaque=3, flag=ONEWAY_FLAG)))
        await peer.send(encode(RemotingCommand(code=999, opaque=4, flag=ONEWAY_FLAG)))
        await peer.send(encode(RemotingCommand(code=AppCode.ECHO, opaque=5)))
        assert (await peer.read_command()).opaque == 5  # not even errors answer a oneway
        await peer.close()


async def test_unknown_code_gets_request_code_not_supported() -> None:
    app = App()
    async with serving_with_client(app) as (_, client):
        response = await client.invoke(RemotingCommand.request(999), 2000)
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 999 not supported"


async def test_handler_exception_answers_system_error_and_keeps_the_connection() -> None:
    app = App()
    async with serving_with_client(app) as (_, client):
        failed = await client.invoke(RemotingCommand.request(AppCode.FAIL), 2000)
        assert failed.code == ResponseCode.SYSTEM_ERROR
        assert failed.remark == "RuntimeError: handler exploded"
        echoed = await client.invoke(RemotingCommand.request(AppCode.ECHO), 2000)
        assert echoed.code == ResponseCode.SUCCESS


async def test_bad_header_field_answers_system_error_naming_the_field() -> None:
    app = App()
    async with serving_with_client(app) as (_, client):
        request = RemotingCommand.request(AppCode.BAD_HEADER, {"topic": "T", "queueId": "x"})
        response = await client.invoke(request, 2000)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == (
        "GetMaxOffsetRequestHeader: field queueId='x' is not an int32 (-2147483648..2147483647)"
    )


async def test_pipelined_responses_are_matched_by_opaque_not_order() -> None:
    app = App()
    async with serving_with_client(app) as (_, client):
        held = [
            asyncio.create_task(
                client.invoke(RemotingCommand(code=AppCode.HOLD, remark=f"held-{index}"), 5000)
            )
            for index in range(3)
        ]
        await wait_until(lambda: app.count(AppCode.HOLD) == 3, timeout_s=5, what="3 held")
        quick = await client.invoke(RemotingCommand(code=AppCode.ECHO, body=b"quick"), 2000)
        assert quick.body == b"quick"
        app.release.set()
        remarks = [response.remark for response in await asyncio.gather(*held)]
    assert remarks == ["held-0", "held-1", "held-2"]


async def test_server_push_reaches_the_client_handler() -> None:
    app = App()
    pushed: list[RemotingCommand] = []

    async def on_request(
        connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        pushed.append(request)
        return request.make_response(ResponseCode.SUCCESS, remark="running")

    async with serving_with_client(app, handler=on_request) as (_, client):
        response = await client.invoke(RemotingCommand.request(AppCode.PUSH_NOTIFY), 2000)
        assert response.code == ResponseCode.SUCCESS
        await wait_until(lambda: len(pushed) == 1, timeout_s=5, what="push received")
        (notify,) = pushed
        assert notify.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
        assert notify.is_oneway
        header = NotifyConsumerIdsChangedRequestHeader.from_ext_fields(notify.ext_fields)
        assert header.consumer_group == "CG"

        answered = await client.invoke(RemotingCommand.request(AppCode.INVOKE_CLIENT), 2000)
        assert answered.remark == "running"  # server -> client invoke, answered by opaque


async def test_client_without_handler_answers_pushed_requests_not_supported() -> None:
    app = App()
    async with serving_with_client(app) as (_, client):
        response = await client.invoke(RemotingCommand.request(AppCode.INVOKE_CLIENT), 2000)
    assert response.remark == (
        f" request type {int(RequestCode.GET_CONSUMER_RUNNING_INFO)} not supported"
    )


async def test_invoke_times_out_with_a_typed_error_and_the_connection_stays_usable() -> None:
    app = App()
    async with serving_with_client(app) as (_, client):
        with pytest.raises(RemotingTimeoutError, match="no response within timeout_ms=100"):
            await client.invoke(RemotingCommand.request(AppCode.HOLD), 100)
        app.release.set()  # the late response is dropped, not matched to anything else
        response = await client.invoke(RemotingCommand.request(AppCode.ECHO), 2000)
        assert response.code == ResponseCode.SUCCESS


async def test_too_many_outstanding_invokes_raise_at_once() -> None:
    app = App()
    async with serving(app) as server:
        limits = ClientLimits(invokes_in_flight_max=2)
        async with await RemotingClient.connect(*server.address, limits=limits) as client:
            held = [
                asyncio.create_task(client.invoke(RemotingCommand.request(AppCode.HOLD), 5000))
                for _ in range(2)
            ]
            await wait_until(lambda: app.count(AppCode.HOLD) == 2, timeout_s=5, what="2 held")
            with pytest.raises(RemotingTooManyRequestsError, match="invokes_in_flight_max=2"):
                await client.invoke(RemotingCommand.request(AppCode.ECHO), 2000)
            app.release.set()
            await asyncio.gather(*held)


async def test_outstanding_invokes_fail_when_the_connection_closes() -> None:
    app = App()
    async with serving(app) as server:
        client = await RemotingClient.connect(*server.address)
        held = asyncio.create_task(client.invoke(RemotingCommand.request(AppCode.HOLD), 5000))
        await wait_until(lambda: app.count(AppCode.HOLD) == 1, timeout_s=5, what="held")
        for connection in server.connections:
            connection.abort("test closes it")
        with pytest.raises(RemotingConnectionClosedError):
            await held
        with pytest.raises(RemotingConnectionClosedError):
            await client.invoke(RemotingCommand.request(AppCode.ECHO), 2000)
        assert client.is_closed
        await client.close()


async def test_connect_to_a_closed_port_raises_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RemotingConnectError, match=f"127.0.0.1:{port}"):
        await RemotingClient.connect("127.0.0.1", port, connect_timeout_ms=2000)


async def test_large_bodies_travel_both_ways() -> None:
    app = App()
    body = bytes(range(256)) * (4 * 1024 * 1024 // 256)
    async with serving_with_client(app) as (_, client):
        response = await client.invoke(RemotingCommand.request(AppCode.ECHO, body=body), 5000)
    assert response.body == body


async def test_bad_frame_closes_only_its_own_connection() -> None:
    app = App()
    async with serving_with_client(app) as (server, healthy):
        bad = await RawPeer.connect(server.address)
        await bad.send(b"\x00\x00\x00\x10\x07\x00\x00\x00" + b"x" * 12)  # serialize type 7
        assert await bad.closed_by_server(timeout_s=5)
        response = await healthy.invoke(RemotingCommand.request(AppCode.ECHO), 2000)
        assert response.code == ResponseCode.SUCCESS
        assert not healthy.is_closed


async def test_close_finishes_within_close_timeout_despite_held_handlers() -> None:
    app = App()
    async with serving(app) as server:
        client = await RemotingClient.connect(*server.address)
        held = asyncio.create_task(client.invoke(RemotingCommand.request(AppCode.HOLD), 10_000))
        await wait_until(lambda: app.count(AppCode.HOLD) == 1, timeout_s=5, what="held")
        async with asyncio.timeout(3):
            await server.close()
        with pytest.raises(RemotingConnectionClosedError):
            await held
        await client.close()


async def test_close_lets_running_handlers_answer_before_closing_connections() -> None:
    app = App()
    async with serving(app) as server:
        client = await RemotingClient.connect(*server.address)
        held = asyncio.create_task(client.invoke(RemotingCommand.request(AppCode.HOLD), 5000))
        await wait_until(lambda: app.count(AppCode.HOLD) == 1, timeout_s=5, what="held")
        (connection,) = server.connections
        closing = asyncio.create_task(server.close())
        await wait_until(lambda: connection.reading_paused, timeout_s=5, what="stopped reading")
        app.release.set()
        assert (await held).code == ResponseCode.SUCCESS
        await closing
        await client.close()


async def test_requests_in_flight_cap_pauses_reading_until_handlers_finish() -> None:
    app = App()
    async with serving(app, requests_in_flight_per_connection_max=2) as server:
        peer = await RawPeer.connect(server.address)
        await peer.send(b"".join(encode(RemotingCommand(AppCode.HOLD, opaque=n)) for n in range(5)))
        await wait_until(lambda: app.count(AppCode.HOLD) == 2, timeout_s=5, what="2 dispatched")
        (connection,) = server.connections
        assert connection.reading_paused
        assert connection.requests_in_flight == 2
        app.release.set()
        opaques = {(await peer.read_command()).opaque for _ in range(5)}
        assert opaques == set(range(5))
        await wait_until(lambda: not connection.reading_paused, timeout_s=5, what="resumed")
        await peer.close()


def _handshakes_completed(address: tuple[str, int], count: int, wait_s: float) -> int:
    """Start `count` connections to `address` at once and wait up to `wait_s` (this thread
    blocked, so a server on it accepts none of them): how many the kernel completed."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(address)
            sockets.append(sock)
        pending = {sock.fileno(): sock for sock in sockets}
        poller = select.poll()  # (not select(): the suite may hold descriptors past 1024)
        for fd in pending:
            poller.register(fd, select.POLLOUT)
        done = 0
        deadline = time.monotonic() + wait_s
        while pending and (left := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(left * 1000):
                poller.unregister(fd)
                done += pending.pop(fd).getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        return done
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("backlog", [ServerLimits().backlog, 100])
async def test_connections_the_server_has_not_accepted_yet_queue_up_to_its_backlog(
    backlog: int,
) -> None:
    # RocketMQ's serverSocketBacklog (1024): a burst of connections (clients reconnecting after
    # a failover) while the loop is busy completes, instead of having SYNs dropped and retried
    # a second later as past asyncio's default of 100.
    assert ServerLimits().backlog == 1024
    burst = 600
    somaxconn = Path("/proc/sys/net/core/somaxconn")  # the kernel's cap on a backlog
    queued = min(backlog, int(somaxconn.read_text()))  # noqa: ASYNC240 - a /proc read
    async with serving(App(), backlog=backlog) as server:
        done = _handshakes_completed(server.address, burst, wait_s=0.5)
    assert min(burst, queued) <= done <= min(burst, queued + 1)  # Linux queues backlog + 1
