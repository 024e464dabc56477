"""JSON bodies of the remoting codes pyrmq serves or sends, as frozen values
(docs/remoting-protocol.md §6-§7, §11).

Each body class mirrors a Java `RemotingSerializable` class: `encode()` writes what fastjson
writes (bean properties sorted by name, None omitted, compact, maps in their own order, integer
map keys as quoted strings, which fastjson parses as well); `decode(data)` reads what
fastjson 1.2.83's `JSON.parseObject(text, Class)` reads, with the value it gives
(its `IntegerCodec`, `LongCodec`, `BooleanCodec`, `StringCodec`, `EnumDeserializer` and
`TypeUtils.castTo*`; the rule table is tests/remoting/test_java_leniency.py):
- integer map keys quoted (`{"0":..}`) or not (`{0:..}`);
- int/long properties: a JSON integer in range; a JSON float truncated toward zero; true/false
  as 1/0; a string with commas removed (and, for int, a trailing ".000" removed) read by
  `Integer.parseInt`/`Long.parseLong` (the C++ client sends `"subVersion":"1700..."`);
- boolean properties: true/false; a JSON number is true exactly when its integer part is 1;
  the strings "true"/"false" in any case, "1"/"0", "Y"/"y"/"T" and "F"/"f"/"N";
- long properties also take an ISO-8601 date or time string (`TypeUtils.castToLong` tries
  `JSONScanner.scanISO8601DateIfMatch`): epoch milliseconds, in the local time zone unless it
  names one (`_iso_date_millis` lists the forms);
- string properties: a string, a number's or boolean's text (a float's as `BigDecimal` prints
  it), or an object's or array's JSON text;
- enums by name (ASCII case ignored) or by ordinal (the C++ client sends ordinals); an unknown
  name reads as null;
- "", "null" or "NULL" for a number, boolean or enum, JSON null, and absent properties (the C++
  client omits several): the Java default;
- unknown properties are ignored.
Anything else (an ordinal out of range, an unparsable string, an object for a number, a
missing property Java cannot do without) raises `BodyDecodeError` naming the JSON path and the
value. The JSON syntax fastjson accepts is `remoting.fastjson`'s; RocketMQ 5.5.0 (fastjson2)
differs in a few rows, which tests/interop/test_java_leniency_oracle.py pins.

Static-topic mapping tables (`topicQueueMapping*`) are carried as raw JSON, unread.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Final, Self, TypeVar

from remoting.errors import BodyDecodeError
from remoting.fastjson import (
    JavaDecimal,
    JSONValue,
    big_decimal_value,
    dump_fastjson,
    java_int,
    parse_fastjson,
)

_T = TypeVar("_T")
_E = TypeVar("_E", bound=IntEnum)
_SHOWN_CHARS_MAX: Final = 64


class _Missing(Enum):
    REQUIRED = "required"


_REQUIRED: Final = _Missing.REQUIRED


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS_MAX else f"{text[:_SHOWN_CHARS_MAX]}..."


def _wrong(path: str, value: JSONValue, expected: str) -> BodyDecodeError:
    return BodyDecodeError(f"{path}={_shown(value)} is not {expected}")


def _as_object(value: JSONValue, path: str) -> dict[str, JSONValue]:
    if not isinstance(value, dict):
        raise _wrong(path, value, "an object")
    return value


def _as_list(value: JSONValue, path: str) -> list[JSONValue]:
    if not isinstance(value, list):
        raise _wrong(path, value, "an array")
    return value


def _as_str(value: JSONValue, path: str) -> str:
    # StringCodec: a number's literal text (BigDecimal's for a float); anything else through
    # toString(), which for a JSONObject/JSONArray is its JSON text.
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, JavaDecimal):
        return value.java_text
    if isinstance(value, (dict, list)):
        return dump_fastjson(value)
    raise _wrong(path, value, "a string")


class _JavaNull(Exception):  # noqa: N818 - a signal inside this module, not an error
    """fastjson read the value as null ("", "null", "NULL" where a scalar is expected)."""


_NULL_TEXTS: Final = frozenset({"", "null", "NULL"})
_TRAILING_ZEROS: Final = re.compile(r"\.0*$")  # TypeUtils.NUMBER_WITH_TRAILING_ZEROS_PATTERN


def _java_number(value: JSONValue, path: str, bits: int) -> int:
    if isinstance(value, bool):
        return 1 if value else 0  # castToInt/castToLong(Boolean)
    if isinstance(value, int):
        if -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            return value
    elif isinstance(value, float):
        try:
            return big_decimal_value(value, bits)
        except ValueError as err:
            raise _wrong(path, value, f"a number Java reads ({err})") from err
    elif isinstance(value, str):
        if value in _NULL_TEXTS:
            raise _JavaNull
        text = value.replace(",", "")
        if bits == 32:
            text = _TRAILING_ZEROS.sub("", text, count=1)
        parsed = java_int(text, bits=bits)
        if parsed is None and bits == 64:
            parsed = _iso_date_millis(value)
        if parsed is not None:
            return parsed
    raise _wrong(path, value, "an int32" if bits == 32 else "an int64")


# The forms of fastjson 1.2.83's `scanISO8601DateIfMatch` that pyrmq reads (each a row of
# tests/remoting/test_java_leniency.py, checked against the jar): a date `yyyy-M-d` or
# `yyyy/M/d`, optionally a time `HH:mm`, `HH:mm:ss` or `HH:mm:ss.S{1,3}` after `T` or a blank
# (the fraction is read as a number of milliseconds: ".6" is 6 ms, as fastjson reads it), and
# after a time optionally `Z`, `+HH`, `+HHmm` or `+HH:mm`. A day past the month's end rolls
# over (a lenient Calendar: Feb 30 is Mar 1). Not read: years before 1583 (Java counts them in
# the Julian calendar), and the other forms fastjson knows (`yyyy年M月d日`, `yyyyMMddHHmmss`...).
_ISO_DATE: Final = re.compile(
    r"([0-9]{4})[-/]([0-9]{1,2})[-/]([0-9]{1,2})"
    r"(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,3}))?)?"
    r"(Z|[+-][0-9]{2}(?::?[0-9]{2})?)?)?"
)


def _iso_date_millis(text: str) -> int | None:
    match = _ISO_DATE.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    if not (int(year) >= 1583 and 1 <= int(month) <= 12 and 1 <= int(day) <= 31
            and int(hour or 0) <= 23 and int(minute or 0) <= 59 and int(second or 0) <= 59):
        return None
    local = datetime.datetime(int(year), int(month), 1, int(hour or 0), int(minute or 0),
                              int(second or 0)) + datetime.timedelta(days=int(day) - 1)
    if zone is None:
        seconds = local.timestamp()  # the local time zone, as Java's default TimeZone
    else:
        offset = datetime.timedelta()
        if zone != "Z":
            digits = zone[1:].replace(":", "")
            offset = datetime.timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
            offset = -offset if zone[0] == "-" else offset
        seconds = local.replace(tzinfo=datetime.timezone(offset)).timestamp()
    return round(seconds) * 1000 + int(fraction or 0)


def _as_int(value: JSONValue, path: str) -> int:
    """A Java `int`/`Integer` property."""
    return _java_number(value, path, 32)


def _as_long(value: JSONValue, path: str) -> int:
    """A Java `long`/`Long`/`AtomicLong` property."""
    return _java_number(value, path, 64)


_TRUE_TEXTS: Final = frozenset({"1", "Y", "y", "T"})
_FALSE_TEXTS: Final = frozenset({"0", "F", "f", "N"})


def _as_bool(value: JSONValue, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value == 1  # BooleanCodec: an integer literal is true iff it is 1
    if isinstance(value, float):
        try:
            return big_decimal_value(value, 32) == 1  # castToBoolean(BigDecimal)
        except ValueError as err:
            raise _wrong(path, value, f"a number Java reads ({err})") from err
    if isinstance(value, str):
        if value in _NULL_TEXTS:
            raise _JavaNull
        if value in _TRUE_TEXTS or (value.isascii() and value.lower() == "true"):
            return True
        if value in _FALSE_TEXTS or (value.isascii() and value.lower() == "false"):
            return False
    raise _wrong(path, value, "a boolean")


def _enum_reader(enum: type[_E]) -> Callable[[JSONValue, str], _E]:
    by_name: dict[str, _E] = {member.name.lower(): member for member in enum}
    members = list(enum)

    def read(value: JSONValue, path: str) -> _E:
        if isinstance(value, str):
            # EnumDeserializer: the name, ASCII case ignored; "" or an unknown name is null.
            member = by_name.get(value.lower()) if value.isascii() else None
            if member is None:
                raise _JavaNull
            return member
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(members):
            return members[value]
        raise _wrong(path, value, f"a {enum.__name__} name or ordinal")

    return read


def _get(
    obj: Mapping[str, JSONValue],
    key: str,
    path: str,
    read: Callable[[JSONValue, str], _T],
    default: _T | _Missing = _REQUIRED,
) -> _T:
    """`obj[key]` read by `read`; absent or null (JSON null, or what fastjson reads as null)
    gives `default`, or raises if required."""
    value = obj.get(key)
    if value is not None:
        try:
            return read(value, f"{path}.{key}")
        except _JavaNull:
            pass
    if isinstance(default, _Missing):
        raise BodyDecodeError(f"{path}.{key} is required")
    return default


def _tuple_of(read: Callable[[JSONValue, str], _T]) -> Callable[[JSONValue, str], tuple[_T, ...]]:
    def read_list(value: JSONValue, path: str) -> tuple[_T, ...]:
        items: list[_T] = []
        for index, item in enumerate(_as_list(value, path)):
            try:
                items.append(read(item, f"{path}[{index}]"))
            except _JavaNull:
                raise _wrong(f"{path}[{index}]", item, "a non-null element") from None
        return tuple(items)

    return read_list


def _map_of(read: Callable[[JSONValue, str], _T]) -> Callable[[JSONValue, str], dict[str, _T]]:
    def read_map(value: JSONValue, path: str) -> dict[str, _T]:
        return {
            key: read(item, f"{path}[{key!r}]") for key, item in _as_object(value, path).items()
        }

    return read_map


def _int_key_map_of(
    read: Callable[[JSONValue, str], _T],
) -> Callable[[JSONValue, str], dict[int, _T]]:
    """A Java map with Long keys: `{0:..}` and `{"0":..}` both read as int keys."""

    def read_map(value: JSONValue, path: str) -> dict[int, _T]:
        result: dict[int, _T] = {}
        for key, item in _as_object(value, path).items():
            number = java_int(key, bits=64)
            if number is None:
                raise BodyDecodeError(f"{path} key {_shown(key)} is not an int64")
            result[number] = read(item, f"{path}[{number}]")
        return result

    return read_map


# The same rules for the broker's own fastjson files (subscriptionGroup.json, ...).
read_int: Final = _as_int
read_long: Final = _as_long
read_bool: Final = _as_bool
get_property: Final = _get


def _raw(value: JSONValue, path: str) -> JSONValue:
    return value


class JSONBody:
    """Base of the body classes: `encode()` to UTF-8 JSON bytes, `decode(data)` back."""

    __slots__ = ()

    def to_json_value(self) -> dict[str, JSONValue]:
        """The fastjson object for this value, properties in fastjson's (sorted) order."""
        raise NotImplementedError

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        """Read from parsed JSON; `path` names this value in error messages."""
        raise NotImplementedError

    def encode(self) -> bytes:
        """The body bytes, as fastjson's `JSON.toJSONString(this)` in UTF-8."""
        return dump_fastjson(self.to_json_value()).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes | str) -> Self:
        """Parse a body. Raises BodyDecodeError for bad JSON or a value of the wrong type."""
        return cls.from_json_value(parse_fastjson(data), cls.__name__)


