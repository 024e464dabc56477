"""`ControllerManager`: the embedded single-node controller's shell (RocketMQ's ControllerManager
+ a one-node controller, always leader).

It answers the controller codes (docs/remoting-protocol.md §8, and GET_CONTROLLER_CONFIG; not
UPDATE_CONTROLLER_CONFIG: the configuration is read once, at start) from the pure cores:
`replicas_info` decides a request and returns events, the `event_log` makes them durable, then
they are applied and the request is answered. Heartbeats (904) feed `broker_heartbeat`. It
elects a new master as soon as the master's connection to the controller closes (as the Java
controller does), when the heartbeat scan finds the master expired, and when the inactive-master
scan finds a set with no live master but a live member; after each successful election it pushes
NOTIFY_BROKER_ROLE_CHANGED (1008) to the set's alive brokers (a new connection to each broker's
registered address, oneway, no retry: the brokers' GET_REPLICA_INFO poll is the safety net).

Invariants:
- A state-changing request is decided, logged and applied under one lock, so every decision
  sees the state left by the previous one; nothing is answered before its events are fsynced.
- Reads (GET_REPLICA_INFO, GET_NEXT_BROKER_ID, GET_SYNC_STATE_DATA, GET_METADATA_INFO) are
  served from memory without the lock, as Java serves them without a Raft round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final

from controller.broker_heartbeat import (
    ELECTION_PRIORITY_DEFAULT,
    HEARTBEAT_TIMEOUT_MS_DEFAULT,
    BrokerHeartbeatManager,
    BrokerKey,
    BrokerLiveInfo,
    ChannelId,
    Heartbeat,
)
from controller.config import ControllerConfig
from controller.event_log import EventLog
from controller.messages import (
    CleanControllerBrokerDataRequestHeader,
    decode_broker_names,
    parse_broker_ids,
)
from controller.replicas_info import CONTROLLER_TRIGGERED, ControllerResult, ReplicasInfoManager
from controller_client.messages import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request_code_not_supported
from remoting.connection import RemotingConnection
from remoting.errors import RemotingError

log = logging.getLogger(__name__)

CONTROLLER_GROUP: Final = "pyrmq"
CONTROLLER_ID: Final = "n0"
NOTIFY_TIMEOUT_MS: Final = 3_000

CONTROLLER_CODES: Final = frozenset(
    {
        RequestCode.BROKER_HEARTBEAT,
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        RequestCode.CONTROLLER_ELECT_MASTER,
        RequestCode.CONTROLLER_REGISTER_BROKER,
        RequestCode.CONTROLLER_GET_REPLICA_INFO,
        RequestCode.CONTROLLER_GET_METADATA_INFO,
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
        RequestCode.CLEAN_BROKER_DATA,
        RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
        RequestCode.GET_CONTROLLER_CONFIG,
    }
)


def _respond(request: RemotingCommand, result: ControllerResult) -> RemotingCommand:
    return request.make_response(
        result.code,
        remark=result.remark,
        ext_fields=None if result.header is None else result.header.to_ext_fields(),
        body=result.body,
    )


class ControllerManager:
    """The controller's state and its requests; `open()` replays the log, `close()` ends it.

    `spawn` starts a task owned by the caller's TaskGroup (role-change pushes, elections after a
    channel close); `clock_ms` is the monotonic clock of the heartbeat table.
    """

    def __init__(
        self,
        config: ControllerConfig,
        *,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        clock_ms: Callable[[], int],
    ) -> None:
        self._config = config
        self._spawn = spawn
        self._clock_ms = clock_ms
        self.replicas_info = ReplicasInfoManager()
        self.heartbeats = BrokerHeartbeatManager()
        self._lock = asyncio.Lock()
        self._event_log: EventLog | None = None
        self._stopping = False
        self._electing: set[str] = set()
        # Set when a heartbeat may have moved the table's first expiry earlier (a new live
        # record, or a shorter timeout): the server's expiry wait starts over.
        self.expiry_moved = asyncio.Event()

    def open(self) -> int:
        """Open the event log under `controllerStorePath` and replay it; returns the number of
        events replayed. Blocking; raises EventLogError / EventDecodeError."""
        if not self._config.controller_store_path:
            raise ValueError("controllerStorePath is empty: the controller needs its event log")
        self._event_log, events = EventLog.open(Path(self._config.controller_store_path))
        for event in events:
            self.replicas_info.apply(event)
        log.info(
            "controller event log replayed path=%s events=%d broker_sets=%d",
            self._event_log.path,
            len(events),
            len(self.replicas_info.broker_names),
        )
        return len(events)

    def stop(self) -> None:
        """The server is shutting down: connections closing now are not brokers failing, so
        they trigger no election."""
        self._stopping = True

    def close(self) -> None:
        if self._event_log is not None:
            self._event_log.close()
            self._event_log = None

    # -- liveness --------------------------------------------------------------------------

    def _alive(self, broker_name: str) -> dict[int, BrokerLiveInfo]:
        broker_set = self.replicas_info.broker_set(broker_name)
        if broker_set is None:
            return {}
        return self.heartbeats.alive_in(
            broker_set.cluster_name, broker_name, now_ms=self._clock_ms()
        )

    def on_channel_close(self, channel: ChannelId) -> None:
        """A connection closed: its brokers are inactive now (elect at once if one was master)."""
        self._on_inactive(self.heartbeats.on_channel_close(channel), reason="channel closed")

    def next_heartbeat_expiry_ms(self) -> int | None:
        """When the first live broker's heartbeat expires (None: no live broker)."""
        return self.heartbeats.next_expiry_ms()

    def scan_not_active_broker(self) -> list[tuple[BrokerKey, BrokerLiveInfo]]:
        """Drop expired brokers (the caller closes their channels); elect for expired masters."""
        expired = self.heartbeats.scan_not_active(now_ms=self._clock_ms())
        self._on_inactive(expired, reason="heartbeat timeout")
        return expired

    def _on_inactive(self, brokers: list[tuple[BrokerKey, BrokerLiveInfo]], *, reason: str) -> None:
        for (cluster_name, broker_name, broker_id), info in brokers:
            broker_set = self.replicas_info.broker_set(broker_name)
            is_master = broker_set is not None and broker_set.master_broker_id == broker_id
            log.warning(
                "broker inactive reason=%s cluster=%s broker_name=%s broker_id=%d addr=%s "
                "was_master=%s",
                reason,
                cluster_name,
                broker_name,
                broker_id,
                info.broker_addr,
                is_master,
            )
            if is_master and not self._stopping:
                self._spawn(self.trigger_elect_master(broker_name, reason=reason))

    def scan_inactive_master(self) -> None:
        """Elect for every set whose master is not alive while some member is. A set without
        a master (never elected, or cleared by a failed election) is left to its brokers'
        ELECT_MASTER, as in Java."""
        for broker_name in self.replicas_info.broker_names:
            broker_set = self.replicas_info.broker_set(broker_name)
            assert broker_set is not None
            alive = self._alive(broker_name)
            master = broker_set.master_broker_id
            if master is not None and alive and master not in alive:
                self._spawn(self.trigger_elect_master(broker_name, reason="inactive master scan"))

    async def trigger_elect_master(self, broker_name: str, *, reason: str) -> None:
        """A controller-triggered election, retried up to `electMasterMaxRetryCount` times
        while it fails (each failed attempt still clears the master and bumps masterEpoch).
        One at a time per broker set, and only while the set has a master that is not alive: a
        trigger that finds one running, or the matter settled, is dropped, so a channel close
        and a scan seeing the same dead master do not both bump the epoch."""
        if broker_name in self._electing or not self._master_inactive(broker_name):
            return  # running already, or settled meanwhile (new master, or cleared)
        self._electing.add(broker_name)
        try:
            await self._elect_with_retries(broker_name, reason=reason)
        finally:
            self._electing.discard(broker_name)

    def _master_inactive(self, broker_name: str) -> bool:
        broker_set = self.replicas_info.broker_set(broker_name)
        if broker_set is None or broker_set.master_broker_id is None:
            return False
        return broker_set.master_broker_id not in self._alive(broker_name)

    async def _elect_with_retries(self, broker_name: str, *, reason: str) -> None:
        for attempt in range(1, self._config.elect_master_max_retry_count + 1):
            result = await self._decide_and_apply(
                lambda: self.replicas_info.elect_master(
                    broker_name,
                    CONTROLLER_TRIGGERED,
                    designate_elect=False,
                    alive=self._alive(broker_name),
                    enable_elect_unclean_master=self._config.enable_elect_unclean_master,
                )
            )
            log.info(
                "controller-triggered election broker_name=%s reason=%s attempt=%d code=%d "
                "remark=%s",
                broker_name,
                reason,
                attempt,
                result.code,
                result.remark,
            )
            if result.code in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
                return
            if result.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:
                return  # the set was cleaned meanwhile

    # -- deciding --------------------------------------------------------------------------

    async def _decide_and_apply(self, decide: Callable[[], ControllerResult]) -> ControllerResult:
        async with self._lock:
            result = decide()
            if result.events:
                assert self._event_log is not None, "open() the controller first"
                await self._event_log.append(result.events)  # durable before applied/answered
                for event in result.events:
                    self.replicas_info.apply(event)
        elected = result.elected
        if elected is not None and self._config.notify_broker_role_changed:
            self._notify_role_changed(elected.broker_name)
        return result

    def _notify_role_changed(self, broker_name: str) -> None:
        broker_set = self.replicas_info.broker_set(broker_name)
        if broker_set is None or broker_set.master_broker_id is None:
            return
        header = NotifyBrokerRoleChangedRequestHeader(
            broker_set.master_address,
            broker_set.master_epoch,
            broker_set.sync_state_set_epoch,
            broker_set.master_broker_id,
        )
        body = SyncStateSet(broker_set.sync_state_set, broker_set.sync_state_set_epoch).encode()
        for broker_id in sorted(self._alive(broker_name)):
            record = broker_set.brokers.get(broker_id)
            if record is not None:
                request = RemotingCommand.request(
                    RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header.to_ext_fields(), body
                )
                self._spawn(self._push(record.address, request, broker_name, broker_id))

    async def _push(
        self, address: str, request: RemotingCommand, broker_name: str, broker_id: int
    ) -> None:
        host, _, port = address.rpartition(":")
        try:
            async with await RemotingClient.connect(
                host, int(port), connect_timeout_ms=NOTIFY_TIMEOUT_MS
            ) as client:
                await client.invoke_oneway(request, NOTIFY_TIMEOUT_MS)
        except (RemotingError, ValueError) as err:
            log.warning(
                "role change push failed broker_name=%s broker_id=%d addr=%s error=%s",
                broker_name,
                broker_id,
                address,
                err,
            )

    # -- requests --------------------------------------------------------------------------

    async def handle(
        self, connection: RemotingConnection, channel: ChannelId, request: RemotingCommand
    ) -> RemotingCommand:
        """Answer one controller request (`request.code` in CONTROLLER_CODES)."""
        match request.code:
            case RequestCode.BROKER_HEARTBEAT:
                return self._heartbeat(channel, request)
            case RequestCode.CONTROLLER_GET_METADATA_INFO:
                address = connection.local_address
                header = GetMetaDataResponseHeader(
                    group=CONTROLLER_GROUP,
                    controller_leader_id=CONTROLLER_ID,
                    controller_leader_address=address,
                    is_leader=True,
                    peers=f"{CONTROLLER_ID}:{address};",
                )
                return request.make_response(
                    ResponseCode.SUCCESS, ext_fields=header.to_ext_fields()
                )
            case RequestCode.GET_CONTROLLER_CONFIG:
                # Java properties text, as Java's MixAll.properties2String writes it.
                text = "".join(f"{key}={value}\n" for key, value in self._config.properties())
                return request.make_response(ResponseCode.SUCCESS, body=text.encode("utf-8"))
            case RequestCode.CONTROLLER_GET_NEXT_BROKER_ID:
                next_id = GetNextBrokerIdRequestHeader.from_ext_fields(request.ext_fields)
                return _respond(
                    request,
                    self.replicas_info.get_next_broker_id(
                        next_id.cluster_name, next_id.broker_name
                    ),
                )
            case RequestCode.CONTROLLER_APPLY_BROKER_ID:
                apply = ApplyBrokerIdRequestHeader.from_ext_fields(request.ext_fields)
                result = await self._decide_and_apply(
                    lambda: self.replicas_info.apply_broker_id(
                        apply.cluster_name,
                        apply.broker_name,
                        apply.applied_broker_id,
                        apply.register_check_code,
                    )
                )
                return _respond(request, result)
            case RequestCode.CONTROLLER_REGISTER_BROKER:
                register = RegisterBrokerToControllerRequestHeader.from_ext_fields(
                    request.ext_fields
                )
                result = await self._decide_and_apply(
                    lambda: self.replicas_info.register_broker(
                        register.cluster_name,
                        register.broker_name,
                        register.broker_id,
                        register.broker_address,
                        alive=self._alive(register.broker_name),
                    )
                )
                return _respond(request, result)
            case RequestCode.CONTROLLER_GET_REPLICA_INFO:
                replica = GetReplicaInfoRequestHeader.from_ext_fields(request.ext_fields)
                return _respond(request, self.replicas_info.get_replica_info(replica.broker_name))
            case RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET:
                alter = AlterSyncStateSetRequestHeader.from_ext_fields(request.ext_fields)
                proposed = SyncStateSet.decode(request.body) if request.body else SyncStateSet()
                result = await self._decide_and_apply(
                    lambda: self.replicas_info.alter_sync_state_set(
                        alter.broker_name,
                        alter.master_broker_id,
                        alter.master_epoch,
                        proposed,
                        alive=self._alive(alter.broker_name),
                    )
                )
                return _respond(request, result)
            case RequestCode.CONTROLLER_ELECT_MASTER:
                elect = ElectMasterRequestHeader.from_ext_fields(request.ext_fields)
                result = await self._decide_and_apply(
                    lambda: self.replicas_info.elect_master(
                        elect.broker_name,
                        elect.broker_id,
                        designate_elect=elect.designate_elect,
                        alive=self._alive(elect.broker_name),
                        enable_elect_unclean_master=self._config.enable_elect_unclean_master,
                    )
                )
                return _respond(request, result)
            case RequestCode.CONTROLLER_GET_SYNC_STATE_DATA:
                names = decode_broker_names(request.body) if request.body else []
                return _respond(
                    request,
                    self.replicas_info.get_sync_state_data(
                        names, alive_by_set={name: self._alive(name) for name in names}
                    ),
                )
            case RequestCode.CLEAN_BROKER_DATA:
                clean = CleanControllerBrokerDataRequestHeader.from_ext_fields(request.ext_fields)
                ids = parse_broker_ids(clean.broker_controller_ids_to_clean)
                result = await self._decide_and_apply(
                    lambda: self.replicas_info.clean_broker_data(
                        clean.broker_name,
                        ids,
                        clean_living_broker=clean.is_clean_living_broker,
                        alive=self._alive(clean.broker_name),
                    )
                )
                if result.code == ResponseCode.SUCCESS:
                    self.heartbeats.forget(clean.cluster_name or "", clean.broker_name, ids)
                    log.info(
                        "broker data cleaned broker_name=%s broker_ids=%s",
                        clean.broker_name,
                        "all" if ids is None else sorted(ids),
                    )
                return _respond(request, result)
            case _:
                return request_code_not_supported(request)

    def _heartbeat(self, channel: ChannelId, request: RemotingCommand) -> RemotingCommand:
        header = BrokerHeartbeatRequestHeader.from_ext_fields(request.ext_fields)
        if header.broker_id is None:
            return request.make_response(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                remark="Heart beat with empty brokerId",
            )
        heartbeat = Heartbeat(
            cluster_name=header.cluster_name,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
            broker_addr=header.broker_addr,
            epoch=-1 if header.epoch is None else header.epoch,
            max_offset=-1 if header.max_offset is None else header.max_offset,
            confirm_offset=-1 if header.confirm_offset is None else header.confirm_offset,
            heartbeat_timeout_ms=(
                HEARTBEAT_TIMEOUT_MS_DEFAULT
                if header.heartbeat_timeout_mills is None
                else header.heartbeat_timeout_mills
            ),
            election_priority=(
                ELECTION_PRIORITY_DEFAULT
                if header.election_priority is None
                else header.election_priority
            ),
        )
        before = self.heartbeats.get(
            (heartbeat.cluster_name, heartbeat.broker_name, heartbeat.broker_id))
        if before is None or heartbeat.heartbeat_timeout_ms < before.heartbeat_timeout_ms:
            self.expiry_moved.set()
        if self.heartbeats.on_broker_heartbeat(heartbeat, channel=channel, now_ms=self._clock_ms()):
            log.info(
                "broker alive cluster=%s broker_name=%s broker_id=%d addr=%s timeout_ms=%d",
                heartbeat.cluster_name,
                heartbeat.broker_name,
                heartbeat.broker_id,
                heartbeat.broker_addr,
                heartbeat.heartbeat_timeout_ms,
            )
        return request.make_response(ResponseCode.SUCCESS, remark="Heart beat success")
