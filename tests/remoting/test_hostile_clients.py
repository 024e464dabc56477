"""Hostile clients against a real server on loopback (docs/reliability.md §8, R1-R6), test-sized.

Every test has a deadline, polls conditions instead of sleeping, and checks that a healthy
client keeps getting answers where the table asks for it.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import pytest

from remoting.client import RemotingClient
from remoting.codec import FRAME_BYTES_MAX, FRAME_PREFIX, encode
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.server import RemotingServer
from tests.remoting.support import (
    BIG_RESPONSE_BYTES,
    App,
    AppCode,
    RawPeer,
    rss_bytes,
    serving,
    serving_with_client,
    wait_until,
)

pytestmark = pytest.mark.timeout(30)

_MIB = 1024 * 1024


async def assert_answers(client: RemotingClient) -> float:
    """One ECHO round trip; returns its latency in seconds."""
    started = time.perf_counter()
    response = await client.invoke(RemotingCommand.request(AppCode.ECHO, body=b"ping"), 2000)
    assert (response.code, response.body) == (ResponseCode.SUCCESS, b"ping")
    return time.perf_counter() - started


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param(FRAME_PREFIX.pack(FRAME_BYTES_MAX - 3, 100), id="16MiB-plus-1"),
        pytest.param(FRAME_PREFIX.pack(2**31 - 1, 100), id="int-max"),
        pytest.param(FRAME_PREFIX.pack(-1, 0), id="negative"),
        pytest.param(FRAME_PREFIX.pack(3, 0), id="below-4"),
        pytest.param(FRAME_PREFIX.pack(20, 30), id="header-longer-than-frame"),
        pytest.param(FRAME_PREFIX.pack(20, (9 << 24) | 4), id="serialize-type-9"),
    ],
)
async def test_r1_invalid_length_prefix_closes_at_once_without_allocating(prefix: bytes) -> None:
    app = App()
    async with serving_with_client(app) as (server, healthy):
        hostile = await RawPeer.connect(server.address)
        await hostile.send(prefix)
        assert await hostile.closed_by_server(timeout_s=2)
        await assert_answers(healthy)
        await wait_until(lambda: len(server.connections) == 1, timeout_s=2, what="dropped")
        assert server.in_flight_bytes_peak < 64 * 1024
        assert server.in_flight_bytes == 0


async def dribble(peer: RawPeer, frame: bytes, interval_s: float) -> float:
    """Send `frame` one byte per `interval_s` until the server closes; return when it did."""
    for byte in frame:
        try:
            await peer.send(bytes([byte]))
        except ConnectionError:
            break
        try:
            async with asyncio.timeout(interval_s):
                if not await peer.reader.read(1):
                    break
        except TimeoutError:
            continue
        except ConnectionError:
            break
    return time.monotonic()


async def test_r2_slowloris_connections_are_closed_after_the_frame_read_deadline() -> None:
    app = App()
    deadline_ms = 1000
    async with serving_with_client(app, frame_read_timeout_ms=deadline_ms) as (server, healthy):
        frame = encode(RemotingCommand(code=AppCode.ECHO, body=b"x" * 100))
        peers = [await RawPeer.connect(server.address) for _ in range(50)]
        started = time.monotonic()
        async with asyncio.TaskGroup() as attack:
            dribblers = [attack.create_task(dribble(peer, frame, 0.2)) for peer in peers]
            latencies = []
            while not all(task.done() for task in dribblers):
                latencies.append(await assert_answers(healthy))
                assert time.monotonic() - started < 10, "slowloris peers were never closed"
        closed_after = [task.result() - started for task in dribblers]
        assert min(closed_after) >= deadline_ms / 1000 * 0.9
        assert max(closed_after) < deadline_ms / 1000 + 2
        assert max(latencies) < 0.5
        assert app.count(AppCode.ECHO) == len(latencies)  # no dribbled frame completed
        await wait_until(lambda: len(server.connections) == 1, timeout_s=2, what="closed")
        for peer in peers:
            await peer.close()


async def closed_at(peer: RawPeer, *, timeout_s: float) -> float:
    """When the server closed `peer` (monotonic seconds); fails if it stays open `timeout_s`."""
    assert await peer.closed_by_server(timeout_s=timeout_s), "the server kept it open"
    return time.monotonic()


async def test_r3_idle_connections_are_closed_and_active_ones_are_not() -> None:
    app = App()
    idle_s = 0.5
    async with serving_with_client(app, idle_timeout_ms=int(idle_s * 1000)) as (server, active):
        silent_since = time.monotonic()  # the server's last activity on it is later than this
        silent = await RawPeer.connect(server.address)
        finished = await RawPeer.connect(server.address)
        finished_since = time.monotonic()
        await finished.send(encode(RemotingCommand(code=AppCode.ECHO, opaque=1)))
        assert (await finished.read_command()).opaque == 1
        closes = [
            asyncio.create_task(closed_at(silent, timeout_s=3)),
            asyncio.create_task(closed_at(finished, timeout_s=3)),
        ]
        while not all(close.done() for close in closes):
            await assert_answers(active)  # keeps `active` busy well inside idle_s
            await asyncio.wait(closes, timeout=0.1)
        silent_closed, finished_closed = (close.result() for close in closes)
        assert silent_closed - silent_since >= idle_s * 0.9
        assert finished_closed - finished_since >= idle_s * 0.9
        await assert_answers(active)
        assert not active.is_closed
        await silent.close()
        await finished.close()


async def fill_then_stall(address: tuple[str, int], payload: memoryview) -> None:
    """Declare a 16 MiB frame, send `payload` of it as fast as the server reads, then stall
    until the server closes the connection."""
    sock = socket.socket()
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_connect(sock, address)
        await loop.sock_sendall(sock, FRAME_PREFIX.pack(FRAME_BYTES_MAX - 4, 100))
        await loop.sock_sendall(sock, payload)
        while await loop.sock_recv(sock, 1024):
            pass
    except ConnectionError:
        pass
    finally:
        sock.close()


async def sample_until(
    done: Callable[[], bool], sample: Callable[[], None], timeout_s: float
) -> None:
    """Call `sample` every 10 ms until `done()`, failing after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not done():
        sample()
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_r4_many_big_declared_frames_stay_within_the_global_budget() -> None:
    app = App()
    budget = 16 * _MIB
    attackers = 12
    payload = memoryview(bytes(6 * _MIB))  # one shared buffer: the senders hold no copies
    rss_before = rss_bytes()
    rss_peak = rss_before
    async with serving(app, in_flight_bytes_max=budget, frame_read_timeout_ms=1000) as server:

        def sample() -> None:
            nonlocal rss_peak
            rss_peak = max(rss_peak, rss_bytes())

        async with asyncio.TaskGroup() as attack:
            tasks = [
                attack.create_task(fill_then_stall(server.address, payload))
                for _ in range(attackers)
            ]
            await wait_until(lambda: server.budget_paused, timeout_s=5, what="budget spent")
            await sample_until(lambda: all(task.done() for task in tasks), sample, timeout_s=20)
        # Over budget by at most one read chunk per connection (uvloop reads 256 KiB at most).
        assert budget < server.in_flight_bytes_peak <= budget + attackers * 256 * 1024
        assert rss_peak - rss_before < 64 * _MIB  # unbounded, it would be 12 x 6 MiB = 72 MiB
        await wait_until(lambda: server.in_flight_bytes == 0, timeout_s=2, what="budget freed")
        assert not server.budget_paused
        async with await RemotingClient.connect(*server.address) as healthy:
            await assert_answers(healthy)