# --------------------------------------------------------------------------------------------
# Shared pieces


@dataclass(frozen=True, slots=True)
class DataVersion(JSONBody):
    """A table's version: `state_version` is the master epoch (name-server conflict rule),
    `counter` increments on each change, `timestamp` is ms."""

    state_version: int = 0
    timestamp: int = 0
    counter: int = 0

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "counter": self.counter,
            "stateVersion": self.state_version,
            "timestamp": self.timestamp,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            state_version=_get(obj, "stateVersion", path, _as_long, 0),
            timestamp=_get(obj, "timestamp", path, _as_long, 0),
            counter=_get(obj, "counter", path, _as_long, 0),
        )


class TopicFilterType(IntEnum):
    """`TopicFilterType.java`, by ordinal."""

    SINGLE_TAG = 0
    MULTI_TAG = 1


PERM_INHERIT: Final = 1
PERM_WRITE: Final = 2
PERM_READ: Final = 4
PERM_PRIORITY: Final = 8


@dataclass(frozen=True, slots=True)
class TopicConfig(JSONBody):
    """One topic's configuration (`TopicConfig.java`; defaults as Java's)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: TopicFilterType = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict)

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "attributes": dict(self.attributes),
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type.name,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            topic_name=_get(obj, "topicName", path, _as_str),
            read_queue_nums=_get(obj, "readQueueNums", path, _as_int, 16),
            write_queue_nums=_get(obj, "writeQueueNums", path, _as_int, 16),
            perm=_get(obj, "perm", path, _as_int, PERM_READ | PERM_WRITE),
            topic_filter_type=_get(
                obj,
                "topicFilterType",
                path,
                _enum_reader(TopicFilterType),
                TopicFilterType.SINGLE_TAG,
            ),
            topic_sys_flag=_get(obj, "topicSysFlag", path, _as_int, 0),
            order=_get(obj, "order", path, _as_bool, False),
            attributes=_get(obj, "attributes", path, _map_of(_as_str), {}),
        )


@dataclass(frozen=True, slots=True)
class TopicConfigAndMappingSerializeWrapper(JSONBody):
    """The topic table a broker registers (REGISTER_BROKER) and a master serves to its slaves
    (GET_ALL_TOPIC_CONFIG). Also reads the older `TopicConfigSerializeWrapper`, which lacks
    the mapping properties."""

    topic_config_table: Mapping[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = DataVersion()
    mapping_data_version: DataVersion = DataVersion()
    topic_queue_mapping_info_map: Mapping[str, JSONValue] = field(default_factory=dict)
    topic_queue_mapping_detail_map: Mapping[str, JSONValue] = field(default_factory=dict)

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "dataVersion": self.data_version.to_json_value(),
            "mappingDataVersion": self.mapping_data_version.to_json_value(),
            "topicConfigTable": {
                topic: config.to_json_value() for topic, config in self.topic_config_table.items()
            },
            "topicQueueMappingDetailMap": dict(self.topic_queue_mapping_detail_map),
            "topicQueueMappingInfoMap": dict(self.topic_queue_mapping_info_map),
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            topic_config_table=_get(
                obj, "topicConfigTable", path, _map_of(TopicConfig.from_json_value), {}
            ),
            data_version=_get(obj, "dataVersion", path, DataVersion.from_json_value, DataVersion()),
            mapping_data_version=_get(
                obj, "mappingDataVersion", path, DataVersion.from_json_value, DataVersion()
            ),
            topic_queue_mapping_info_map=_get(
                obj, "topicQueueMappingInfoMap", path, _map_of(_raw), {}
            ),
            topic_queue_mapping_detail_map=_get(
                obj, "topicQueueMappingDetailMap", path, _map_of(_raw), {}
            ),
        )


# --------------------------------------------------------------------------------------------
# Name server


@dataclass(frozen=True, slots=True)
class RegisterBrokerBody(JSONBody):
    """REGISTER_BROKER's body (uncompressed form: pyrmq always sends `compressed=false`)."""

    topic_config_serialize_wrapper: TopicConfigAndMappingSerializeWrapper = (
        TopicConfigAndMappingSerializeWrapper()
    )
    filter_server_list: tuple[str, ...] = ()

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "filterServerList": list(self.filter_server_list),
            "topicConfigSerializeWrapper": self.topic_config_serialize_wrapper.to_json_value(),
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            topic_config_serialize_wrapper=_get(
                obj,
                "topicConfigSerializeWrapper",
                path,
                TopicConfigAndMappingSerializeWrapper.from_json_value,
                TopicConfigAndMappingSerializeWrapper(),
            ),
            filter_server_list=_get(obj, "filterServerList", path, _tuple_of(_as_str), ()),
        )


