"""`fetchControllerAddrByDnsLookup`: `controllerAddr` as one `domain:port` resolved to every A
record of the domain, resolved again periodically (docs/replicas-manager.md §2-§3).

The real resolver is asked only for `localhost` (answered from /etc/hosts: no network). A
domain with several A records, one whose records change, and one that does not resolve cannot
exist here without a DNS server (this machine's resolver is not on loopback), so those cases
give the lookup a resolver function that answers as getaddrinfo would."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from broker.errors import BrokerConfigError
from broker.node import BrokerNode
from broker.replicas_manager import ReplicasManager
from controller_client.addresses import (
    controller_addrs,
    lookup_controller_addrs,
    split_domain,
)
from controller_client.client import ControllerClient
from controller_client.errors import ControllerAddressLookupError, ControllerError
from store.message_store import MessageStore
from tests.broker.support import broker_config, running_broker, wait_until
from tests.controller.test_controller_server import running


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Resolver:
    """getaddrinfo's answers for one name: `answers` (IPv4 addresses) or `error`."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.error: socket.gaierror | None = None
        self.asked: list[tuple[str, int, int]] = []

    async def __call__(self, host: str, port: int, *, family: int = 0, type: int = 0,
                       ) -> list[tuple[Any, ...]]:
        self.asked.append((host, port, family))
        if self.error is not None:
            raise self.error
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in self.answers]


@pytest.mark.parametrize(("value", "expected"), [
    ("localhost:9878", ("localhost", 9878)),
    (" controller.example:1 ", ("controller.example", 1)),
    ("rocketmq-controller.svc.cluster.local:65535", ("rocketmq-controller.svc.cluster.local",
                                                     65535)),
])
def test_split_domain(value: str, expected: tuple[str, int]) -> None:
    assert split_domain(value) == expected


@pytest.mark.parametrize("value", [
    "", "localhost", ":9878", "localhost:", "localhost:port", "localhost:0", "localhost:65536",
    "a:9878;b:9878",
])
def test_split_domain_refuses_anything_but_one_domain_and_port(value: str) -> None:
    with pytest.raises(ControllerAddressLookupError, match="must be one domain:port"):
        split_domain(value)


async def test_localhost_resolves_to_the_loopback_address() -> None:
    port = closed_port()
    assert await lookup_controller_addrs(f"localhost:{port}") == (f"127.0.0.1:{port}",)
    assert await controller_addrs(f"localhost:{port}", dns_lookup=True) == (f"127.0.0.1:{port}",)
    # Without the lookup the value is the list itself.
    assert await controller_addrs("localhost:1;127.0.0.1:2", dns_lookup=False) == (
        "localhost:1", "127.0.0.1:2")


async def test_every_a_record_once_in_the_resolvers_order() -> None:
    resolver = Resolver("127.0.0.3", "127.0.0.1", "127.0.0.3", "127.0.0.2")
    assert await lookup_controller_addrs("controllers.example:9878", getaddrinfo=resolver) == (
        "127.0.0.3:9878", "127.0.0.1:9878", "127.0.0.2:9878")
    assert resolver.asked == [("controllers.example", 9878, socket.AF_INET)]  # A records only


@pytest.mark.parametrize(("error", "shown"), [
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "does not resolve"),
    (socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),
     "does not resolve"),
])
async def test_a_name_that_does_not_resolve_is_a_typed_error(
    error: socket.gaierror, shown: str,
) -> None:
    resolver = Resolver()
    resolver.error = error
    with pytest.raises(ControllerAddressLookupError, match=shown) as raised:
        await lookup_controller_addrs("no-such-controller.example:9878", getaddrinfo=resolver)
    assert isinstance(raised.value, ControllerError)
    assert "no-such-controller.example" in str(raised.value)
    resolver.error = None  # answered, but no A record
    with pytest.raises(ControllerAddressLookupError, match="has no A record"):
        await lookup_controller_addrs("no-such-controller.example:9878", getaddrinfo=resolver)


