"""A pyrmq name server and two broker groups (broker-a, broker-b) as real processes on loopback,
with topics spread over both: what the client and Spark tests read and write through routing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyrmq_client import BrokerClient, ClusterClient, RouteError
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess, wait_until

ROUTE_TIMEOUT_S: Final = 20.0
BROKER_NAMES: Final = ("broker-a", "broker-b")


@dataclass
class Cluster:
    env: PyrmqEnv
    namesrv: PyrmqProcess
    brokers: dict[str, PyrmqProcess]

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    def create_topic(self, topic: str, queues: int = 4) -> None:
        """Create `topic` with `queues` queues on every broker group; returns once the name
        server routes all of them."""

        async def create() -> None:
            for broker in self.brokers.values():
                host, port = broker.addr.rsplit(":", 1)
                async with await BrokerClient.connect(host, int(port)) as client:
                    await client.create_topic(topic, read_queue_nums=queues,
                                              write_queue_nums=queues)

        asyncio.run(create())
        expected = len(self.brokers) * queues
        wait_until(lambda: self.read_queue_count(topic) == expected, timeout_s=ROUTE_TIMEOUT_S,
                   what=f"name server routes {expected} queues of {topic}")

    def read_queue_count(self, topic: str) -> int:
        async def count() -> int:
            client = ClusterClient(self.namesrv_addr)
            try:
                return len(await client.read_queues(topic))
            except RouteError:
                return 0
            finally:
                await client.close()

        return asyncio.run(count())


@contextmanager
def two_broker_groups(
    base_dir: Path, *, extra_conf: Mapping[str, str | int | bool] | None = None
) -> Iterator[Cluster]:
    """A name server and the masters of broker-a and broker-b, all registered with it;
    `extra_conf` adds broker.conf keys."""
    with PyrmqEnv(base_dir) as env:
        namesrv = env.start_namesrv()
        brokers = {name: env.start_broker(namesrv, broker_name=name, extra_conf=extra_conf)
                   for name in BROKER_NAMES}
        yield Cluster(env, namesrv, brokers)