@dataclass(frozen=True, slots=True)
class KVTable(JSONBody):
    """`{"table":{...}}`: GET_BROKER_RUNTIME_INFO's answer, REGISTER_BROKER's optional answer."""

    table: Mapping[str, str] = field(default_factory=dict)

    def to_json_value(self) -> dict[str, JSONValue]:
        return {"table": dict(self.table)}

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(table=_get(obj, "table", path, _map_of(_as_str), {}))


@dataclass(frozen=True, slots=True)
class QueueData(JSONBody):
    """One broker's queues of a topic, in a `TopicRouteData`."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            broker_name=_get(obj, "brokerName", path, _as_str),
            read_queue_nums=_get(obj, "readQueueNums", path, _as_int, 0),
            write_queue_nums=_get(obj, "writeQueueNums", path, _as_int, 0),
            perm=_get(obj, "perm", path, _as_int, 0),
            topic_sys_flag=_get(obj, "topicSysFlag", path, _as_int, 0),
        )


@dataclass(frozen=True, slots=True)
class BrokerData(JSONBody):
    """One broker set: `broker_addrs` maps name-server broker ids (0 = master) to addresses."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str] = field(default_factory=dict)
    zone_name: str | None = None
    enable_acting_master: bool = False

    def to_json_value(self) -> dict[str, JSONValue]:
        value: dict[str, JSONValue] = {
            "brokerAddrs": {str(broker_id): addr for broker_id, addr in self.broker_addrs.items()},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
            "enableActingMaster": self.enable_acting_master,
        }
        if self.zone_name is not None:
            value["zoneName"] = self.zone_name
        return value

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            cluster=_get(obj, "cluster", path, _as_str),
            broker_name=_get(obj, "brokerName", path, _as_str),
            broker_addrs=_get(obj, "brokerAddrs", path, _int_key_map_of(_as_str), {}),
            zone_name=_get(obj, "zoneName", path, _as_str, None),
            enable_acting_master=_get(obj, "enableActingMaster", path, _as_bool, False),
        )


