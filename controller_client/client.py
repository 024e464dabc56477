"""`ControllerClient`: the broker's side of the controller protocol (docs/replicas-manager.md
§3-§6).

A thin asyncio shell over `messages`: one `RemotingClient` per controller address, opened on
first use and reopened after it closes; every request has a deadline (`request_timeout_ms`,
3000 ms as in Java); every non-zero answer raises the typed error of `errors`.

- `find_leader()`: CONTROLLER_GET_METADATA_INFO to each address of `controllerAddr` in turn; the
  first that names a leader wins (the caller re-runs it every `syncControllerMetadataPeriod`).
- `register(...)`: the persistent broker id protocol (§4.4), resumable at every crash point: the
  state is always re-read from `brokerIdentity` / `brokerIdentity-temp` first.
- `heartbeat(...)`: BROKER_HEARTBEAT (904) oneway to every controller.
- `get_replica_info`, `alter_sync_state_set`; `decode_role_change` reads a pushed
  NOTIFY_BROKER_ROLE_CHANGED (1008).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from controller_client.errors import (
    ControllerError,
    ControllerMasterStillExistError,
    ControllerNotLeaderError,
    ControllerUnavailableError,
    response_error,
)
from controller_client.messages import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
)
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingConnectError, RemotingConnectionClosedError, RemotingError
from store.broker_identity import (
    BROKER_IDENTITY_FILE_NAME,
    BrokerIdentity,
    TempBrokerIdentity,
    delete_temp_broker_identity,
    load_broker_identity,
    load_temp_broker_identity,
    temp_path_of,
    write_broker_identity,
    write_temp_broker_identity,
)

REQUEST_TIMEOUT_MS_DEFAULT: Final = 3000
HEARTBEAT_TIMEOUT_MS_DEFAULT: Final = 1000


class BrokerIdentityMismatchError(ControllerError):
    """A broker identity file names another cluster or broker than the config (§4.4 step 2)."""


@dataclass(frozen=True, slots=True)
class Registration:
    """The outcome of CONTROLLER_REGISTER_BROKER: this broker's id and what it knows of the set."""

    broker_id: int
    master: RegisterBrokerToControllerResponseHeader
    sync_state_set: SyncStateSet


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    header: GetReplicaInfoResponseHeader
    sync_state_set: SyncStateSet


