"""Typed custom headers: the `extFields` of each request and response code, as frozen values.

Each header is a frozen, slotted dataclass whose attributes are the Java header class's fields
in snake_case; the wire key is the camelCase field name (`producer_group` <-> `producerGroup`)
unless the class lists an exception in `_WIRE_KEYS` (`client_id` <-> `clientID`, `broker_name`
<-> `bname`). The attribute's type is the Java type: `str`, `Int32` (Integer), `Int64` (Long),
`bool` (Boolean), `BoundaryType`. Sources: `remoting/.../protocol/header/**` and
docs/remoting-protocol.md §2, §6, §7.

Decoding (`from_ext_fields`) accepts exactly what Java accepts, with the value Java reads
(docs/remoting-protocol.md §2; the table in tests/remoting/test_java_leniency.py):
- booleans as `Boolean.parseBoolean`: "true" in any case is true, anything else ("0", "1", "",
  "yes") is false, never an error (the C++ client sends `unitMode` as "0");
- integers as `Integer.parseInt` / `Long.parseLong`: optional sign, any Unicode decimal digits
  of the BMP, leading zeros, in range; anything else is unparsable;
- `BoundaryType` reads "upper" in any case as UPPER and anything else as LOWER;
- unknown keys (`AccessKey`, `Signature`, `ns`, `lo`, ...) are ignored;
- a missing field without a default (Java's `@CFNotNull`) raises `HeaderFieldError`: Java only
  logs it and then fails the request with SYSTEM_ERROR later, so we refuse up front;
- an unparsable number: Java's reflective decoder logs it and leaves the field at its default,
  so an optional field keeps its default and a required one raises `HeaderFieldError`; the fast
  decoders (`FastCodesHeader`: SEND_MESSAGE_V2/BATCH and PULL_MESSAGE requests, the send and
  pull responses) let the NumberFormatException fail the request, so there any unparsable
  number raises `HeaderFieldError`.
A `HeaderFieldError` names the header, the key, the value and what was expected; the server
answers it with SYSTEM_ERROR and the message as remark (that request only).

Encoding (`to_ext_fields`) writes every non-None attribute as Java does: decimal numbers,
"true"/"false", enum names. Fields with a non-None default (Java primitives, or boxed fields
initialised in Java) are therefore always written.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, ClassVar, Final, Self, TypeVar, cast

from remoting.errors import HeaderFieldError
from remoting.fastjson import java_int


class _Kind(Enum):
    STRING = "string"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"
    BOUNDARY_TYPE = "BoundaryType"


Int32 = Annotated[int, _Kind.INT32]
"""A Java `int`/`Integer` field: decimal text in -2**31..2**31-1."""
Int64 = Annotated[int, _Kind.INT64]
"""A Java `long`/`Long` field: decimal text in -2**63..2**63-1."""


class BoundaryType(Enum):
    """SEARCH_OFFSET_BY_TIMESTAMP's choice among equal timestamps (`BoundaryType.java`)."""

    LOWER = "lower"
    UPPER = "upper"


@dataclass(frozen=True, slots=True)
class _WireField:
    """One field on the wire. `parse` reads its text (None: a string, kept as it is) and
    `format` writes its value, chosen once by kind: telling kinds apart on each field of each
    request cost more than the decoding (an enum member's lookup is some 65 ns). A number of at
    most `plain_digits` ASCII digits always fits its kind and is read with int() alone."""

    attr: str
    key: str
    kind: _Kind
    required: bool
    parse: Callable[[str, str, str], object] | None = None
    format: Callable[[Any], str] = str
    plain_digits: int = 0


class CommandHeader:
    """Base of every typed header: decoding from and encoding to `extFields`."""

    __slots__ = ()
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {}
    _FAST_CODEC: ClassVar[bool] = False
    """True where Java's class is a `FastCodesHeader`: any unparsable number fails the request."""

    @classmethod
    def from_ext_fields(cls, fields: Mapping[str, str]) -> Self:
        """Decode from a command's `ext_fields`. Raises HeaderFieldError naming the key and
        value of the first missing required field, or of an unparsable one that Java refuses
        (module docstring)."""
        return _decode(cls, _wire_fields(cls), fields, fast_codec=cls._FAST_CODEC)

    def to_ext_fields(self) -> dict[str, str]:
        """Every non-None field as `key -> text`, in declaration order."""
        return _encode(self, _wire_fields(type(self)))