@dataclass(frozen=True, slots=True)
class TopicRouteData(JSONBody):
    """GET_ROUTEINFO_BY_TOPIC's answer. `encode()` writes the standard-JSON form (quoted
    broker-id keys), which every client parses."""

    queue_datas: tuple[QueueData, ...] = ()
    broker_datas: tuple[BrokerData, ...] = ()
    filter_server_table: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    order_topic_conf: str | None = None
    topic_queue_mapping_by_broker: Mapping[str, JSONValue] | None = None

    def to_json_value(self) -> dict[str, JSONValue]:
        value: dict[str, JSONValue] = {
            "brokerDatas": [broker.to_json_value() for broker in self.broker_datas],
            "filterServerTable": {
                addr: list(servers) for addr, servers in self.filter_server_table.items()
            },
        }
        if self.order_topic_conf is not None:
            value["orderTopicConf"] = self.order_topic_conf
        value["queueDatas"] = [queue.to_json_value() for queue in self.queue_datas]
        if self.topic_queue_mapping_by_broker is not None:
            value["topicQueueMappingByBroker"] = dict(self.topic_queue_mapping_by_broker)
        return value

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            queue_datas=_get(obj, "queueDatas", path, _tuple_of(QueueData.from_json_value), ()),
            broker_datas=_get(obj, "brokerDatas", path, _tuple_of(BrokerData.from_json_value), ()),
            filter_server_table=_get(
                obj, "filterServerTable", path, _map_of(_tuple_of(_as_str)), {}
            ),
            order_topic_conf=_get(obj, "orderTopicConf", path, _as_str, None),
            topic_queue_mapping_by_broker=_get(
                obj, "topicQueueMappingByBroker", path, _map_of(_raw), None
            ),
        )