class ControllerClient:
    """Requests to the controllers of `controllerAddr`; close it with `close()`."""

    def __init__(
        self, addrs: tuple[str, ...], *, request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT
    ) -> None:
        if not addrs:
            raise ValueError("controllerAddr names no controller")
        self.addrs = addrs
        self.request_timeout_ms = request_timeout_ms
        self.leader_addr: str | None = None
        self._clients: dict[str, RemotingClient] = {}
        self._connecting: dict[str, asyncio.Lock] = {}

    async def update_addrs(self, addrs: tuple[str, ...]) -> None:
        """Use `addrs` from now on (a DNS lookup found others); connections to addresses no
        longer listed are closed. An empty list changes nothing."""
        if not addrs or addrs == self.addrs:
            return
        self.addrs = addrs
        for addr in [a for a in self._clients if a not in addrs]:
            await self._clients.pop(addr).close()

    async def _client(self, addr: str) -> RemotingClient:
        client = self._clients.get(addr)
        if client is not None and not client.is_closed:
            return client
        # One connect per address at a time (heartbeats and polls run concurrently).
        async with self._connecting.setdefault(addr, asyncio.Lock()):
            client = self._clients.get(addr)
            if client is None or client.is_closed:
                host, _, port = addr.rpartition(":")
                client = await RemotingClient.connect(
                    host, int(port), connect_timeout_ms=self.request_timeout_ms
                )
                self._clients[addr] = client
            return client

    async def _invoke(self, addr: str, name: str, request: RemotingCommand) -> RemotingCommand:
        client = await self._client(addr)
        response = await client.invoke(request, self.request_timeout_ms)
        if response.code != ResponseCode.SUCCESS:
            raise response_error(name, response.code, response.remark)
        return response

    async def _invoke_leader(self, name: str, request: RemotingCommand) -> RemotingCommand:
        """`request` to the leader; if the one we knew is gone or no longer leads (2007), the
        leader is looked up again and the request sent once more."""
        leader = self.leader_addr or await self.find_leader()
        try:
            return await self._invoke(leader, name, request)
        except (ControllerNotLeaderError, RemotingConnectError, RemotingConnectionClosedError):
            self.leader_addr = None
            return await self._invoke(await self.find_leader(), name, request)

    async def find_leader(self) -> str:
        """The leader's remoting address, asked of each controller in turn (§3)."""
        failures: list[str] = []
        for addr in self.addrs:
            try:
                response = await self._invoke(
                    addr,
                    "CONTROLLER_GET_METADATA_INFO",
                    RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO),
                )
                header = GetMetaDataResponseHeader.from_ext_fields(response.ext_fields)
            except RemotingError as err:
                failures.append(f"{addr}: {err}")
                continue
            if header.controller_leader_address:
                self.leader_addr = header.controller_leader_address
                return header.controller_leader_address
            failures.append(f"{addr}: knows no leader")
        self.leader_addr = None
        raise ControllerUnavailableError("no controller leader: " + "; ".join(failures))

    async def answering(self, addrs: Collection[str]) -> list[str]:
        """The controllers of `addrs` that answer CONTROLLER_GET_METADATA_INFO now (all asked at
        once). On a connection that just carried a heartbeat, an answer means that controller
        has read the heartbeat (a master lease renewal, docs/reliability.md M17)."""
        request = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)

        async def one(addr: str) -> str | None:
            try:
                await self._invoke(addr, "CONTROLLER_GET_METADATA_INFO", request)
            except RemotingError:
                return None
            return addr

        results = await asyncio.gather(*(one(addr) for addr in addrs))
        return [addr for addr in results if addr is not None]

    async def get_next_broker_id(self, cluster_name: str, broker_name: str) -> int:
        header = GetNextBrokerIdRequestHeader(cluster_name, broker_name)
        response = await self._invoke_leader(
            "CONTROLLER_GET_NEXT_BROKER_ID",
            RemotingCommand.request(
                RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, header.to_ext_fields()
            ),
        )
        answer = GetNextBrokerIdResponseHeader.from_ext_fields(response.ext_fields)
        if answer.next_broker_id is None:
            raise ControllerUnavailableError("CONTROLLER_GET_NEXT_BROKER_ID: no nextBrokerId")
        return answer.next_broker_id

    async def apply_broker_id(self, temp: TempBrokerIdentity) -> None:
        header = ApplyBrokerIdRequestHeader(
            temp.cluster_name, temp.broker_name, temp.broker_id, temp.register_check_code
        )
        await self._invoke_leader(
            "CONTROLLER_APPLY_BROKER_ID",
            RemotingCommand.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, header.to_ext_fields()),
        )

    async def register_broker(
        self, cluster_name: str, broker_name: str, broker_id: int, broker_address: str
    ) -> Registration:
        header = RegisterBrokerToControllerRequestHeader(
            cluster_name, broker_name, broker_id, broker_address, int(time.time() * 1000)
        )
        response = await self._invoke_leader(
            "CONTROLLER_REGISTER_BROKER",
            RemotingCommand.request(RequestCode.CONTROLLER_REGISTER_BROKER, header.to_ext_fields()),
        )
        master = RegisterBrokerToControllerResponseHeader.from_ext_fields(response.ext_fields)
        body = SyncStateSet.decode(response.body) if response.body else SyncStateSet()
        return Registration(broker_id, master, body)

    async def register(
        self, store_root: Path, cluster_name: str, broker_name: str, broker_address: str
    ) -> Registration:
        """One attempt of §4.4. The files under `store_root` say where a crashed attempt stopped:
        `brokerIdentity` -> register; `brokerIdentity-temp` -> re-apply the same id and check
        code; neither -> ask for the next id. A failed apply deletes the temp file."""
        identity_path = store_root / BROKER_IDENTITY_FILE_NAME
        temp_path = temp_path_of(identity_path)
        identity = load_broker_identity(identity_path)
        if identity is None:
            temp = load_temp_broker_identity(temp_path)
            if temp is None:
                next_id = await self.get_next_broker_id(cluster_name, broker_name)
                check_code = f"{broker_address};{int(time.time() * 1000)}"
                temp = TempBrokerIdentity(cluster_name, broker_name, next_id, check_code)
                write_temp_broker_identity(temp_path, temp)
            _check_names(temp.cluster_name, temp.broker_name, cluster_name, broker_name)
            try:
                await self.apply_broker_id(temp)
            except Exception:
                delete_temp_broker_identity(temp_path)
                raise
            identity = BrokerIdentity(cluster_name, broker_name, temp.broker_id)
            write_broker_identity(identity_path, identity)
            delete_temp_broker_identity(temp_path)
        _check_names(identity.cluster_name, identity.broker_name, cluster_name, broker_name)
        return await self.register_broker(
            cluster_name, broker_name, identity.broker_id, broker_address
        )

    async def elect_master(
        self, cluster_name: str, broker_name: str, broker_id: int
    ) -> tuple[ElectMasterResponseHeader, ElectMasterResponseBody]:
        """CONTROLLER_ELECT_MASTER for this broker (§4.5); 2011 (the master stays) is not an
        error: the answer describes the current master either way."""
        header = ElectMasterRequestHeader(
            broker_name, broker_id, int(time.time() * 1000), cluster_name=cluster_name
        )
        request = RemotingCommand.request(
            RequestCode.CONTROLLER_ELECT_MASTER, header.to_ext_fields()
        )
        leader = self.leader_addr or await self.find_leader()
        client = await self._client(leader)
        response = await client.invoke(request, self.request_timeout_ms)
        if response.code not in (
            ResponseCode.SUCCESS,
            ControllerMasterStillExistError.code_expected,
        ):
            raise response_error("CONTROLLER_ELECT_MASTER", response.code, response.remark)
        body = (
            ElectMasterResponseBody.decode(response.body)
            if response.body
            else ElectMasterResponseBody()
        )
        return ElectMasterResponseHeader.from_ext_fields(response.ext_fields), body

    async def heartbeat(self, header: BrokerHeartbeatRequestHeader) -> list[str]:
        """BROKER_HEARTBEAT oneway to every controller at once (a controller that is down or
        slow to connect delays none of the others); returns the addresses it failed for."""
        request = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, header.to_ext_fields())

        async def one(addr: str) -> str | None:
            try:
                client = await self._client(addr)
                await client.invoke_oneway(request, HEARTBEAT_TIMEOUT_MS_DEFAULT)
            except RemotingError:
                return addr
            return None

        results = await asyncio.gather(*(one(addr) for addr in self.addrs))
        return [addr for addr in results if addr is not None]

    async def get_replica_info(self, broker_name: str) -> ReplicaInfo:
        header = GetReplicaInfoRequestHeader(broker_name)
        response = await self._invoke_leader(
            "CONTROLLER_GET_REPLICA_INFO",
            RemotingCommand.request(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, header.to_ext_fields()
            ),
        )
        return ReplicaInfo(
            GetReplicaInfoResponseHeader.from_ext_fields(response.ext_fields),
            SyncStateSet.decode(response.body) if response.body else SyncStateSet(),
        )

    async def get_sync_state_data(self, broker_name: str) -> bytes:
        """CONTROLLER_GET_SYNC_STATE_DATA for one broker set: the response body, a JSON
        `BrokerReplicasInfo` (every registered id with its address; decoded by
        controller.messages)."""
        response = await self._invoke_leader(
            "CONTROLLER_GET_SYNC_STATE_DATA",
            RemotingCommand.request(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                                    body=json.dumps([broker_name]).encode()),
        )
        return response.body

    async def alter_sync_state_set(
        self, broker_name: str, master_broker_id: int, master_epoch: int, proposed: SyncStateSet
    ) -> SyncStateSet:
        """Propose `proposed` (its epoch = the current one); returns the new set and epoch."""
        header = AlterSyncStateSetRequestHeader(
            broker_name, master_broker_id, master_epoch, int(time.time() * 1000)
        )
        response = await self._invoke_leader(
            "CONTROLLER_ALTER_SYNC_STATE_SET",
            RemotingCommand.request(
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                header.to_ext_fields(),
                proposed.encode(),
            ),
        )
        answer = AlterSyncStateSetResponseHeader.from_ext_fields(response.ext_fields)
        body = SyncStateSet.decode(response.body) if response.body else None
        if body is not None:
            return body
        epoch = answer.new_sync_state_set_epoch
        return SyncStateSet(
            proposed.sync_state_set, proposed.sync_state_set_epoch + 1 if epoch is None else epoch
        )

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


def decode_role_change(
    request: RemotingCommand,
) -> tuple[NotifyBrokerRoleChangedRequestHeader, SyncStateSet]:
    """A pushed NOTIFY_BROKER_ROLE_CHANGED: its header and SyncStateSet (typed errors if bad)."""
    header = NotifyBrokerRoleChangedRequestHeader.from_ext_fields(request.ext_fields)
    body = SyncStateSet.decode(request.body) if request.body else SyncStateSet()
    return header, body


def _check_names(file_cluster: str, file_broker: str, cluster: str, broker: str) -> None:
    if (file_cluster, file_broker) != (cluster, broker):
        raise BrokerIdentityMismatchError(
            f"broker identity file names {file_cluster}#{file_broker}, config {cluster}#{broker}"
        )