async def flood_without_reading(address: tuple[str, int], requests: int) -> socket.socket:
    """Pipeline `requests` BIG_RESPONSE requests on a socket with a tiny receive buffer, and
    never read a byte back."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, address)
    frames = b"".join(
        encode(RemotingCommand(code=AppCode.BIG_RESPONSE, opaque=opaque))
        for opaque in range(requests)
    )
    sending = asyncio.ensure_future(loop.sock_sendall(sock, frames))
    try:
        async with asyncio.timeout(0.5):
            await asyncio.shield(sending)
    except TimeoutError:
        sending.cancel()  # the server stopped reading: our send buffer is full, which is the point
    return sock


async def test_r5_pipelined_flood_without_reading_pauses_that_connection_only() -> None:
    app = App()
    high = 256 * 1024
    in_flight_max = 16
    requests = 2000  # 2000 x 64 KiB = 125 MiB of responses if nothing pushed back
    rss_before = rss_bytes()
    async with serving_with_client(
        app,
        write_buffer_high_bytes=high,
        write_buffer_low_bytes=64 * 1024,
        requests_in_flight_per_connection_max=in_flight_max,
    ) as (server, healthy):
        flood = await flood_without_reading(server.address, requests)
        try:
            flooded = await wait_for_flooded_connection(server, healthy)
            await wait_until(
                lambda: flooded.requests_in_flight == 0, timeout_s=5, what="handlers done"
            )
            assert flooded.reading_paused
            # The write that crossed the mark, plus the responses of handlers running then.
            response_bytes = BIG_RESPONSE_BYTES + 1024
            assert flooded.write_buffer_bytes <= high + (1 + in_flight_max) * response_bytes
            assert app.count(AppCode.BIG_RESPONSE) < requests / 4
            assert rss_bytes() - rss_before < 64 * _MIB
            await assert_answers(healthy)  # the flood stalls only its own connection
        finally:
            flood.close()


async def wait_for_flooded_connection(
    server: RemotingServer, healthy: RemotingClient
) -> RemotingConnection:
    await wait_until(
        lambda: any(each.reading_paused for each in server.connections),
        timeout_s=5,
        what="server stops reading the flooding connection",
    )
    (flooded,) = [each for each in server.connections if each.reading_paused]
    assert healthy.peer != flooded.peer
    return flooded


async def test_r6_connections_past_the_cap_are_accepted_then_closed() -> None:
    app = App()
    async with serving(app, connections_max=5) as server:
        clients = [await RemotingClient.connect(*server.address) for _ in range(5)]
        for client in clients:
            await assert_answers(client)
        extra = await RawPeer.connect(server.address)
        assert await extra.closed_by_server(timeout_s=2)
        assert server.connections_refused == 1
        for client in clients:
            await assert_answers(client)
        await clients.pop().close()
        await wait_until(lambda: len(server.connections) == 4, timeout_s=2, what="one left")
        async with await RemotingClient.connect(*server.address) as replacement:
            await assert_answers(replacement)
        for client in clients:
            await client.close()
        await extra.close()
