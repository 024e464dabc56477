"""Helpers for the broker tests: small configs, a running broker, a fake name server."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from broker.config import BrokerConfig
from broker.node import BrokerNode
from pyrmq_client import BrokerClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.server import RemotingServer, ServerLimits
from store.config import StoreConfig
from tests.remoting.support import wait_until

__all__ = ["FakeNameServer", "broker_config", "connected", "running_broker", "wait_until"]

START_TIMEOUT_S = 10.0


_STORE_FIELDS = frozenset(f.name for f in dataclasses.fields(StoreConfig))


def broker_config(root: Path, **overrides: object) -> BrokerConfig:
    """A loopback broker on a free port with small store files and metrics on a free port.

    An override named like a `StoreConfig` field (`max_message_size=...`) goes to `config.store`.
    """
    store_overrides = {k: v for k, v in overrides.items() if k in _STORE_FIELDS}
    broker_overrides = {k: v for k, v in overrides.items() if k not in _STORE_FIELDS}
    store = StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=1024 * 1024,
        mapped_file_size_consume_queue=1000 * 20,
    )
    config = BrokerConfig(
        broker_cluster_name="DefaultCluster",
        broker_name="broker-a",
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=None,
        store=dataclasses.replace(store, **store_overrides),  # type: ignore[arg-type]
        metrics_prom_exporter_host="127.0.0.1",
        metrics_prom_exporter_port=0,
    )
    return dataclasses.replace(config, **broker_overrides)  # type: ignore[arg-type]


@asynccontextmanager
async def running_broker(config: BrokerConfig) -> AsyncIterator[BrokerNode]:
    """A started broker; stopped gracefully (and awaited) on exit."""
    node = BrokerNode(config, server_limits=ServerLimits(close_timeout_ms=2_000))
    task = asyncio.create_task(node.run())
    started = asyncio.create_task(node.started.wait())
    done, _ = await asyncio.wait({task, started}, timeout=START_TIMEOUT_S,
                                 return_when=asyncio.FIRST_COMPLETED)
    if started not in done:
        started.cancel()
        if task in done:
            task.result()  # raises the start-up error
        task.cancel()
        raise AssertionError("broker did not start in time")
    try:
        yield node
    finally:
        node.request_stop()
        async with asyncio.timeout(START_TIMEOUT_S):
            await task


@asynccontextmanager
async def connected(node: BrokerNode) -> AsyncIterator[BrokerClient]:
    client = await BrokerClient.connect(*node.address)
    try:
        yield client
    finally:
        await client.close()


class FakeNameServer:
    """A name server that records REGISTER_BROKER / UNREGISTER_BROKER and answers 0."""

    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []
        self.server = RemotingServer(self.handle, limits=ServerLimits(close_timeout_ms=500),
                                     name="fake-namesrv")

    async def handle(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        self.requests.append(request)
        return request.make_response(ResponseCode.SUCCESS)

    def of_code(self, code: int) -> list[RemotingCommand]:
        return [request for request in self.requests if request.code == code]

    @property
    def registrations(self) -> list[RemotingCommand]:
        return self.of_code(RequestCode.REGISTER_BROKER)

    @property
    def address(self) -> str:
        host, port = self.server.address
        return f"{host}:{port}"

    async def __aenter__(self) -> FakeNameServer:
        await self.server.start("127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close()