async def test_a_malformed_name_is_refused_without_asking_anyone() -> None:
    resolver = Resolver("127.0.0.1")
    with pytest.raises(ControllerAddressLookupError):
        await lookup_controller_addrs(f"{'a' * 64}.example:9878")  # a label over 63: no query
    with pytest.raises(ControllerAddressLookupError):
        await lookup_controller_addrs("localhost", getaddrinfo=resolver)
    assert resolver.asked == []


@asynccontextmanager
async def replicas_manager(tmp_path: Path, resolver: Resolver) -> AsyncIterator[ReplicasManager]:
    """A ReplicasManager whose controllerAddr is looked up every 50 ms with `resolver`; no
    controller answers (it keeps retrying its startup meanwhile)."""
    config = broker_config(tmp_path, enable_controller_mode=True,
                           controller_addr=f"controllers.example:{closed_port()}",
                           fetch_controller_addr_by_dns_lookup=True)
    store = MessageStore(config.store)
    store.open()
    first = await lookup_controller_addrs(config.controller_addr, getaddrinfo=resolver)
    manager = ReplicasManager(config=config, store=store, client=ControllerClient(first),
                              broker_addr="127.0.0.1:1", bump_data_version=lambda _: None,
                              dns_refresh_ms=50, getaddrinfo=resolver)
    task = asyncio.create_task(manager.run())
    try:
        yield manager
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        store.close()


async def test_the_addresses_are_resolved_again_and_a_failed_lookup_keeps_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="broker.replicas_manager")
    resolver = Resolver("127.0.0.1")
    async with replicas_manager(tmp_path, resolver) as manager:
        port = manager.config.controller_addr.rsplit(":", 1)[1]
        first: tuple[str, ...] = manager.client.addrs
        assert first == (f"127.0.0.1:{port}",)
        resolver.answers = ["127.0.0.2", "127.0.0.3"]  # the controllers moved
        await wait_until(lambda: manager.client.addrs == (f"127.0.0.2:{port}",
                                                          f"127.0.0.3:{port}"),
                         timeout_s=10, what="the new A records in use")
        assert "controller addresses changed" in caplog.text
        resolver.error = socket.gaierror(socket.EAI_AGAIN, "Temporary failure")
        asked = len(resolver.asked)
        await wait_until(lambda: len(resolver.asked) > asked + 2, timeout_s=10,
                         what="more lookups")
        assert manager.client.addrs == (f"127.0.0.2:{port}", f"127.0.0.3:{port}")
        assert "controller address lookup failed, keeping" in caplog.text


async def test_a_broker_with_a_dns_controller_addr_starts_on_its_a_records(
    tmp_path: Path,
) -> None:
    port = closed_port()
    config = broker_config(tmp_path, enable_controller_mode=True,
                           controller_addr=f"localhost:{port}",
                           fetch_controller_addr_by_dns_lookup=True)
    async with running_broker(config) as node:
        assert node.replicas is not None
        assert node.replicas.client.addrs == (f"127.0.0.1:{port}",)


async def test_a_broker_whose_dns_controller_addr_is_malformed_does_not_start(
    tmp_path: Path,
) -> None:
    config = broker_config(tmp_path, enable_controller_mode=True, controller_addr="localhost",
                           fetch_controller_addr_by_dns_lookup=True)
    node = BrokerNode(config)
    with pytest.raises(BrokerConfigError, match=r"controllerAddr.*one domain:port"):
        await asyncio.wait_for(node.run(), timeout=30)


async def test_a_broker_finds_the_embedded_controller_by_name_and_leads(tmp_path: Path) -> None:
    """controllerAddr=localhost:<port> with the lookup on: the broker registers with the
    controller listening on 127.0.0.1 and is elected master."""
    async with running(tmp_path / "controller") as server:
        port = server.address[1]
        config = broker_config(tmp_path / "broker", enable_controller_mode=True,
                               controller_addr=f"localhost:{port}",
                               fetch_controller_addr_by_dns_lookup=True)
        async with running_broker(config) as node:
            replicas = node.replicas
            assert replicas is not None
            assert replicas.client.addrs == (f"127.0.0.1:{port}",)
            await wait_until(lambda: replicas.role is not None and replicas.role.is_master,
                             timeout_s=30, what="the broker elected master")