@dataclass(frozen=True, slots=True)
class ClusterInfo(JSONBody):
    """GET_BROKER_CLUSTER_INFO's answer (Java writes it with unquoted broker-id keys)."""

    broker_addr_table: Mapping[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "brokerAddrTable": {
                name: broker.to_json_value() for name, broker in self.broker_addr_table.items()
            },
            "clusterAddrTable": {
                cluster: list(names) for cluster, names in self.cluster_addr_table.items()
            },
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            broker_addr_table=_get(
                obj, "brokerAddrTable", path, _map_of(BrokerData.from_json_value), {}
            ),
            cluster_addr_table=_get(obj, "clusterAddrTable", path, _map_of(_tuple_of(_as_str)), {}),
        )


# --------------------------------------------------------------------------------------------
# Clients


class ConsumeType(IntEnum):
    """`ConsumeType.java`, by ordinal: pull, push, pop."""

    CONSUME_ACTIVELY = 0
    CONSUME_PASSIVELY = 1
    CONSUME_POP = 2


class MessageModel(IntEnum):
    """`MessageModel.java`, by ordinal. LITE_SELECTIVE (5.5.0, lite consumers) is decoded so that
    such a heartbeat is accepted; pyrmq serves no lite consumption."""

    BROADCASTING = 0
    CLUSTERING = 1
    LITE_SELECTIVE = 2


