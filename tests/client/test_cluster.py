"""pyrmq_client.ClusterClient against a real name server and two broker groups: routing, queue
selection, retries only where nothing was stored, and reads that follow a broker to a new
address after a route refresh."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyrmq_client import (
    ClusterClient,
    Message,
    MessageQueue,
    PullStatus,
    RetriesExhaustedError,
    RouteError,
)
from tests.support.pyrmq_cluster import Cluster, two_broker_groups

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with two_broker_groups(tmp_path_factory.mktemp("cluster")) as running:
        for topic in ("Spread",):
            running.create_topic(topic, queues=4)
        yield running


async def read_all(client: ClusterClient, queue: MessageQueue) -> list[bytes]:
    bodies: list[bytes] = []
    offset = 0
    while True:
        pulled = await client.pull("CG", queue, offset, max_nums=32)
        if pulled.status is not PullStatus.FOUND:
            return bodies
        bodies += (record.body for record in pulled.messages)
        offset = pulled.next_begin_offset


async def test_sends_round_robin_over_both_groups_and_reads_back(cluster: Cluster) -> None:
    async with ClusterClient(cluster.namesrv_addr) as client:
        queues = await client.read_queues("Spread")
        assert sorted(queues) == [MessageQueue("Spread", name, i)
                                  for name in ("broker-a", "broker-b") for i in range(4)]
        used = Counter[MessageQueue]()
        for i in range(40):
            queue, result = await client.send(Message("Spread", f"m{i}".encode()),
                                              producer_group="PG")
            assert result.queue_id == queue.queue_id
            used[queue] += 1
        assert used == dict.fromkeys(queues, 5)
        queue, _ = await client.send_batch([Message("Spread", b"b1"), Message("Spread", b"b2")],
                                           producer_group="PG", queue=queues[0])
        assert queue == queues[0]
        bodies = [body for queue in queues for body in await read_all(client, queue)]
        assert sorted(bodies) == sorted([f"m{i}".encode() for i in range(40)] + [b"b1", b"b2"])
        assert [await client.max_offset(queue) for queue in queues] == [7] + [5] * 7


async def test_unreachable_name_server_is_an_error_naming_it() -> None:
    async with ClusterClient("127.0.0.1:1", timeout_ms=1_000) as client:
        with pytest.raises(RouteError, match=re.escape("127.0.0.1:1")):
            await client.read_queues("Any")


async def test_unknown_topic_is_a_route_error(cluster: Cluster) -> None:
    async with ClusterClient(cluster.namesrv_addr) as client:
        with pytest.raises(RouteError, match="NoSuchTopic"):
            await client.read_queues("NoSuchTopic")


def test_send_retries_on_another_group_only_when_nothing_was_stored(tmp_path: Path) -> None:
    """broker-b is killed after the client cached a route to it: a send that picks one of its
    queues fails to connect, is retried on broker-a after a route refresh and stored once; a
    pull of a dead broker's queue fails naming its address."""
    with two_broker_groups(tmp_path) as own:
        own.create_topic("Retried", queues=2)

        async def run() -> None:
            async with ClusterClient(own.namesrv_addr, timeout_ms=1_000) as client, \
                    ClusterClient(own.namesrv_addr, timeout_ms=1_000) as reader:
                await client.route("Retried")
                await reader.route("Retried")
                own.brokers["broker-b"].kill()
                for i in range(8):
                    queue, _ = await client.send(Message("Retried", f"r{i}".encode()),
                                                 producer_group="PG")
                    assert queue.broker_name == "broker-a"
                dead = MessageQueue("Retried", "broker-b", 0)
                dead_addr = re.escape(own.brokers["broker-b"].addr)
                with pytest.raises(RetriesExhaustedError, match=dead_addr):
                    await reader.pull("CG", dead, 0)
                # failover_timeout_ms: retried (route refreshed each time) until the deadline
                async with ClusterClient(own.namesrv_addr, timeout_ms=1_000,
                                         failover_timeout_ms=1_000) as waiting:
                    with pytest.raises(RetriesExhaustedError, match="broker-b") as caught:
                        await waiting.pull("CG", dead, 0)
                    assert len(caught.value.attempts) > waiting.read_retries + 1
                with pytest.raises(RetriesExhaustedError, match="nothing stored"):
                    await client.send(Message("Retried", b"x"), producer_group="PG", queue=dead)
                alive = [MessageQueue("Retried", "broker-a", i) for i in range(2)]
                bodies = [body for queue in alive for body in await read_all(client, queue)]
                assert sorted(bodies) == sorted(f"r{i}".encode() for i in range(8))

        asyncio.run(run())


def test_reads_follow_a_broker_to_its_new_address_after_a_route_refresh(tmp_path: Path) -> None:
    with two_broker_groups(tmp_path) as own:
        own.create_topic("Moved", queues=1)
        queue = MessageQueue("Moved", "broker-b", 0)
        client = ClusterClient(own.namesrv_addr, timeout_ms=1_000)
        loop = asyncio.new_event_loop()
        try:
            for i in range(3):
                loop.run_until_complete(client.send(Message("Moved", f"v{i}".encode()),
                                                    producer_group="PG", queue=queue))
            old = own.brokers["broker-b"]
            assert old.store_dir is not None
            old.terminate()
            moved = own.env.start_broker(own.namesrv, broker_name="broker-b",
                                         store_dir=old.store_dir, name="broker-b-moved")
            assert moved.addr != old.addr
            pulled = loop.run_until_complete(client.pull("CG", queue, 0))
            assert [record.body for record in pulled.messages] == [b"v0", b"v1", b"v2"]
            route = loop.run_until_complete(client.route("Moved"))
            assert route.master_addr("broker-b") == moved.addr
        finally:
            loop.run_until_complete(client.close())
            loop.close()