def _camel_case(attr: str) -> str:
    first, *rest = attr.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def _kind_of(hint: object, where: str) -> _Kind:
    args = typing.get_args(hint)
    if type(None) in args:  # `X | None`: the kind of X
        (hint,) = (arg for arg in args if arg is not type(None))
    metadata = getattr(hint, "__metadata__", ())
    if metadata and isinstance(metadata[0], _Kind):
        return metadata[0]
    kind = {str: _Kind.STRING, bool: _Kind.BOOL, BoundaryType: _Kind.BOUNDARY_TYPE}.get(
        cast(type, hint)
    )
    if kind is None:
        raise TypeError(f"{where}: type {hint!r} has no wire form (use str, Int32, Int64, bool)")
    return kind


_PLANS: Final[dict[type[CommandHeader], tuple[_WireField, ...]]] = {}


def _wire_fields(cls: type[CommandHeader]) -> tuple[_WireField, ...]:
    """The wire plan of a header class, computed on first use: attribute, key, kind, required."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _plan(cls)
    return plan


def _plan(cls: type[CommandHeader]) -> tuple[_WireField, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    plan = []
    for field in dataclasses.fields(cast(type, cls)):
        kind = _kind_of(hints[field.name], f"{cls.__name__}.{field.name}")
        plan.append(_WireField(
            attr=field.name,
            key=cls._WIRE_KEYS.get(field.name, _camel_case(field.name)),
            kind=kind,
            required=field.default is dataclasses.MISSING
            and field.default_factory is dataclasses.MISSING,
            parse=_PARSERS.get(kind),
            format=_FORMATS.get(kind, str),
            plain_digits=_PLAIN_DIGITS.get(kind, 0),
        ))
    return tuple(plan)


_H = TypeVar("_H", bound=CommandHeader)
_INT32_RANGE: Final = f"an int32 ({-(2**31)}..{2**31 - 1})"
_INT64_RANGE: Final = f"an int64 ({-(2**63)}..{2**63 - 1})"


def _parse_int32(header: str, key: str, text: str) -> int:
    value = java_int(text, bits=32)
    if value is None:
        raise HeaderFieldError(header, key, text, f"is not {_INT32_RANGE}")
    return value


def _parse_int64(header: str, key: str, text: str) -> int:
    value = java_int(text, bits=64)
    if value is None:
        raise HeaderFieldError(header, key, text, f"is not {_INT64_RANGE}")
    return value


def _parse_bool(header: str, key: str, text: str) -> bool:
    # Boolean.parseBoolean: String.equalsIgnoreCase("true"); no non-ASCII letter folds onto
    # t, r, u or e, so an ASCII comparison is the same rule.
    return len(text) == 4 and text.isascii() and text.lower() == "true"


def _parse_boundary_type(header: str, key: str, text: str) -> BoundaryType:
    return BoundaryType.UPPER if text.lower() == "upper" else BoundaryType.LOWER


_PARSERS: Final[dict[_Kind, Callable[[str, str, str], object]]] = {
    _Kind.INT32: _parse_int32,
    _Kind.INT64: _parse_int64,
    _Kind.BOOL: _parse_bool,
    _Kind.BOUNDARY_TYPE: _parse_boundary_type,
}


_FORMATS: Final[dict[_Kind, Callable[[Any], str]]] = {
    _Kind.BOOL: lambda value: "true" if value else "false",
    _Kind.BOUNDARY_TYPE: lambda value: cast(BoundaryType, value).name,
}  # strings and numbers: str()
# Digits that always fit the kind: Java's parseInt / parseLong read them as int() does.
_PLAIN_DIGITS: Final = {_Kind.INT32: 9, _Kind.INT64: 18}


def _decode(
    cls: type[_H], plan: tuple[_WireField, ...], fields: Mapping[str, str], *, fast_codec: bool
) -> _H:
    values: dict[str, object] = {}
    for wire in plan:
        text = fields.get(wire.key)
        if text is None:
            if wire.required:
                raise HeaderFieldError(cls.__name__, wire.key, None, "is required")
        elif wire.parse is None:
            values[wire.attr] = text
        elif len(text) <= wire.plain_digits and text.isdigit() and text.isascii():
            values[wire.attr] = int(text)  # what every client sends: no range to check
        else:
            try:
                values[wire.attr] = wire.parse(cls.__name__, wire.key, text)
            except HeaderFieldError:
                if wire.required or fast_codec:
                    raise
                # Java's reflective decoder logs the NumberFormatException and leaves the
                # field at its default: the request goes on without it.
    return cast("Callable[..., _H]", cls)(**values)


def _encode(header: CommandHeader, plan: tuple[_WireField, ...]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for wire in plan:
        value = getattr(header, wire.attr)
        if value is not None:
            fields[wire.key] = wire.format(value)
    return fields


# --------------------------------------------------------------------------------------------
# Client -> broker


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE (10) with camelCase keys; SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320)
    carry the same fields under the single-letter keys a..n (`from_ext_fields_v2`)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: Int32
    queue_id: Int32
    sys_flag: Int32
    born_timestamp: Int64
    flag: Int32
    properties: str | None = None
    reconsume_times: Int32 | None = None
    unit_mode: bool | None = None
    batch: bool | None = None
    max_reconsume_times: Int32 | None = None
    broker_name: str | None = None
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {"broker_name": "bname"}

    @classmethod
    def from_ext_fields_v2(cls, fields: Mapping[str, str]) -> Self:
        """Decode SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE keys a..n; others (even `bname`) are
        ignored, as Java's fast decoder ignores them."""
        return _decode(cls, _send_message_v2_fields(), fields, fast_codec=True)

    def to_ext_fields_v2(self) -> dict[str, str]:
        """Every non-None field under its single-letter key, in letter order."""
        return _encode(self, _send_message_v2_fields())


