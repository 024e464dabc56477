"""A controller-mode master accepts a slave's HA handshake only from a broker id the controller
registered for its set, from the host it registered (docs/reliability.md M16,
broker/ha_peers.py): the pure check as a table, then a broker elected by the embedded
controller (in this process) with raw HA handshakes on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from broker.ha_peers import CHECK_ADDRESS_KEY, ha_peer_refusal
from controller_client.client import ControllerClient
from ha.frames import SlaveHandshake
from ha.service import AutoSwitchHAService
from tests.broker.support import broker_config, running_broker, wait_until
from tests.controller.test_controller_server import running

MEMBERS = {1: "127.0.0.1:10911", 2: "127.0.0.2:10911", 3: "[::1]:10911"}


@pytest.mark.parametrize(("broker_id", "peer", "members", "check", "refused"), [
    (2, "127.0.0.2:40000", MEMBERS, True, None),
    (3, "::1:40000", MEMBERS, True, None),
    (2, "127.0.0.1:40000", MEMBERS, True, "the controller registered it at 127.0.0.2:10911"),
    (2, "127.0.0.1:40000", MEMBERS, False, None),  # pyrmqHaCheckPeerAddress=false
    (2, "::ffff:127.0.0.2:40000", MEMBERS, True, None),  # IPv4-mapped
    (4, "127.0.0.1:40000", MEMBERS, True, "is not registered with the controller"),
    (4, "127.0.0.1:40000", MEMBERS, False, "is not registered with the controller"),
    (1, "127.0.0.1:40000", MEMBERS, True, "this broker's own id"),
    (2, "127.0.0.2:40000", None, True, "member list is not known yet"),
    (2, "127.0.0.2:40000", {}, True, "is not registered"),
])
def test_ha_peer_refusal(broker_id: int, peer: str, members: dict[int, str] | None,
                         check: bool, refused: str | None) -> None:
    reason = ha_peer_refusal(broker_id, peer, own_id=1, members=members, check_address=check)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None
        assert refused in reason
        assert peer in reason


def test_an_address_refusal_names_the_switch() -> None:
    reason = ha_peer_refusal(2, "127.0.0.1:1", own_id=1, members=MEMBERS, check_address=True)
    assert reason is not None
    assert f"{CHECK_ADDRESS_KEY}=false" in reason


async def handshake(ha: AutoSwitchHAService, broker_id: int) -> bool:
    """A slave's HANDSHAKE from 127.0.0.1: True once the master holds a connection of that
    slave (accepted), False once it closed the connection (refused)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", ha.ha_port)
    try:
        writer.write(SlaveHandshake(is_sync_from_last_file=False, is_async_learner=False,
                                    slave_broker_id=broker_id).encode())
        await writer.drain()
        async with asyncio.timeout(10):
            while True:
                if any(c.protocol.slave_broker_id == broker_id for c in ha.connections):
                    return True
                try:
                    async with asyncio.timeout(0.02):
                        if not await reader.read(4096):  # the master's heartbeats, or EOF
                            return False
                except TimeoutError:
                    pass
    finally:
        writer.close()


async def accepted_soon(ha: AutoSwitchHAService, broker_id: int) -> bool:
    """Handshakes until one is accepted: a member registered a moment ago may be refused once,
    before the master has read the members again (it does on a refusal and at every poll)."""
    for _ in range(50):
        if await handshake(ha, broker_id):
            return True
        await asyncio.sleep(0.1)
    return False


async def test_the_master_takes_handshakes_only_from_registered_members(
    tmp_path: Path,
) -> None:
    async with running(tmp_path / "controller") as server:
        controller = f"127.0.0.1:{server.address[1]}"
        config = broker_config(tmp_path / "b1", enable_controller_mode=True,
                               controller_addr=controller, sync_broker_metadata_period_ms=200)
        async with running_broker(config) as node:
            replicas, ha = node.replicas, node.ha
            assert replicas is not None
            assert ha is not None
            await wait_until(lambda: replicas.role is not None and replicas.role.is_master,
                             timeout_s=30, what="b1 elected master")
            # Two more brokers register with the controller: id 2 at 127.0.0.2, id 3 here.
            registered = {}
            for name, address in (("b2", "127.0.0.2:10911"), ("b3", "127.0.0.1:10913")):
                client = ControllerClient((controller,))
                try:
                    (tmp_path / name).mkdir()
                    done = await client.register(tmp_path / name, config.broker_cluster_name,
                                                 config.broker_name, address)
                    registered[name] = done.broker_id
                finally:
                    await client.close()
            assert registered == {"b2": 2, "b3": 3}

            assert await accepted_soon(ha, 3)
            assert replicas.members == {1: node.broker_addr, 2: "127.0.0.2:10911",
                                        3: "127.0.0.1:10913"}
            assert not await handshake(ha, 7)  # never registered
            assert not await handshake(ha, 2)  # registered at another host
            assert not await handshake(ha, 1)  # its own id


async def test_without_the_address_check_a_registered_id_is_enough(tmp_path: Path) -> None:
    async with running(tmp_path / "controller") as server:
        controller = f"127.0.0.1:{server.address[1]}"
        config = dataclasses.replace(
            broker_config(tmp_path / "b1", enable_controller_mode=True,
                          controller_addr=controller), pyrmq_ha_check_peer_address=False)
        async with running_broker(config) as node:
            replicas, ha = node.replicas, node.ha
            assert replicas is not None
            assert ha is not None
            await wait_until(lambda: replicas.role is not None and replicas.role.is_master,
                             timeout_s=30, what="b1 elected master")
            client = ControllerClient((controller,))
            try:
                (tmp_path / "b2").mkdir()
                await client.register(tmp_path / "b2", config.broker_cluster_name,
                                      config.broker_name, "127.0.0.2:10911")
            finally:
                await client.close()
            assert await accepted_soon(ha, 2)  # registered at 127.0.0.2
            assert not await handshake(ha, 9)
