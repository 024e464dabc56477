"""pyrmq's embedded controller over real loopback TCP, driven by the broker's ControllerClient.

The shared scenario (tests/controller/controller_scenarios.py) runs here against the embedded
controller and in tests/interop against the real Java one. Then the embedded controller's own
behaviour: one port for name server and controller, the optional controller-only port, failover
as soon as the master's connection closes, after a heartbeat timeout, the inactive-master scan,
and the NOTIFY_BROKER_ROLE_CHANGED push to the new master.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from controller.config import ControllerConfig
from controller.server import ControllerServer
from controller_client.client import ControllerClient, ReplicaInfo, decode_role_change
from controller_client.messages import (
    NotifyBrokerRoleChangedRequestHeader,
    SyncStateSet,
)
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request_code_not_supported
from remoting.connection import RemotingConnection
from remoting.properties import parse_properties
from remoting.server import RemotingServer, ServerLimits
from tests.controller.controller_scenarios import (
    BROKER,
    CLUSTER,
    heartbeat,
    register_heartbeat_elect_alter,
)
from tests.remoting.support import wait_until as remoting_wait_until

DEADLINE_S = 10.0


@asynccontextmanager
async def running(tmp_path: Path, **settings: Any) -> AsyncIterator[ControllerServer]:
    config = dataclasses.replace(
        ControllerConfig(
            listen_port=0,
            bind_address="127.0.0.1",
            controller_store_path=str(tmp_path / "controller"),
            scan_not_active_broker_interval_ms=50,
            scan_inactive_master_interval_ms=50,
            inactive_master_scan_delay_ms=0,
        ),
        **settings,
    )
    server = ControllerServer(config, limits=ServerLimits(close_timeout_ms=500))
    async with asyncio.TaskGroup() as task_group:
        task_group.create_task(server.run())
        try:
            async with asyncio.timeout(5):
                await server.wait_started()
            yield server
        finally:
            server.stop()


def addr_of(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


async def wait_until(predicate: Callable[[], bool], *, what: str) -> None:
    await remoting_wait_until(predicate, timeout_s=DEADLINE_S, what=what)


async def poll_replica_info(
    client: ControllerClient, done: Callable[[ReplicaInfo], bool], *, what: str
) -> ReplicaInfo:
    """GET_REPLICA_INFO until `done(answer)`; fails naming `what` after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        info = await client.get_replica_info(BROKER)
        if done(info):
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: last answer {info}")
        await asyncio.sleep(0.01)