_SEND_MESSAGE_V2_KEYS: Final = {
    "producer_group": "a",
    "topic": "b",
    "default_topic": "c",
    "default_topic_queue_nums": "d",
    "queue_id": "e",
    "sys_flag": "f",
    "born_timestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsume_times": "j",
    "unit_mode": "k",
    "max_reconsume_times": "l",
    "batch": "m",
    "broker_name": "n",
}


@functools.cache
def _send_message_v2_fields() -> tuple[_WireField, ...]:
    plan = {
        wire.attr: dataclasses.replace(wire, key=_SEND_MESSAGE_V2_KEYS[wire.attr])
        for wire in _wire_fields(SendMessageRequestHeader)
    }
    return tuple(sorted(plan.values(), key=lambda wire: wire.key))


@dataclass(frozen=True, slots=True)
class SendMessageResponseHeader(CommandHeader):
    """Response to SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE. `msg_region` and
    `trace_on` are the `MSG_REGION` / `TRACE_ON` extFields a broker adds to every send response."""

    _FAST_CODEC: ClassVar[bool] = True

    msg_id: str
    queue_id: Int32
    queue_offset: Int64
    transaction_id: str | None = None
    batch_uniq_id: str | None = None
    recall_handle: str | None = None
    msg_region: str | None = None
    trace_on: bool | None = None
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {"msg_region": "MSG_REGION", "trace_on": "TRACE_ON"}


@dataclass(frozen=True, slots=True)
class PullMessageRequestHeader(CommandHeader):
    """PULL_MESSAGE (11). `sys_flag` holds the pull flags (COMMIT_OFFSET 0x1, SUSPEND 0x2,
    SUBSCRIPTION 0x4, CLASS_FILTER 0x8, LITE_PULL 0x10)."""

    _FAST_CODEC: ClassVar[bool] = True

    consumer_group: str
    topic: str
    queue_id: Int32
    queue_offset: Int64
    max_msg_nums: Int32
    sys_flag: Int32
    commit_offset: Int64
    suspend_timeout_millis: Int64
    sub_version: Int64
    subscription: str | None = None
    expression_type: str | None = None
    max_msg_bytes: Int32 | None = None
    request_source: Int32 | None = None
    proxy_froward_client_id: str | None = None  # sic: Java's spelling
    broker_name: str | None = None
    lite_topic: str | None = None  # 5.5.0: see refuse_lite_topic
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {"broker_name": "bname"}


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader(CommandHeader):
    """Response to PULL_MESSAGE; the remark carries the store's GetMessageStatus name."""

    _FAST_CODEC: ClassVar[bool] = True

    suggest_which_broker_id: Int64
    next_begin_offset: Int64
    min_offset: Int64
    max_offset: Int64
    offset_delta: Int64 | None = None
    topic_sys_flag: Int32 | None = None
    group_sys_flag: Int32 | None = None
    forbidden_type: Int32 | None = None


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader(CommandHeader):
    """QUERY_CONSUMER_OFFSET (14)."""

    consumer_group: str
    topic: str
    queue_id: Int32
    set_zero_if_not_found: bool | None = None
    broker_name: str | None = None
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {"broker_name": "bname"}


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetResponseHeader(CommandHeader):
    """Response to QUERY_CONSUMER_OFFSET: the group's committed offset."""

    offset: Int64


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    """UPDATE_CONSUMER_OFFSET (15), usually sent oneway."""

    consumer_group: str
    topic: str
    queue_id: Int32
    commit_offset: Int64
    broker_name: str | None = None
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {"broker_name": "bname"}


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetResponseHeader(CommandHeader):
    """Response to UPDATE_CONSUMER_OFFSET: no fields."""


