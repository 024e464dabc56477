"""The admin messages of the controller (docs/remoting-protocol.md §8.10-§8.11, §9.2), beside the
broker-side ones in `controller_client.messages`.

- CONTROLLER_GET_SYNC_STATE_DATA (1006): request body a JSON array of broker names, response
  body `BrokerReplicasInfo`.
- CLEAN_BROKER_DATA (1011): `CleanControllerBrokerDataRequestHeader`.
- GET_BROKER_EPOCH_CACHE (1007, admin -> broker): response body `EpochEntryCache`.

Keys are written in fastjson's order (sorted property names).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from remoting.bodies import (
    JSONBody,
    _as_bool,
    _as_int,
    _as_list,
    _as_long,
    _as_object,
    _as_str,
    _get,
    _map_of,
    _tuple_of,
)
from remoting.errors import BodyDecodeError
from remoting.fastjson import JSONValue, dump_fastjson, parse_fastjson
from remoting.headers import CommandHeader, Int64
from store.epoch_cache import EpochEntry


def encode_broker_names(names: list[str]) -> bytes:
    """GET_SYNC_STATE_DATA's request body: `["broker-a"]`."""
    items: list[JSONValue] = [*names]
    return dump_fastjson(items).encode("utf-8")


def decode_broker_names(data: bytes) -> list[str]:
    """Raises BodyDecodeError unless `data` is a JSON array of strings."""
    return [
        _as_str(item, f"brokerNames[{i}]")
        for i, item in enumerate(_as_list(parse_fastjson(data), "brokerNames"))
    ]


@dataclass(frozen=True, slots=True)
class ReplicaIdentity(JSONBody):
    broker_name: str
    broker_id: int
    broker_address: str
    alive: bool

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "alive": self.alive,
            "brokerAddress": self.broker_address,
            "brokerId": self.broker_id,
            "brokerName": self.broker_name,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> ReplicaIdentity:
        obj = _as_object(value, path)
        return cls(
            _get(obj, "brokerName", path, _as_str, ""),
            _get(obj, "brokerId", path, _as_long, 0),
            _get(obj, "brokerAddress", path, _as_str, ""),
            _get(obj, "alive", path, _as_bool, False),
        )


@dataclass(frozen=True, slots=True)
class ReplicasInfo(JSONBody):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    in_sync_replicas: tuple[ReplicaIdentity, ...] = ()
    not_in_sync_replicas: tuple[ReplicaIdentity, ...] = ()

    def to_json_value(self) -> dict[str, JSONValue]:
        value: dict[str, JSONValue] = {
            "inSyncReplicas": [m.to_json_value() for m in self.in_sync_replicas],
        }
        if self.master_address is not None:
            value["masterAddress"] = self.master_address
        if self.master_broker_id is not None:
            value["masterBrokerId"] = self.master_broker_id
        value["masterEpoch"] = self.master_epoch
        value["notInSyncReplicas"] = [m.to_json_value() for m in self.not_in_sync_replicas]
        value["syncStateSetEpoch"] = self.sync_state_set_epoch
        return value

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> ReplicasInfo:
        obj = _as_object(value, path)
        return cls(
            _get(obj, "masterBrokerId", path, _as_long, None),
            _get(obj, "masterAddress", path, _as_str, None),
            _get(obj, "masterEpoch", path, _as_int, 0),
            _get(obj, "syncStateSetEpoch", path, _as_int, 0),
            _get(obj, "inSyncReplicas", path, _tuple_of(ReplicaIdentity.from_json_value), ()),
            _get(obj, "notInSyncReplicas", path, _tuple_of(ReplicaIdentity.from_json_value), ()),
        )


@dataclass(frozen=True, slots=True)
class BrokerReplicasInfo(JSONBody):
    """GET_SYNC_STATE_DATA's answer: broker name -> its replicas."""

    replicas_info_table: dict[str, ReplicasInfo] = field(default_factory=dict)

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "replicasInfoTable": {
                name: info.to_json_value() for name, info in self.replicas_info_table.items()
            }
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> BrokerReplicasInfo:
        obj = _as_object(value, path)
        return cls(_get(obj, "replicasInfoTable", path, _map_of(ReplicasInfo.from_json_value), {}))


@dataclass(frozen=True, slots=True)
class CleanControllerBrokerDataRequestHeader(CommandHeader):
    """`broker_controller_ids_to_clean`: `"1;2"`, or None for the whole set."""

    broker_name: str
    cluster_name: str | None = None
    broker_controller_ids_to_clean: str | None = None
    is_clean_living_broker: bool = False
    invoke_time: Int64 = 0


def parse_broker_ids(text: str | None) -> frozenset[int] | None:
    """`"1;2"` as ids; None or blank: None (every id). Raises BodyDecodeError for a non-number."""
    if text is None or not text.strip():
        return None
    try:
        return frozenset(int(part) for part in text.split(";") if part.strip())
    except ValueError as err:
        raise BodyDecodeError(f"brokerControllerIdsToClean={text!r}: {err}") from err


def _epoch_entry_json(entry: EpochEntry) -> dict[str, JSONValue]:
    """Java's `EpochEntry` as JSON (the store's `EpochEntry` is the one pyrmq type)."""
    return {"endOffset": entry.end_offset, "epoch": entry.epoch, "startOffset": entry.start_offset}


def _decode_epoch_entry(value: JSONValue, path: str) -> EpochEntry:
    """Raises BodyDecodeError for a missing field, or values no epoch entry can hold."""
    obj = _as_object(value, path)
    epoch = _get(obj, "epoch", path, _as_int)
    start_offset = _get(obj, "startOffset", path, _as_long, 0)
    end_offset = _get(obj, "endOffset", path, _as_long, 0)
    try:
        return EpochEntry(epoch, start_offset, end_offset)
    except ValueError as err:
        raise BodyDecodeError(f"{path}: {err}") from err


@dataclass(frozen=True, slots=True)
class EpochEntryCache(JSONBody):
    """GET_BROKER_EPOCH_CACHE's answer (`broker_id` is the role id: 0 on the master)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    epoch_list: tuple[EpochEntry, ...]
    max_offset: int

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "brokerId": self.broker_id,
            "brokerName": self.broker_name,
            "clusterName": self.cluster_name,
            "epochList": [_epoch_entry_json(e) for e in self.epoch_list],
            "maxOffset": self.max_offset,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> EpochEntryCache:
        obj = _as_object(value, path)
        return cls(
            _get(obj, "clusterName", path, _as_str, ""),
            _get(obj, "brokerName", path, _as_str, ""),
            _get(obj, "brokerId", path, _as_long, 0),
            _get(obj, "epochList", path, _tuple_of(_decode_epoch_entry), ()),
            _get(obj, "maxOffset", path, _as_long, 0),
        )