class ConsumeFromWhere(IntEnum):
    """`ConsumeFromWhere.java`, by ordinal (1-3 are deprecated but still on the wire)."""

    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


@dataclass(frozen=True, slots=True)
class SubscriptionData(JSONBody):
    """One topic subscription of a consumer group. `code_set` holds Java `String.hashCode()`
    of each tag (the C++ client sends `atoi(tag)` instead)."""

    topic: str
    sub_string: str
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            topic=_get(obj, "topic", path, _as_str),
            sub_string=_get(obj, "subString", path, _as_str),
            tags_set=_get(obj, "tagsSet", path, _tuple_of(_as_str), ()),
            code_set=_get(obj, "codeSet", path, _tuple_of(_as_int), ()),
            sub_version=_get(obj, "subVersion", path, _as_long, 0),
            expression_type=_get(obj, "expressionType", path, _as_str, "TAG"),
            class_filter_mode=_get(obj, "classFilterMode", path, _as_bool, False),
        )


@dataclass(frozen=True, slots=True)
class ConsumerData(JSONBody):
    """One consumer group of a client, in a heartbeat."""

    group_name: str
    consume_type: ConsumeType | None = None
    message_model: MessageModel | None = None
    consume_from_where: ConsumeFromWhere | None = None
    subscription_data_set: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False

    def to_json_value(self) -> dict[str, JSONValue]:
        value: dict[str, JSONValue] = {}
        if self.consume_from_where is not None:
            value["consumeFromWhere"] = self.consume_from_where.name
        if self.consume_type is not None:
            value["consumeType"] = self.consume_type.name
        value["groupName"] = self.group_name
        if self.message_model is not None:
            value["messageModel"] = self.message_model.name
        value["subscriptionDataSet"] = [sub.to_json_value() for sub in self.subscription_data_set]
        value["unitMode"] = self.unit_mode
        return value

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            group_name=_get(obj, "groupName", path, _as_str),
            consume_type=_get(obj, "consumeType", path, _enum_reader(ConsumeType), None),
            message_model=_get(obj, "messageModel", path, _enum_reader(MessageModel), None),
            consume_from_where=_get(
                obj, "consumeFromWhere", path, _enum_reader(ConsumeFromWhere), None
            ),
            subscription_data_set=_get(
                obj, "subscriptionDataSet", path, _tuple_of(SubscriptionData.from_json_value), ()
            ),
            unit_mode=_get(obj, "unitMode", path, _as_bool, False),
        )


@dataclass(frozen=True, slots=True)
class ProducerData(JSONBody):
    """One producer group of a client, in a heartbeat."""

    group_name: str

    def to_json_value(self) -> dict[str, JSONValue]:
        return {"groupName": self.group_name}

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        return cls(group_name=_get(_as_object(value, path), "groupName", path, _as_str))


@dataclass(frozen=True, slots=True)
class HeartbeatData(JSONBody):
    """HEART_BEAT's body. With `without_sub` (heartbeat V2) the subscription sets are empty
    and the broker keeps the ones it has."""

    client_id: str
    producer_data_set: tuple[ProducerData, ...] = ()
    consumer_data_set: tuple[ConsumerData, ...] = ()
    heartbeat_fingerprint: int = 0
    without_sub: bool = False

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "clientID": self.client_id,
            "consumerDataSet": [consumer.to_json_value() for consumer in self.consumer_data_set],
            "heartbeatFingerprint": self.heartbeat_fingerprint,
            "producerDataSet": [producer.to_json_value() for producer in self.producer_data_set],
            "withoutSub": self.without_sub,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            client_id=_get(obj, "clientID", path, _as_str),
            producer_data_set=_get(
                obj, "producerDataSet", path, _tuple_of(ProducerData.from_json_value), ()
            ),
            consumer_data_set=_get(
                obj, "consumerDataSet", path, _tuple_of(ConsumerData.from_json_value), ()
            ),
            heartbeat_fingerprint=_get(obj, "heartbeatFingerprint", path, _as_int, 0),
            without_sub=_get(obj, "withoutSub", path, _as_bool, False),
        )