@dataclass(frozen=True, slots=True)
class GetMaxOffsetRequestHeader(CommandHeader):
    """GET_MAX_OFFSET (30). `committed` defaults to true, as the Java primitive does."""

    topic: str
    queue_id: Int32
    committed: bool = True
    broker_name: str | None = None
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {"broker_name": "bname"}


@dataclass(frozen=True, slots=True)
class GetMaxOffsetResponseHeader(CommandHeader):
    """Response to GET_MAX_OFFSET: the next queue offset to be written."""

    offset: Int64


@dataclass(frozen=True, slots=True)
class GetMinOffsetRequestHeader(CommandHeader):
    """GET_MIN_OFFSET (31)."""

    topic: str
    queue_id: Int32
    broker_name: str | None = None
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {"broker_name": "bname"}


@dataclass(frozen=True, slots=True)
class GetMinOffsetResponseHeader(CommandHeader):
    """Response to GET_MIN_OFFSET."""

    offset: Int64


@dataclass(frozen=True, slots=True)
class SearchOffsetRequestHeader(CommandHeader):
    """SEARCH_OFFSET_BY_TIMESTAMP (29); `timestamp` in ms."""

    topic: str
    queue_id: Int32
    timestamp: Int64
    boundary_type: BoundaryType | None = None
    broker_name: str | None = None
    lite_topic: str | None = None  # 5.5.0: see refuse_lite_topic
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {"broker_name": "bname"}


def refuse_lite_topic(header: PullMessageRequestHeader | SearchOffsetRequestHeader) -> None:
    """A 5.5.0 client's non-empty `liteTopic` means "this lite topic's LMQ, not `topic`"; pyrmq
    has no lite topics and must not serve the parent topic instead (a 5.3.3 broker would):
    HeaderFieldError, answered with SYSTEM_ERROR naming the field (docs/remoting-protocol.md §5, a
    pyrmq choice)."""
    if header.lite_topic:
        raise HeaderFieldError(type(header).__name__, "liteTopic", header.lite_topic,
                               "names a lite topic; pyrmq serves no lite topics")


@dataclass(frozen=True, slots=True)
class SearchOffsetResponseHeader(CommandHeader):
    """Response to SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: Int64


@dataclass(frozen=True, slots=True)
class HeartbeatRequestHeader(CommandHeader):
    """HEART_BEAT (34): no fields; the body is a `HeartbeatData`."""


@dataclass(frozen=True, slots=True)
class HeartbeatResponseHeader(CommandHeader):
    """Response to HEART_BEAT. A broker without heartbeat V2 must leave
    `is_support_heart_beat_v2` None (the key absent)."""

    is_support_heart_beat_v2: bool | None = None
    is_sub_change: bool | None = None
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {
        "is_support_heart_beat_v2": "IS_SUPPORT_HEART_BEAT_V2",
        "is_sub_change": "IS_SUB_CHANGE",
    }


@dataclass(frozen=True, slots=True)
class UnregisterClientRequestHeader(CommandHeader):
    """UNREGISTER_CLIENT (35)."""

    client_id: str
    producer_group: str | None = None
    consumer_group: str | None = None
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {"client_id": "clientID"}


@dataclass(frozen=True, slots=True)
class UnregisterClientResponseHeader(CommandHeader):
    """Response to UNREGISTER_CLIENT: no fields."""


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    """CONSUMER_SEND_MSG_BACK (36); `offset` is the commitlog offset of the failed message."""

    offset: Int64
    group: str
    delay_level: Int32
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: Int32 | None = None


@dataclass(frozen=True, slots=True)
class GetConsumerListByGroupRequestHeader(CommandHeader):
    """GET_CONSUMER_LIST_BY_GROUP (38); the answer's body is a `ConsumerListBody`."""

    consumer_group: str


