"""The broker <-> controller messages (docs/remoting-protocol.md §8-§9) as frozen values.

Headers are `CommandHeader`s (attribute = Java field in snake_case, wire key = camelCase);
bodies are `JSONBody`s encoded as fastjson writes them. Both releases (5.3.3, 5.5.0) use the
same keys for every message here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from remoting.bodies import JSONBody, _as_int, _as_long, _as_object, _get, _tuple_of
from remoting.errors import BodyDecodeError
from remoting.fastjson import JSONValue
from remoting.headers import CommandHeader, Int32, Int64

INT32_MAX = 2**31 - 1
"""`brokerElectionPriority`'s default (`Integer.MAX_VALUE`; lower = preferred)."""

# --------------------------------------------------------------------------------------------
# Bodies (§8.1)


@dataclass(frozen=True, slots=True)
class SyncStateSet(JSONBody):
    """The in-sync replica set of a broker set: controller broker ids and the set's epoch."""

    sync_state_set: frozenset[int] = field(default_factory=frozenset)
    sync_state_set_epoch: int = 0

    def to_json_value(self) -> dict[str, JSONValue]:
        # Java's HashSet<Long> iterates small ids in ascending order; fastjson writes that order.
        members: list[JSONValue] = [*sorted(self.sync_state_set)]
        return {"syncStateSet": members, "syncStateSetEpoch": self.sync_state_set_epoch}

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> SyncStateSet:
        obj = _as_object(value, path)
        ids: tuple[int, ...] = _get(obj, "syncStateSet", path, _tuple_of(_as_long), ())
        epoch = _get(obj, "syncStateSetEpoch", path, _as_int, 0)
        if not -(2**31) <= epoch < 2**31:
            raise BodyDecodeError(f"{path}.syncStateSetEpoch={epoch} is not an int32")
        return cls(frozenset(ids), epoch)


# --------------------------------------------------------------------------------------------
# CONTROLLER_GET_METADATA_INFO (1005): no request header


@dataclass(frozen=True, slots=True)
class GetMetaDataResponseHeader(CommandHeader):
    """Who leads the controller group; `is_leader` says whether the answering node does."""

    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: bool = False
    peers: str | None = None


# --------------------------------------------------------------------------------------------
# CONTROLLER_GET_NEXT_BROKER_ID (1012), CONTROLLER_APPLY_BROKER_ID (1013)


@dataclass(frozen=True, slots=True)
class GetNextBrokerIdRequestHeader(CommandHeader):
    cluster_name: str
    broker_name: str


@dataclass(frozen=True, slots=True)
class GetNextBrokerIdResponseHeader(CommandHeader):
    cluster_name: str | None = None
    broker_name: str | None = None
    next_broker_id: Int64 | None = None


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdRequestHeader(CommandHeader):
    """`register_check_code` is `"<ip:port>;<millis>"`; the controller stores the address part."""

    cluster_name: str
    broker_name: str
    applied_broker_id: Int64
    register_check_code: str


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdResponseHeader(CommandHeader):
    cluster_name: str | None = None
    broker_name: str | None = None


# --------------------------------------------------------------------------------------------
# CONTROLLER_REGISTER_BROKER (1003)


@dataclass(frozen=True, slots=True)
class RegisterBrokerToControllerRequestHeader(CommandHeader):
    cluster_name: str
    broker_name: str
    broker_id: Int64
    broker_address: str
    invoke_time: Int64


@dataclass(frozen=True, slots=True)
class RegisterBrokerToControllerResponseHeader(CommandHeader):
    """The master fields are present only when the set has an alive master."""

    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: Int64 | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None


# --------------------------------------------------------------------------------------------
# BROKER_HEARTBEAT (904) to the controller (oneway)


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequestHeader(CommandHeader):
    """Note the Java spelling `heartbeatTimeoutMills`."""

    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: Int64 | None = None
    epoch: Int32 | None = None
    max_offset: Int64 | None = None
    confirm_offset: Int64 | None = None
    heartbeat_timeout_mills: Int64 | None = None
    election_priority: Int32 | None = None


# --------------------------------------------------------------------------------------------
# CONTROLLER_GET_REPLICA_INFO (1004)


@dataclass(frozen=True, slots=True)
class GetReplicaInfoRequestHeader(CommandHeader):
    broker_name: str


@dataclass(frozen=True, slots=True)
class GetReplicaInfoResponseHeader(CommandHeader):
    master_broker_id: Int64 | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None


# --------------------------------------------------------------------------------------------
# CONTROLLER_ALTER_SYNC_STATE_SET (1001); body: the proposed SyncStateSet


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetRequestHeader(CommandHeader):
    broker_name: str
    master_broker_id: Int64
    master_epoch: Int32
    invoke_time: Int64


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetResponseHeader(CommandHeader):
    new_sync_state_set_epoch: Int32 | None = None


# --------------------------------------------------------------------------------------------
# NOTIFY_BROKER_ROLE_CHANGED (1008), controller -> broker; body: SyncStateSet


@dataclass(frozen=True, slots=True)
class NotifyBrokerRoleChangedRequestHeader(CommandHeader):
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None
    master_broker_id: Int64 | None = None


# --------------------------------------------------------------------------------------------
# CONTROLLER_ELECT_MASTER (1002), what the broker sends when no master is known (§4.5)


@dataclass(frozen=True, slots=True)
class ElectMasterRequestHeader(CommandHeader):
    broker_name: str
    broker_id: Int64
    invoke_time: Int64
    cluster_name: str = ""
    designate_elect: bool = False


@dataclass(frozen=True, slots=True)
class ElectMasterResponseHeader(CommandHeader):
    master_broker_id: Int64 | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None


@dataclass(frozen=True, slots=True)
class ElectMasterResponseBody(JSONBody):
    """`broker_member_group` (present only after a new election) is kept as raw JSON."""

    sync_state_set: frozenset[int] = field(default_factory=frozenset)
    broker_member_group: JSONValue = None

    def to_json_value(self) -> dict[str, JSONValue]:
        value: dict[str, JSONValue] = {}
        if self.broker_member_group is not None:
            value["brokerMemberGroup"] = self.broker_member_group
        members: list[JSONValue] = [*sorted(self.sync_state_set)]
        value["syncStateSet"] = members
        return value

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> ElectMasterResponseBody:
        obj = _as_object(value, path)
        ids: tuple[int, ...] = _get(obj, "syncStateSet", path, _tuple_of(_as_long), ())
        return cls(frozenset(ids), obj.get("brokerMemberGroup"))