@dataclass(frozen=True, slots=True)
class ConsumerListBody(JSONBody):
    """GET_CONSUMER_LIST_BY_GROUP's answer: the client ids of a group's live consumers."""

    consumer_id_list: tuple[str, ...] = ()

    def to_json_value(self) -> dict[str, JSONValue]:
        return {"consumerIdList": list(self.consumer_id_list)}

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(consumer_id_list=_get(obj, "consumerIdList", path, _tuple_of(_as_str), ()))


# --------------------------------------------------------------------------------------------
# Orderly consumption: LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42)


@dataclass(frozen=True, slots=True)
class MessageQueue(JSONBody):
    """One queue of a topic on one broker (`MessageQueue.java`); hashable, a set member."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json_value(self) -> dict[str, JSONValue]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            topic=_get(obj, "topic", path, _as_str),
            broker_name=_get(obj, "brokerName", path, _as_str),
            queue_id=_get(obj, "queueId", path, _as_int, 0),
        )


_QUEUES: Final = _tuple_of(MessageQueue.from_json_value)
_NO_QUEUES: Final[tuple[MessageQueue, ...]] = ()


@dataclass(frozen=True, slots=True)
class LockBatchRequestBody(JSONBody):
    """LOCK_BATCH_MQ's body, and UNLOCK_BATCH_MQ's (`UnlockBatchRequestBody` has the same
    properties): the queues `client_id` wants to consume orderly for `consumer_group`."""

    consumer_group: str
    client_id: str
    mq_set: frozenset[MessageQueue] = frozenset()
    only_this_broker: bool = False

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "clientId": self.client_id,
            "consumerGroup": self.consumer_group,
            "mqSet": [mq.to_json_value() for mq in _sorted_queues(self.mq_set)],
            "onlyThisBroker": self.only_this_broker,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(
            consumer_group=_get(obj, "consumerGroup", path, _as_str),
            client_id=_get(obj, "clientId", path, _as_str),
            mq_set=frozenset(_get(obj, "mqSet", path, _QUEUES, _NO_QUEUES)),
            only_this_broker=_get(obj, "onlyThisBroker", path, _as_bool, False),
        )


@dataclass(frozen=True, slots=True)
class LockBatchResponseBody(JSONBody):
    """LOCK_BATCH_MQ's answer: the requested queues now locked by the requesting client."""

    lock_ok_mq_set: frozenset[MessageQueue] = frozenset()

    def to_json_value(self) -> dict[str, JSONValue]:
        return {"lockOKMQSet": [mq.to_json_value() for mq in _sorted_queues(self.lock_ok_mq_set)]}

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> Self:
        obj = _as_object(value, path)
        return cls(lock_ok_mq_set=frozenset(_get(obj, "lockOKMQSet", path, _QUEUES, _NO_QUEUES)))


def _sorted_queues(queues: frozenset[MessageQueue]) -> list[MessageQueue]:
    # A Java HashSet has no order; sorting makes our bytes reproducible.
    return sorted(queues, key=lambda mq: (mq.topic, mq.broker_name, mq.queue_id))



# --------------------------------------------------------------------------------------------
# GET_BROKER_HA_STATUS (907, `mqadmin haStatus`): RocketMQ's HARuntimeInfo (its fields are those of
# Java's class; the spec lacks this body). The broker's AutoSwitchHAService fills it.


@dataclass(frozen=True, slots=True)
class HAConnectionRuntimeInfo(JSONBody):
    """One slave connection on a master (RocketMQ's HAConnectionRuntimeInfo): the connection's
    remote address, the slave's acked offset (-1 before its first ack), `diff` = the master's
    max offset - that ack, SyncStateSet membership, bytes sent in the last whole second, and
    the next offset to send (-1 before the first)."""

    addr: str
    slave_ack_offset: int
    diff: int
    in_sync: bool
    transferred_byte_in_second: int
    transfer_from_where: int

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "addr": self.addr, "diff": self.diff, "inSync": self.in_sync,
            "slaveAckOffset": self.slave_ack_offset,
            "transferFromWhere": self.transfer_from_where,
            "transferredByteInSecond": self.transferred_byte_in_second,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> HAConnectionRuntimeInfo:
        obj = _as_object(value, path)
        return cls(
            _get(obj, "addr", path, _as_str, ""),
            _get(obj, "slaveAckOffset", path, _as_long, 0),
            _get(obj, "diff", path, _as_long, 0),
            _get(obj, "inSync", path, _as_bool, False),
            _get(obj, "transferredByteInSecond", path, _as_long, 0),
            _get(obj, "transferFromWhere", path, _as_long, 0),
        )