@dataclass(frozen=True, slots=True)
class NotifyConsumerIdsChangedRequestHeader(CommandHeader):
    """NOTIFY_CONSUMER_IDS_CHANGED (40), broker -> every consumer of the group, oneway."""

    consumer_group: str


# --------------------------------------------------------------------------------------------
# Admin and slave -> broker


@dataclass(frozen=True, slots=True)
class CreateTopicRequestHeader(CommandHeader):
    """UPDATE_AND_CREATE_TOPIC (17). `perm`: READ 4 | WRITE 2 (| INHERIT 1);
    `topic_filter_type`: SINGLE_TAG or MULTI_TAG; `attributes`: "+key=value,...". `order` and
    `force` are initialised to false in Java, so they are always sent."""

    topic: str
    default_topic: str
    read_queue_nums: Int32
    write_queue_nums: Int32
    perm: Int32
    topic_filter_type: str
    topic_sys_flag: Int32 | None = None
    order: bool = False
    attributes: str | None = None
    force: bool = False


@dataclass(frozen=True, slots=True)
class GetAllTopicConfigRequestHeader(CommandHeader):
    """GET_ALL_TOPIC_CONFIG (21). Brokers up to 5.3.3 send no fields (the whole table is
    wanted); newer ones page with `topic_seq`, so every field is optional here."""

    topic_seq: Int32 | None = None
    data_version: str | None = None
    max_topic_num: Int32 | None = None


@dataclass(frozen=True, slots=True)
class GetAllTopicConfigResponseHeader(CommandHeader):
    """Response to GET_ALL_TOPIC_CONFIG; without `total_topic_num` a paging slave stops after
    this one response."""

    total_topic_num: Int32 | None = None


@dataclass(frozen=True, slots=True)
class GetAllSubscriptionGroupRequestHeader(CommandHeader):
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201). Like GET_ALL_TOPIC_CONFIG: up to 5.3.3 no
    fields, 5.5.0 pages with `group_seq` (the `dataVersion` JSON, "" on the first page)."""

    group_seq: Int32 | None = None
    data_version: str | None = None
    max_group_num: Int32 | None = None


@dataclass(frozen=True, slots=True)
class GetAllSubscriptionGroupResponseHeader(CommandHeader):
    """Response to GET_ALL_SUBSCRIPTIONGROUP_CONFIG (`total_group_num`: see the topic one)."""

    total_group_num: Int32 | None = None


# --------------------------------------------------------------------------------------------
# Broker / client -> name server


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequestHeader(CommandHeader):
    """REGISTER_BROKER (103). `broker_id` is 0 for the master. `body_crc32` is
    `zlib.crc32(body) & 0x7FFFFFFF` (0: unchecked). `zone_name` is the optional `__ZONE_NAME`."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Int64
    heartbeat_timeout_millis: Int64 | None = None
    enable_acting_master: bool | None = None
    compressed: bool = False
    body_crc32: Int32 = 0
    zone_name: str | None = None
    _WIRE_KEYS: ClassVar[Mapping[str, str]] = {"zone_name": "__ZONE_NAME"}


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponseHeader(CommandHeader):
    """Response to REGISTER_BROKER: for a slave (broker_id != 0), where its master is."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(frozen=True, slots=True)
class UnRegisterBrokerRequestHeader(CommandHeader):
    """UNREGISTER_BROKER (104)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Int64


@dataclass(frozen=True, slots=True)
class GetRouteInfoRequestHeader(CommandHeader):
    """GET_ROUTEINFO_BY_TOPIC (105); the answer's body is a `TopicRouteData`."""

    topic: str
    accept_standard_json_only: bool | None = None