async def test_shared_scenario_against_the_embedded_controller(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        await register_heartbeat_elect_alter(
            addr_of(server.address), tmp_path, leader_timeout_s=DEADLINE_S
        )


async def test_one_port_serves_both_and_the_controller_port_only_the_controller(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, controller_listen_port=0) as server:
        controller_address = server.controller_address
        assert controller_address is not None
        cluster_info = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        metadata = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
        async with await RemotingClient.connect(*server.address) as client:
            assert (await client.invoke(cluster_info, 3000)).code == ResponseCode.SUCCESS
            answer = await client.invoke(metadata, 3000)
            assert answer.code == ResponseCode.SUCCESS
            assert answer.ext_fields["controllerLeaderAddress"] == addr_of(server.address)
            assert answer.ext_fields["isLeader"] == "true"
        async with await RemotingClient.connect(*controller_address) as client:
            refused = await client.invoke(cluster_info, 3000)
            assert refused.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            answer = await client.invoke(metadata, 3000)
            assert answer.ext_fields["controllerLeaderAddress"] == addr_of(controller_address)


async def test_get_controller_config_is_properties_text(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        request = RemotingCommand.request(RequestCode.GET_CONTROLLER_CONFIG)
        async with await RemotingClient.connect(*server.address) as client:
            answer = await client.invoke(request, 3000)
        assert answer.code == ResponseCode.SUCCESS
        entries = {e.key: e.value for e in parse_properties(answer.body.decode())}
        assert entries["enableControllerInNamesrv"] == "true"
        assert entries["controllerStorePath"] == str(tmp_path / "controller")


async def test_disabled_controller_answers_not_supported(tmp_path: Path) -> None:
    async with running(tmp_path, enable_controller_in_namesrv=False) as server:
        assert server.controller is None
        metadata = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
        async with await RemotingClient.connect(*server.address) as client:
            answer = await client.invoke(metadata, 3000)
            assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


class FakeBrokerListener:
    """A broker's listen port as far as the controller cares: it records role-change pushes."""

    def __init__(self) -> None:
        self.pushes: list[tuple[NotifyBrokerRoleChangedRequestHeader, SyncStateSet]] = []
        self.server = RemotingServer(self._handle, name="broker")

    async def _handle(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        if request.code != RequestCode.NOTIFY_BROKER_ROLE_CHANGED:
            return request_code_not_supported(request)
        self.pushes.append(decode_role_change(request))
        return request.make_response(ResponseCode.SUCCESS)

    @property
    def addr(self) -> str:
        return addr_of(self.server.address)


async def three_brokers(
    controller: str, tmp_path: Path, *, timeout_ms: int = 10_000
) -> tuple[list[FakeBrokerListener], list[ControllerClient]]:
    """Brokers 1..3 registered, each heartbeating on its own connection, broker 1 master and
    the SyncStateSet {1, 2, 3}; broker 3 reports the most data."""
    listeners = [FakeBrokerListener() for _ in range(3)]
    clients = [ControllerClient((controller,)) for _ in range(3)]
    for index, (listener, client) in enumerate(zip(listeners, clients, strict=True), start=1):
        await listener.server.start("127.0.0.1", 0)
        (tmp_path / f"b{index}").mkdir()
        registration = await client.register(tmp_path / f"b{index}", CLUSTER, BROKER, listener.addr)
        assert registration.broker_id == index
        beat = dataclasses.replace(
            heartbeat(index, epoch=1, max_offset=100 * index),
            broker_addr=listener.addr,
            heartbeat_timeout_mills=timeout_ms,
        )
        assert await client.heartbeat(beat) == []
    elected, _ = await clients[0].elect_master(CLUSTER, BROKER, 1)
    assert elected.master_epoch == 1
    await clients[0].alter_sync_state_set(BROKER, 1, 1, SyncStateSet(frozenset({1, 2, 3}), 1))
    return listeners, clients


async def close_all(listeners: list[FakeBrokerListener], clients: list[ControllerClient]) -> None:
    for client in clients:
        await client.close()
    for listener in listeners:
        await listener.server.close()


async def test_master_connection_close_elects_at_once_and_pushes_the_role_change(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as server:
        controller = addr_of(server.address)
        listeners, clients = await three_brokers(controller, tmp_path)
        try:
            await clients[0].close()  # the master's process died: its connection closes
            observer = ControllerClient((controller,))
            try:
                info = await poll_replica_info(  # 3: the most data among the alive members
                    observer, lambda i: i.header.master_broker_id == 3, what="master 3"
                )
                assert info.header.master_epoch == 2
                assert info.sync_state_set == SyncStateSet(frozenset({3}), 3)
            finally:
                await observer.close()
            await wait_until(lambda: bool(listeners[2].pushes), what="push to the new master")
            header, body = listeners[2].pushes[-1]
            assert (header.master_broker_id, header.master_epoch) == (3, 2)
            assert header.master_address == listeners[2].addr
            assert body == SyncStateSet(frozenset({3}), 3)
            await wait_until(
                lambda: any(h.master_epoch == 2 for h, _ in listeners[1].pushes),
                what="push to the other slave",
            )
            # The dead master is not alive: it got the first election's push only.
            assert [h.master_epoch for h, _ in listeners[0].pushes] == [1]
        finally:
            await close_all(listeners, clients)


@pytest.mark.parametrize("scan_ms", [50, 600_000], ids=["scan-50ms", "scan-10min"])
async def test_master_heartbeat_timeout_elects(tmp_path: Path, scan_ms: int) -> None:
    """A hung master: its connection stays open but its heartbeats stop. It is found when its
    heartbeat expires, whatever the scan intervals: with scans ten minutes apart (and the
    inactive-master scan too) this still elects within DEADLINE_S."""
    async with running(tmp_path, scan_not_active_broker_interval_ms=scan_ms,
                       scan_inactive_master_interval_ms=scan_ms) as server:
        controller = addr_of(server.address)
        listeners, clients = await three_brokers(controller, tmp_path, timeout_ms=300)
        try:
            async with asyncio.timeout(DEADLINE_S):
                while True:  # brokers 2 and 3 keep beating; broker 1 is silent
                    for index in (2, 3):
                        beat = dataclasses.replace(
                            heartbeat(index, epoch=1, max_offset=100 * index),
                            broker_addr=listeners[index - 1].addr,
                            heartbeat_timeout_mills=300,
                        )
                        await clients[index - 1].heartbeat(beat)
                    info = await clients[1].get_replica_info(BROKER)
                    if info.header.master_broker_id == 3:
                        break
                    await asyncio.sleep(0.05)
            assert info.header.master_epoch == 2
        finally:
            await close_all(listeners, clients)


async def test_failed_controller_election_clears_the_master_then_a_broker_elects(
    tmp_path: Path,
) -> None:
    """Every SyncStateSet member dead: three failed attempts (masterEpoch 1 -> 4, no master);
    the first member to come back and ask becomes master."""
    async with running(tmp_path) as server:
        controller = addr_of(server.address)
        listeners, clients = await three_brokers(controller, tmp_path)
        try:
            await clients[0].alter_sync_state_set(BROKER, 1, 1, SyncStateSet(frozenset({1}), 2))
            await clients[0].close()
            observer = ControllerClient((controller,))
            try:
                info = await poll_replica_info(
                    observer, lambda i: i.header.master_epoch == 4, what="three failed attempts"
                )
                assert info.header.master_broker_id is None
                # Settled: more triggers (the scan, a late close) change nothing.
                manager = server.controller
                assert manager is not None
                manager.scan_inactive_master()
                await manager.trigger_elect_master(BROKER, reason="test")
                assert (await observer.get_replica_info(BROKER)).header.master_epoch == 4
                comeback = ControllerClient((controller,))
                try:
                    await comeback.heartbeat(
                        dataclasses.replace(heartbeat(1), broker_addr=listeners[0].addr)
                    )
                    elected, _ = await comeback.elect_master(CLUSTER, BROKER, 1)
                    assert (elected.master_broker_id, elected.master_epoch) == (1, 5)
                finally:
                    await comeback.close()
            finally:
                await observer.close()
        finally:
            await close_all(listeners, clients)


async def test_state_survives_a_restart_and_heartbeats_do_not(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        controller = addr_of(server.address)
        listeners, clients = await three_brokers(controller, tmp_path)
    # Stopped while the brokers are still connected: a shutdown elects nobody.
    await close_all(listeners, clients)
    async with running(tmp_path) as server:
        client = ControllerClient((addr_of(server.address),))
        try:
            info = await client.get_replica_info(BROKER)
            assert (info.header.master_broker_id, info.header.master_epoch) == (1, 1)
            assert info.sync_state_set == SyncStateSet(frozenset({1, 2, 3}), 2)
            # Nobody has heartbeated the new process: the master is not reported as alive.
            registration = await client.register(tmp_path / "b2", CLUSTER, BROKER, "127.0.0.1:2")
            assert registration.master.master_broker_id is None
        finally:
            await client.close()


async def test_inactive_master_scan_elects_when_the_master_never_comes_back(
    tmp_path: Path,
) -> None:
    """After a controller restart nobody is alive; members 2 and 3 heartbeat again, master 1
    does not: no connection closes and no heartbeat expires, only the scan notices."""
    async with running(tmp_path) as server:
        listeners, clients = await three_brokers(addr_of(server.address), tmp_path)
    await close_all(listeners, clients)
    async with running(tmp_path) as server:
        controller = addr_of(server.address)
        members = [ControllerClient((controller,)) for _ in (2, 3)]
        try:
            for index, client in zip((2, 3), members, strict=True):
                await client.heartbeat(heartbeat(index, epoch=1, max_offset=100 * index))
            info = await poll_replica_info(
                members[0], lambda i: i.header.master_broker_id == 3, what="scan elects 3"
            )
            assert info.header.master_epoch == 2
        finally:
            for client in members:
                await client.close()


async def test_bad_controller_requests_fail_alone(tmp_path: Path) -> None:
    """Missing or ill-typed fields and bodies that do not parse: each request is answered with
    an error, the connection stays open and nothing changes."""
    bad = [
        (RequestCode.CONTROLLER_APPLY_BROKER_ID, {"clusterName": CLUSTER}, b""),
        (
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            {"clusterName": CLUSTER, "brokerName": BROKER, "appliedBrokerId": "x",
             "registerCheckCode": "a;1"},
            b"",
        ),
        (RequestCode.CONTROLLER_REGISTER_BROKER, {"brokerName": BROKER}, b""),
        (RequestCode.CONTROLLER_GET_REPLICA_INFO, {}, b""),
        (
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            {"brokerName": BROKER, "masterBrokerId": "1", "masterEpoch": "1",
             "invokeTime": "0"},
            b"{not json",
        ),
        (
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            {"brokerName": BROKER, "masterBrokerId": "1", "masterEpoch": "1",
             "invokeTime": "0"},
            b'{"syncStateSet":"1","syncStateSetEpoch":1}',
        ),
        (RequestCode.CONTROLLER_ELECT_MASTER, {"brokerName": BROKER}, b""),
        (RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, b'{"a":1}'),
        (RequestCode.CLEAN_BROKER_DATA, {"brokerName": BROKER,
                                         "brokerControllerIdsToClean": "1;x"}, b""),
        (RequestCode.BROKER_HEARTBEAT, {"brokerName": BROKER}, b""),
    ]  # fmt: skip
    async with running(tmp_path) as server:
        controller = addr_of(server.address)
        listeners, clients = await three_brokers(controller, tmp_path)
        try:
            before = await clients[0].get_replica_info(BROKER)
            async with await RemotingClient.connect(*server.address) as raw:
                for code, fields, body in bad:
                    answer = await raw.invoke(RemotingCommand.request(code, fields, body), 3000)
                    assert answer.code != ResponseCode.SUCCESS, (code, fields, body)
                    assert answer.remark, (code, answer)
                assert not raw.is_closed
            assert await clients[0].get_replica_info(BROKER) == before
            assert await clients[0].get_next_broker_id(CLUSTER, BROKER) == 4
        finally:
            await close_all(listeners, clients)
