"""ControllerClient over real loopback TCP against a stand-in controller that applies the id
rules of docs/remoting-protocol.md §8.2-§8.5 (the real Java controller: tests/interop, to come).

The register flow is resumed from every crash point of docs/replicas-manager.md §4.4 by leaving the
identity files as a crash there would, then registering again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from controller_client import errors
from controller_client.client import (
    BrokerIdentityMismatchError,
    ControllerClient,
    decode_role_change,
)
from controller_client.messages import (
    ApplyBrokerIdRequestHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
)
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.server import RemotingServer
from store.broker_identity import (
    BROKER_IDENTITY_FILE_NAME,
    BrokerIdentity,
    TempBrokerIdentity,
    load_broker_identity,
    temp_path_of,
    write_broker_identity,
    write_temp_broker_identity,
)

CLUSTER, BROKER, ADDR = "DefaultCluster", "broker-a", "127.0.0.1:10911"


@dataclass
class StandInController:
    """Broker ids per broker set: id -> registerCheckCode (§8.3, §8.4); REGISTER needs one."""

    ids: dict[str, dict[int, str]] = field(default_factory=dict)
    address: str = ""
    applies: int = 0
    leader: str | None = None  # another node's address: this one does not lead

    async def handle(self, _: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        if self.leader is not None:
            if request.code == RequestCode.CONTROLLER_GET_METADATA_INFO:
                meta = GetMetaDataResponseHeader("g", "n1", self.leader, False, "")
                return request.make_response(0, ext_fields=meta.to_ext_fields())
            return request.make_response(ResponseCode.CONTROLLER_NOT_LEADER, remark="not leader")
        match request.code:
            case RequestCode.CONTROLLER_GET_METADATA_INFO:
                meta = GetMetaDataResponseHeader("g", "n0", self.address, True, "")
                return request.make_response(0, ext_fields=meta.to_ext_fields())
            case RequestCode.CONTROLLER_GET_NEXT_BROKER_ID:
                ask = GetNextBrokerIdRequestHeader.from_ext_fields(request.ext_fields)
                known = self.ids.get(ask.broker_name, {})
                answer = GetNextBrokerIdResponseHeader(CLUSTER, ask.broker_name, len(known) + 1)
                return request.make_response(0, ext_fields=answer.to_ext_fields())
            case RequestCode.CONTROLLER_APPLY_BROKER_ID:
                self.applies += 1
                apply = ApplyBrokerIdRequestHeader.from_ext_fields(request.ext_fields)
                known_set = self.ids.get(apply.broker_name)
                held = None if known_set is None else known_set.get(apply.applied_broker_id)
                if (known_set is None and apply.applied_broker_id != 1) or (
                    held is not None and held != apply.register_check_code
                ):
                    return request.make_response(ResponseCode.CONTROLLER_BROKER_ID_INVALID)
                self.ids.setdefault(apply.broker_name, {})[apply.applied_broker_id] = (
                    apply.register_check_code
                )
                return request.make_response(0)
            case RequestCode.CONTROLLER_REGISTER_BROKER:
                reg = RegisterBrokerToControllerRequestHeader.from_ext_fields(request.ext_fields)
                if reg.broker_id not in self.ids.get(reg.broker_name, {}):
                    return request.make_response(
                        ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, remark="apply first"
                    )
                registered = RegisterBrokerToControllerResponseHeader(CLUSTER, reg.broker_name)
                body = SyncStateSet(frozenset(), 0).encode()
                return request.make_response(0, ext_fields=registered.to_ext_fields(), body=body)
        return request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)


@pytest.fixture
async def controller() -> AsyncIterator[tuple[StandInController, ControllerClient]]:
    stand_in = StandInController()
    server = RemotingServer(stand_in.handle)
    await server.start("127.0.0.1", 0)
    host, port = server.address
    stand_in.address = f"{host}:{port}"
    client = ControllerClient((stand_in.address,), request_timeout_ms=3000)
    try:
        yield stand_in, client
    finally:
        await client.close()
        await server.close()


def _paths(root: Path) -> tuple[Path, Path]:
    identity = root / BROKER_IDENTITY_FILE_NAME
    return identity, temp_path_of(identity)


async def test_fresh_register_gets_id_1_and_leaves_only_identity(
    controller: tuple[StandInController, ControllerClient], tmp_path: Path
) -> None:
    stand_in, client = controller
    registration = await client.register(tmp_path, CLUSTER, BROKER, ADDR)
    identity, temp = _paths(tmp_path)
    assert registration.broker_id == 1
    assert load_broker_identity(identity) == BrokerIdentity(CLUSTER, BROKER, 1)
    assert not temp.exists()
    assert client.leader_addr == stand_in.address


async def test_crash_after_temp_file_reapplies_same_id_and_code(
    controller: tuple[StandInController, ControllerClient], tmp_path: Path
) -> None:
    stand_in, client = controller
    _, temp = _paths(tmp_path)
    write_temp_broker_identity(temp, TempBrokerIdentity(CLUSTER, BROKER, 1, f"{ADDR};1"))
    registration = await client.register(tmp_path, CLUSTER, BROKER, ADDR)
    assert registration.broker_id == 1
    assert stand_in.ids[BROKER] == {1: f"{ADDR};1"}


async def test_crash_after_apply_reapplies_idempotently(
    controller: tuple[StandInController, ControllerClient], tmp_path: Path
) -> None:
    stand_in, client = controller
    stand_in.ids[BROKER] = {1: f"{ADDR};1"}  # applied, then the broker died before brokerIdentity
    _, temp = _paths(tmp_path)
    write_temp_broker_identity(temp, TempBrokerIdentity(CLUSTER, BROKER, 1, f"{ADDR};1"))
    assert (await client.register(tmp_path, CLUSTER, BROKER, ADDR)).broker_id == 1
    assert not temp.exists()


async def test_crash_after_identity_file_the_identity_wins(
    controller: tuple[StandInController, ControllerClient], tmp_path: Path
) -> None:
    stand_in, client = controller
    stand_in.ids[BROKER] = {1: f"{ADDR};1"}
    identity, temp = _paths(tmp_path)
    write_temp_broker_identity(temp, TempBrokerIdentity(CLUSTER, BROKER, 1, f"{ADDR};1"))
    write_broker_identity(identity, BrokerIdentity(CLUSTER, BROKER, 1))
    assert (await client.register(tmp_path, CLUSTER, BROKER, ADDR)).broker_id == 1
    assert stand_in.applies == 0


async def test_refused_apply_deletes_temp_and_next_attempt_takes_a_new_id(
    controller: tuple[StandInController, ControllerClient], tmp_path: Path
) -> None:
    stand_in, client = controller
    stand_in.ids[BROKER] = {1: "10.0.0.9:10911;5"}  # another broker holds id 1
    _, temp = _paths(tmp_path)
    write_temp_broker_identity(temp, TempBrokerIdentity(CLUSTER, BROKER, 1, f"{ADDR};1"))
    with pytest.raises(errors.ControllerBrokerIdInvalidError):
        await client.register(tmp_path, CLUSTER, BROKER, ADDR)
    assert not temp.exists()
    assert (await client.register(tmp_path, CLUSTER, BROKER, ADDR)).broker_id == 2


async def test_identity_of_another_broker_is_refused(
    controller: tuple[StandInController, ControllerClient], tmp_path: Path
) -> None:
    _, client = controller
    identity, _ = _paths(tmp_path)
    write_broker_identity(identity, BrokerIdentity(CLUSTER, "broker-b", 1))
    with pytest.raises(BrokerIdentityMismatchError, match="broker-b"):
        await client.register(tmp_path, CLUSTER, BROKER, ADDR)


async def test_register_of_unknown_id_is_typed(
    controller: tuple[StandInController, ControllerClient], tmp_path: Path
) -> None:
    _, client = controller
    identity, _ = _paths(tmp_path)
    write_broker_identity(identity, BrokerIdentity(CLUSTER, BROKER, 7))
    with pytest.raises(errors.ControllerBrokerNeedToBeRegisteredError, match="apply first"):
        await client.register(tmp_path, CLUSTER, BROKER, ADDR)


async def test_no_controller_is_unavailable() -> None:
    server = RemotingServer(StandInController().handle)
    await server.start("127.0.0.1", 0)
    host, port = server.address
    await server.close()  # nothing listens on that port now
    client = ControllerClient((f"{host}:{port}",), request_timeout_ms=1000)
    with pytest.raises(errors.ControllerUnavailableError):
        await client.find_leader()
    await client.close()


def test_decode_role_change() -> None:
    header = NotifyBrokerRoleChangedRequestHeader(ADDR, 3, 4, 2)
    body = SyncStateSet(frozenset({1, 2}), 4)
    request = RemotingCommand.request(
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header.to_ext_fields(), body.encode()
    )
    assert decode_role_change(request) == (header, body)


async def test_a_stale_leader_is_looked_up_again(
    controller: tuple[StandInController, ControllerClient], tmp_path: Path
) -> None:
    stand_in, _ = controller
    follower = StandInController(leader=stand_in.address)
    server = RemotingServer(follower.handle)
    await server.start("127.0.0.1", 0)
    host, port = server.address
    client = ControllerClient((f"{host}:{port}",))
    client.leader_addr = f"{host}:{port}"  # it led once; now it answers 2007
    try:
        assert (await client.register(tmp_path, CLUSTER, BROKER, ADDR)).broker_id == 1
        assert client.leader_addr == stand_in.address
    finally:
        await client.close()
        await server.close()
