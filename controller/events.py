"""The controller's state-machine events (docs/replicas-manager.md §9.1) and their log encoding.

Every change to the replica state is one of these events: requests are validated against the
current state, produce events, and the events are made durable (`event_log`) before they are
applied (`replicas_info`) and answered. Replaying the log from the start rebuilds the state.

An event is encoded as one compact JSON object with a `type` key; decoding checks every field's
type and raises `EventDecodeError` naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from controller.errors import EventDecodeError


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdEvent:
    """A broker id is assigned; the first one (id 1) creates the broker set."""

    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str


@dataclass(frozen=True, slots=True)
class UpdateBrokerAddressEvent:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str


@dataclass(frozen=True, slots=True)
class ElectMasterEvent:
    """`new_master_broker_id` None: the election found nobody (the master is cleared)."""

    broker_name: str
    new_master_broker_id: int | None


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetEvent:
    broker_name: str
    sync_state_set: frozenset[int]


@dataclass(frozen=True, slots=True)
class CleanBrokerDataEvent:
    """`broker_ids` None: the whole broker set."""

    broker_name: str
    broker_ids: frozenset[int] | None


Event = (
    ApplyBrokerIdEvent
    | UpdateBrokerAddressEvent
    | ElectMasterEvent
    | AlterSyncStateSetEvent
    | CleanBrokerDataEvent
)

_TYPES: Final[dict[str, type[Event]]] = {
    "ApplyBrokerId": ApplyBrokerIdEvent,
    "UpdateBrokerAddress": UpdateBrokerAddressEvent,
    "ElectMaster": ElectMasterEvent,
    "AlterSyncStateSet": AlterSyncStateSetEvent,
    "CleanBrokerData": CleanBrokerDataEvent,
}
_NAMES: Final = {cls: name for name, cls in _TYPES.items()}


def encode_event(event: Event) -> bytes:
    """The event as compact UTF-8 JSON."""
    value: dict[str, object] = {"type": _NAMES[type(event)]}
    for name in event.__dataclass_fields__:
        item = getattr(event, name)
        value[name] = sorted(item) if isinstance(item, frozenset) else item
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _field(value: dict[str, object], name: str, kind: str) -> object:
    if name not in value:
        raise EventDecodeError(f"event {value.get('type')}: field {name} missing")
    item = value[name]
    ok = {
        "str": isinstance(item, str),
        "int": isinstance(item, int) and not isinstance(item, bool),
        "int?": item is None or (isinstance(item, int) and not isinstance(item, bool)),
        "ids": isinstance(item, list) and all(isinstance(i, int) for i in item),
        "ids?": item is None or (isinstance(item, list) and all(isinstance(i, int) for i in item)),
    }[kind]
    if not ok:
        raise EventDecodeError(f"event {value.get('type')}: field {name}={item!r} is not {kind}")
    if kind.startswith("ids") and item is not None:
        assert isinstance(item, list)
        return frozenset(item)
    return item


_KINDS: Final[dict[type[Event], dict[str, str]]] = {
    ApplyBrokerIdEvent: {
        "cluster_name": "str",
        "broker_name": "str",
        "broker_id": "int",
        "register_check_code": "str",
    },
    UpdateBrokerAddressEvent: {
        "cluster_name": "str",
        "broker_name": "str",
        "broker_id": "int",
        "broker_address": "str",
    },
    ElectMasterEvent: {"broker_name": "str", "new_master_broker_id": "int?"},
    AlterSyncStateSetEvent: {"broker_name": "str", "sync_state_set": "ids"},
    CleanBrokerDataEvent: {"broker_name": "str", "broker_ids": "ids?"},
}


def decode_event(data: bytes) -> Event:
    """The event encoded in `data`; raises EventDecodeError for anything else."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise EventDecodeError(f"event is not JSON: {err}") from err
    if not isinstance(value, dict):
        raise EventDecodeError(f"event is not a JSON object: {value!r:.80}")
    name = value.get("type")
    cls = _TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise EventDecodeError(f"unknown event type {value.get('type')!r}")
    fields = {name: _field(value, name, kind) for name, kind in _KINDS[cls].items()}
    return cls(**fields)  # type: ignore[arg-type]
