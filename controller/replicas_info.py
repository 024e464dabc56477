"""Per broker set replica state, and the controller requests decided against it: RocketMQ's
`ReplicasInfoManager` as a pure core (docs/replicas-manager.md §9, docs/remoting-protocol.md §8).

State per broker set (`BrokerSet`): cluster name, `next_assign_broker_id`, the applied broker ids
with their address and registerCheckCode, master, masterEpoch, SyncStateSet and its epoch. It
changes only through `apply(event)`.

Each request method takes the request's values and the set's live heartbeat records, and
returns a `ControllerResult`: the response (code, remark, header, body) and the events to make
durable and apply before answering. A refused request (stale epoch, wrong master, unknown
broker, ...) returns RocketMQ's response code and no events: it changes nothing.

Invariants:
- master_epoch and sync_state_set_epoch never decrease; every ElectMasterEvent raises
  master_epoch by one, and a successful one raises sync_state_set_epoch by one too.
- The master, when set, is a member of the SyncStateSet; every member is an applied id (until a
  CleanBrokerData removes ids).
- Broker ids are never reused within a set: next_assign_broker_id only grows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from controller.broker_heartbeat import BrokerLiveInfo
from controller.elect_policy import elect
from controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
)
from controller.messages import BrokerReplicasInfo, ReplicaIdentity, ReplicasInfo
from controller_client.messages import (
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdResponseHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
)
from remoting.codes import ResponseCode
from remoting.fastjson import JSONValue
from remoting.headers import CommandHeader

CONTROLLER_TRIGGERED = -1
"""The `brokerId` of an election the controller starts itself (a master went inactive)."""


@dataclass(frozen=True, slots=True)
class BrokerRecord:
    address: str
    register_check_code: str


@dataclass(frozen=True, slots=True)
class BrokerSet:
    """One broker set's replica info (Java's BrokerReplicaInfo + SyncStateInfo)."""

    cluster_name: str
    broker_name: str
    next_assign_broker_id: int = 1
    brokers: Mapping[int, BrokerRecord] = field(default_factory=dict)
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    @property
    def master_address(self) -> str | None:
        if self.master_broker_id is None:
            return None
        record = self.brokers.get(self.master_broker_id)
        return None if record is None else record.address

    def member_group(self) -> JSONValue:
        """`BrokerMemberGroup` JSON: every applied id and its address."""
        return {
            "brokerAddrs": {str(i): self.brokers[i].address for i in sorted(self.brokers)},
            "brokerName": self.broker_name,
            "cluster": self.cluster_name,
        }


@dataclass(frozen=True, slots=True)
class ControllerResult:
    """A decided request: its response, and the events to persist and apply before it."""

    code: int
    remark: str | None = None
    header: CommandHeader | None = None
    body: bytes = b""
    events: tuple[Event, ...] = ()

    @property
    def elected(self) -> ElectMasterEvent | None:
        """The successful election among the events (role-change pushes follow it)."""
        for event in self.events:
            if isinstance(event, ElectMasterEvent) and event.new_master_broker_id is not None:
                return event
        return None


def _refused(code: int, remark: str, header: CommandHeader | None = None) -> ControllerResult:
    return ControllerResult(code, remark, header)


class ReplicasInfoManager:
    """Every broker set's replica state; `apply` changes it, the request methods decide."""

    def __init__(self) -> None:
        self._sets: dict[str, BrokerSet] = {}

    def broker_set(self, broker_name: str) -> BrokerSet | None:
        return self._sets.get(broker_name)

    @property
    def broker_names(self) -> tuple[str, ...]:
        return tuple(sorted(self._sets))

    # -- events ----------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Apply one event (from a decided request or a replayed log). Events that no longer
        fit (a set cleaned meanwhile) change nothing, as Java's state machine ignores them."""
        match event:
            case ApplyBrokerIdEvent():
                old = self._sets.get(event.broker_name)
                record = BrokerRecord(
                    event.register_check_code.split(";", 1)[0], event.register_check_code
                )
                if old is None:
                    self._sets[event.broker_name] = BrokerSet(
                        event.cluster_name,
                        event.broker_name,
                        next_assign_broker_id=event.broker_id + 1,
                        brokers={event.broker_id: record},
                    )
                elif event.broker_id not in old.brokers:
                    self._sets[event.broker_name] = replace(
                        old,
                        brokers={**old.brokers, event.broker_id: record},
                        next_assign_broker_id=old.next_assign_broker_id + 1,
                    )
            case UpdateBrokerAddressEvent():
                old = self._sets.get(event.broker_name)
                if old is not None and event.broker_id in old.brokers:
                    record = replace(old.brokers[event.broker_id], address=event.broker_address)
                    brokers = {**old.brokers, event.broker_id: record}
                    self._sets[event.broker_name] = replace(old, brokers=brokers)
            case ElectMasterEvent():
                old = self._sets.get(event.broker_name)
                if old is None:
                    return
                if event.new_master_broker_id is None:
                    self._sets[event.broker_name] = replace(
                        old, master_broker_id=None, master_epoch=old.master_epoch + 1
                    )
                else:
                    self._sets[event.broker_name] = replace(
                        old,
                        master_broker_id=event.new_master_broker_id,
                        master_epoch=old.master_epoch + 1,
                        sync_state_set=frozenset({event.new_master_broker_id}),
                        sync_state_set_epoch=old.sync_state_set_epoch + 1,
                    )
            case AlterSyncStateSetEvent():
                old = self._sets.get(event.broker_name)
                if old is not None:
                    self._sets[event.broker_name] = replace(
                        old,
                        sync_state_set=event.sync_state_set,
                        sync_state_set_epoch=old.sync_state_set_epoch + 1,
                    )
            case CleanBrokerDataEvent():
                old = self._sets.get(event.broker_name)
                if old is None:
                    return
                if event.broker_ids is None or set(old.brokers) <= event.broker_ids:
                    del self._sets[event.broker_name]
                    return
                cleaned = replace(
                    old,
                    brokers={i: r for i, r in old.brokers.items() if i not in event.broker_ids},
                    sync_state_set=old.sync_state_set - event.broker_ids,
                )
                if old.master_broker_id in event.broker_ids:
                    # The master is gone: clear it as a failed election does (epoch + 1), so
                    # polling brokers see "no master, higher epoch" and ask for an election.
                    cleaned = replace(
                        cleaned, master_broker_id=None, master_epoch=old.master_epoch + 1
                    )
                self._sets[event.broker_name] = cleaned

    # -- requests --------------------------------------------------------------------------

    def get_next_broker_id(self, cluster_name: str, broker_name: str) -> ControllerResult:
        """CONTROLLER_GET_NEXT_BROKER_ID (1012): read-only; 1 for an unknown set."""
        broker_set = self._sets.get(broker_name)
        next_id = 1 if broker_set is None else broker_set.next_assign_broker_id
        header = GetNextBrokerIdResponseHeader(cluster_name, broker_name, next_id)
        return ControllerResult(ResponseCode.SUCCESS, header=header)

    def apply_broker_id(
        self, cluster_name: str, broker_name: str, broker_id: int, register_check_code: str
    ) -> ControllerResult:
        """CONTROLLER_APPLY_BROKER_ID (1013): an unknown set takes only id 1; a known one an
        unused id, or an id held with the same check code (an idempotent retry). Else 2014."""
        header = ApplyBrokerIdResponseHeader(cluster_name, broker_name)
        broker_set = self._sets.get(broker_name)
        event = ApplyBrokerIdEvent(cluster_name, broker_name, broker_id, register_check_code)
        if broker_set is None:
            if broker_id != 1:
                return _refused(
                    ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                    f"broker set {broker_name} is new: the first broker id must be 1, "
                    f"not {broker_id}",
                    header,
                )
            return ControllerResult(ResponseCode.SUCCESS, header=header, events=(event,))
        record = broker_set.brokers.get(broker_id)
        if record is None:
            return ControllerResult(ResponseCode.SUCCESS, header=header, events=(event,))
        if record.register_check_code == register_check_code:
            return ControllerResult(ResponseCode.SUCCESS, header=header)
        return _refused(
            ResponseCode.CONTROLLER_BROKER_ID_INVALID,
            f"broker id {broker_id} of {broker_name} is held by {record.address} "
            "with another registerCheckCode",
            header,
        )

    def register_broker(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        broker_address: str,
        *,
        alive: Mapping[int, BrokerLiveInfo],
    ) -> ControllerResult:
        """CONTROLLER_REGISTER_BROKER (1003): the set and id must be known (else 2010); a new
        address is recorded; the master is reported only if it is alive."""
        broker_set = self._sets.get(broker_name)
        if broker_set is None or broker_id not in broker_set.brokers:
            return _refused(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker {broker_name} id {broker_id} has no applied broker id",
            )
        events: tuple[Event, ...] = ()
        if broker_set.brokers[broker_id].address != broker_address:
            events = (
                UpdateBrokerAddressEvent(cluster_name, broker_name, broker_id, broker_address),
            )
        master = broker_set.master_broker_id
        header = RegisterBrokerToControllerResponseHeader(cluster_name, broker_name)
        if master is not None and master in alive:
            master_address = broker_address if master == broker_id else broker_set.master_address
            header = replace(
                header,
                master_broker_id=master,
                master_address=master_address,
                master_epoch=broker_set.master_epoch,
                sync_state_set_epoch=broker_set.sync_state_set_epoch,
            )
        body = SyncStateSet(broker_set.sync_state_set, broker_set.sync_state_set_epoch).encode()
        return ControllerResult(ResponseCode.SUCCESS, header=header, body=body, events=events)

    def get_replica_info(self, broker_name: str) -> ControllerResult:
        """CONTROLLER_GET_REPLICA_INFO (1004): read-only; 2008 for an unknown set."""
        broker_set = self._sets.get(broker_name)
        if broker_set is None:
            return _refused(
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"broker set {broker_name} is unknown",
            )
        header = GetReplicaInfoResponseHeader(
            broker_set.master_broker_id, broker_set.master_address, broker_set.master_epoch
        )
        body = SyncStateSet(broker_set.sync_state_set, broker_set.sync_state_set_epoch).encode()
        return ControllerResult(ResponseCode.SUCCESS, header=header, body=body)

    def alter_sync_state_set(
        self,
        broker_name: str,
        master_broker_id: int,
        master_epoch: int,
        proposed: SyncStateSet,
        *,
        alive: Mapping[int, BrokerLiveInfo],
    ) -> ControllerResult:
        """CONTROLLER_ALTER_SYNC_STATE_SET (1001): the checks of docs/remoting-protocol.md §8.9 in
        order, first failure wins."""
        broker_set = self._sets.get(broker_name)
        failed = ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
        if broker_set is None:
            return _refused(failed, f"broker set {broker_name} is unknown")
        new_set = proposed.sync_state_set
        if new_set == broker_set.sync_state_set:
            return _refused(failed, f"SyncStateSet {sorted(new_set)} is unchanged")
        if master_broker_id != broker_set.master_broker_id:
            return _refused(
                ResponseCode.CONTROLLER_INVALID_MASTER,
                f"broker {master_broker_id} is not the master "
                f"(the master is {broker_set.master_broker_id})",
            )
        if master_epoch != broker_set.master_epoch:
            return _refused(
                ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"masterEpoch {master_epoch} is not the current {broker_set.master_epoch}",
            )
        if proposed.sync_state_set_epoch != broker_set.sync_state_set_epoch:
            return _refused(
                ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                f"syncStateSetEpoch {proposed.sync_state_set_epoch} is not the current "
                f"{broker_set.sync_state_set_epoch}",
            )
        for member in sorted(new_set):
            if member not in broker_set.brokers:
                return _refused(
                    ResponseCode.CONTROLLER_INVALID_REPLICAS,
                    f"broker {member} has no applied broker id",
                )
            if member not in alive:
                return _refused(
                    ResponseCode.CONTROLLER_BROKER_NOT_ALIVE, f"broker {member} is not alive"
                )
        if broker_set.master_broker_id not in new_set:
            return _refused(
                failed, f"SyncStateSet {sorted(new_set)} lacks master {master_broker_id}"
            )
        new_epoch = broker_set.sync_state_set_epoch + 1
        return ControllerResult(
            ResponseCode.SUCCESS,
            header=AlterSyncStateSetResponseHeader(new_epoch),
            body=SyncStateSet(new_set, new_epoch).encode(),
            events=(AlterSyncStateSetEvent(broker_name, new_set),),
        )

    def elect_master(
        self,
        broker_name: str,
        broker_id: int,
        *,
        designate_elect: bool,
        alive: Mapping[int, BrokerLiveInfo],
        enable_elect_unclean_master: bool,
    ) -> ControllerResult:
        """CONTROLLER_ELECT_MASTER (1002), from a broker (its id) or from the controller itself
        (`CONTROLLER_TRIGGERED`); docs/replicas-manager.md §9.3. One difference from Java: a broker
        id that was never applied gets 2010 instead of (on a set's first election) the role."""
        broker_set = self._sets.get(broker_name)
        if broker_set is None:
            return _refused(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker set {broker_name} is unknown",
            )
        triggered_by_controller = broker_id == CONTROLLER_TRIGGERED
        if not triggered_by_controller and broker_id not in broker_set.brokers:
            # Java would make even an unknown id master on a set's first election (no
            # membership check); a master without an applied id and address helps nobody.
            return _refused(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker {broker_id} of {broker_name} has no applied broker id",
            )
        if broker_set.master_epoch == 0 and not triggered_by_controller:
            new_master: int | None = broker_id  # the set never had a master: the asker wins
        else:
            new_master = elect(
                sync_state_set=broker_set.sync_state_set,
                all_replicas=frozenset(broker_set.brokers) if enable_elect_unclean_master else None,
                old_master=broker_set.master_broker_id,
                preferred_broker_id=broker_id if designate_elect else None,
                alive=alive,
            )
        if new_master is not None and new_master == broker_set.master_broker_id:
            return ControllerResult(
                ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                f"broker {new_master} is still the master of {broker_name}",
                ElectMasterResponseHeader(
                    new_master,
                    broker_set.master_address,
                    broker_set.master_epoch,
                    broker_set.sync_state_set_epoch,
                ),
                ElectMasterResponseBody(broker_set.sync_state_set).encode(),
            )
        if new_master is None:
            if triggered_by_controller:
                return ControllerResult(
                    ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                    f"no alive in-sync broker of {broker_name} can be master",
                    ElectMasterResponseHeader(None, None, broker_set.master_epoch + 1),
                    events=(ElectMasterEvent(broker_name, None),),
                )
            return _refused(
                ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                f"no alive in-sync broker of {broker_name} can be master",
            )
        record = broker_set.brokers.get(new_master)
        return ControllerResult(
            ResponseCode.SUCCESS,
            header=ElectMasterResponseHeader(
                new_master,
                None if record is None else record.address,
                broker_set.master_epoch + 1,
                broker_set.sync_state_set_epoch + 1,
            ),
            body=ElectMasterResponseBody(
                frozenset({new_master}), broker_set.member_group()
            ).encode(),
            events=(ElectMasterEvent(broker_name, new_master),),
        )

    def get_sync_state_data(
        self, broker_names: list[str], *, alive_by_set: Mapping[str, Mapping[int, BrokerLiveInfo]]
    ) -> ControllerResult:
        """CONTROLLER_GET_SYNC_STATE_DATA (1006): read-only; unknown names are left out."""
        table: dict[str, ReplicasInfo] = {}
        for name in broker_names:
            broker_set = self._sets.get(name)
            if broker_set is None:
                continue
            alive = alive_by_set.get(name, {})
            members = [
                ReplicaIdentity(name, i, broker_set.brokers[i].address, i in alive)
                for i in sorted(broker_set.brokers)
            ]
            table[name] = ReplicasInfo(
                master_broker_id=broker_set.master_broker_id,
                master_address=broker_set.master_address,
                master_epoch=broker_set.master_epoch,
                sync_state_set_epoch=broker_set.sync_state_set_epoch,
                in_sync_replicas=tuple(
                    m for m in members if m.broker_id in broker_set.sync_state_set
                ),
                not_in_sync_replicas=tuple(
                    m for m in members if m.broker_id not in broker_set.sync_state_set
                ),
            )
        return ControllerResult(ResponseCode.SUCCESS, body=BrokerReplicasInfo(table).encode())

    def clean_broker_data(
        self,
        broker_name: str,
        broker_ids: frozenset[int] | None,
        *,
        clean_living_broker: bool,
        alive: Mapping[int, BrokerLiveInfo],
    ) -> ControllerResult:
        """CLEAN_BROKER_DATA (1011): forget a broker set (`broker_ids` None) or some of its
        ids. Unknown set or ids, or a living broker without `clean_living_broker`: 2009.
        Cleaning the master's id also clears the master and raises masterEpoch (pyrmq's
        choice: a master without an id would be stuck in the set)."""
        invalid = ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        broker_set = self._sets.get(broker_name)
        if broker_set is None:
            return _refused(invalid, f"broker set {broker_name} is unknown")
        targets = frozenset(broker_set.brokers) if broker_ids is None else broker_ids
        for broker_id in sorted(targets):
            if broker_id not in broker_set.brokers:
                return _refused(invalid, f"broker {broker_id} of {broker_name} is unknown")
            if not clean_living_broker and broker_id in alive:
                return _refused(
                    invalid,
                    f"broker {broker_id} of {broker_name} is alive; "
                    "clean it with isCleanLivingBroker=true",
                )
        return ControllerResult(
            ResponseCode.SUCCESS, events=(CleanBrokerDataEvent(broker_name, broker_ids),)
        )