@dataclass(frozen=True, slots=True)
class HAClientRuntimeInfo(JSONBody):
    """A slave's view (RocketMQ's HAClientRuntimeInfo): the master's HA address (None without
    a master), the local max offset, bytes received in the last whole second, wall times of the
    last read from and write to the master (0 = never). `master_flush_offset` stays 0 on pyrmq:
    it keeps no such offset (Java's is for syncFromLastFile's first slave start)."""

    master_addr: str | None = None
    max_offset: int = 0
    transferred_byte_in_second: int = 0
    last_read_timestamp: int = 0
    last_write_timestamp: int = 0
    master_flush_offset: int = 0

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "lastReadTimestamp": self.last_read_timestamp,
            "lastWriteTimestamp": self.last_write_timestamp,
            "masterAddr": self.master_addr,
            "masterFlushOffset": self.master_flush_offset,
            "maxOffset": self.max_offset,
            "transferredByteInSecond": self.transferred_byte_in_second,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> HAClientRuntimeInfo:
        obj = _as_object(value, path)
        master_addr = obj.get("masterAddr")
        return cls(
            None if master_addr is None else _as_str(master_addr, f"{path}.masterAddr"),
            _get(obj, "maxOffset", path, _as_long, 0),
            _get(obj, "transferredByteInSecond", path, _as_long, 0),
            _get(obj, "lastReadTimestamp", path, _as_long, 0),
            _get(obj, "lastWriteTimestamp", path, _as_long, 0),
            _get(obj, "masterFlushOffset", path, _as_long, 0),
        )


@dataclass(frozen=True, slots=True)
class HARuntimeInfo(JSONBody):
    """GET_BROKER_HA_STATUS's answer (RocketMQ's HARuntimeInfo). A master fills the first
    four fields (`in_sync_slave_nums`: the SyncStateSet less the master, the union while a
    change is pending); a slave, or a broker without a role yet, only the client info."""

    master: bool = False
    master_commit_log_max_offset: int = 0
    in_sync_slave_nums: int = 0
    ha_connection_info: tuple[HAConnectionRuntimeInfo, ...] = ()
    ha_client_runtime_info: HAClientRuntimeInfo = field(default_factory=HAClientRuntimeInfo)

    def to_json_value(self) -> dict[str, JSONValue]:
        return {
            "haClientRuntimeInfo": self.ha_client_runtime_info.to_json_value(),
            "haConnectionInfo": [c.to_json_value() for c in self.ha_connection_info],
            "inSyncSlaveNums": self.in_sync_slave_nums,
            "master": self.master,
            "masterCommitLogMaxOffset": self.master_commit_log_max_offset,
        }

    @classmethod
    def from_json_value(cls, value: JSONValue, path: str) -> HARuntimeInfo:
        obj = _as_object(value, path)
        return cls(
            _get(obj, "master", path, _as_bool, False),
            _get(obj, "masterCommitLogMaxOffset", path, _as_long, 0),
            _get(obj, "inSyncSlaveNums", path, _as_int, 0),
            _get(obj, "haConnectionInfo", path,
                 _tuple_of(HAConnectionRuntimeInfo.from_json_value), ()),
            _get(obj, "haClientRuntimeInfo", path, HAClientRuntimeInfo.from_json_value,
                 HAClientRuntimeInfo()),
        )

__all__ = [
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "BrokerData",
    "ClusterInfo",
    "ConsumeFromWhere",
    "ConsumeType",
    "ConsumerData",
    "ConsumerListBody",
    "DataVersion",
    "HAClientRuntimeInfo",
    "HAConnectionRuntimeInfo",
    "HARuntimeInfo",
    "HeartbeatData",
    "JSONBody",
    "KVTable",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageModel",
    "MessageQueue",
    "ProducerData",
    "QueueData",
    "RegisterBrokerBody",
    "SubscriptionData",
    "TopicConfig",
    "TopicConfigAndMappingSerializeWrapper",
    "TopicFilterType",
    "TopicRouteData",
]
