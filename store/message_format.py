"""The commitlog record: its byte layout, its codec, and the checks recovery and reads rely on.

One stored message is one record (docs/store-format.md §3); a SEND_BATCH_MESSAGE stores one record
per
inner message (§3.7). This module is a pure core: it takes and returns bytes and numbers, and writes
only into the buffer it is given.

Two ways in, one layout:
- cold path: `make_record` / `encode_record` / `decode_record` (tests, tools, the odd lookup), and
  `RECORD_SPEC`, the construct declaration that serves as the readable spec and the test oracle;
- hot path: `prepare_message` (validate and pre-encode, before the append lock) then `write_record`
  (inside the lock: offsets, store timestamp, record CRC), and `prepare_batch` (or
  `prepare_batch_body`, straight from the request body) / `write_batch`. Where `store._native` is
  built, the per-record loops of these run in C; the Python here is their reference.

Invariants:
- TOTALSIZE = 74 + born host (8 or 20) + store host (8 or 20) + body + topic-length width (1 for
  V1, 2 for V2) + topic + properties, all in bytes (§3.1).
- SYSFLAG's two V6 bits always describe the two hosts actually written (§3.2).
- With the property CRC (§3.4), the last 20 bytes of a record are `__CRC32#` 0x01, ten ASCII
  digits (least significant first), 0x02; the digits are crc32 & 0x7FFFFFFF of the record's bytes
  [0, TOTALSIZE - 20), so together with BODYCRC every byte of the record is covered by a CRC.
- `write_record` / `write_batch` write exactly the bytes of `encode_record(make_record(...))`,
  which equal `RECORD_SPEC.build(...)` (tested for every generated message).
- `check_record` never raises for bad bytes: damage is an INVALID result that names the field.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import ipaddress
import mmap
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, NamedTuple, TypeAlias

import construct as cs
import numpy as np
import numpy.typing as npt
from isal import isal_zlib

from store.errors import MessageIllegalError, RecordCorruptError
from store.native import native as _native

if TYPE_CHECKING:
    from typing_extensions import Buffer

# A buffer records are written into: a writable mmap, a bytearray, or a writable memoryview.
WritableBuffer: TypeAlias = "mmap.mmap | bytearray | memoryview"

MAGIC_CODE_V1: Final = -626843481  # 0xDAA320A7: TOPICLENGTH is 1 byte
MAGIC_CODE_V2: Final = -626843477  # 0xDAA320AB: TOPICLENGTH is 2 bytes
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194: end of file, the rest of the file is filler
assert struct.pack(">iii", MAGIC_CODE_V1, MAGIC_CODE_V2, BLANK_MAGIC_CODE) == bytes.fromhex(
    "daa320a7daa320abcbd43194"
)

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
PROPERTY_CRC_NAME: Final = "__CRC32#"
# "__CRC32#" 0x01 + 10 digits + 0x02, counted in PROPERTIESLENGTH and TOTALSIZE.
PROPERTY_CRC_RESERVED_BYTES: Final = 20
PROPERTY_CRC_DIGITS: Final = 10
MAX_PROPERTIES_BYTES: Final = 32767  # PROPERTIESLENGTH is a signed i16

# TopicValidator: 127 chars, except %RETRY% topics (POP retry topics are longer) up to 255.
TOPIC_CHARS_MAX: Final = 127
RETRY_TOPIC_CHARS_MAX: Final = 255
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
# A V1 topic length is a signed i8.
V1_TOPIC_BYTES_MAX: Final = 127

BLANK_RECORD_BYTES: Final = 8  # TOTALSIZE + MAGICCODE; the rest of the file is not written
CRC32_MASK: Final = 0x7FFFFFFF


class SysFlag(enum.IntFlag):
    """SYSFLAG bits (`MessageSysFlag`, docs/store-format.md §3.2), RocketMQ's names and values."""

    COMPRESSED_FLAG = 0x1
    MULTI_TAGS_FLAG = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    BORNHOST_V6_FLAG = 0x10
    STOREHOSTADDRESS_V6_FLAG = 0x20
    NEED_UNWRAP_FLAG = 0x40
    INNER_BATCH_FLAG = 0x80
    COMPRESSION_LZ4_TYPE = 0x100
    COMPRESSION_ZSTD_TYPE = 0x200
    COMPRESSION_ZLIB_TYPE = 0x300


COMPRESSION_TYPE_MASK: Final = 0x700  # MessageSysFlag.COMPRESSION_TYPE_COMPARATOR
_HOST_V6_FLAGS: Final = 0x30  # BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG


# --------------------------------------------------------------------------------------------
# CRC and properties
# --------------------------------------------------------------------------------------------

_isal_crc32 = isal_zlib.crc32


def crc32(data: Buffer) -> int:
    """`UtilAll.crc32`: standard CRC-32 (zlib's) with the sign bit cleared (§3.5); empty -> 0."""
    return int(_isal_crc32(data)) & CRC32_MASK


def encode_properties(props: Mapping[str, str]) -> bytes:
    """`messageProperties2String`: `name 0x01 value 0x02` per entry, in the mapping's order, UTF-8.

    Raises `MessageIllegalError` for a name holding 0x01 or 0x02, or a value holding 0x02: such an
    entry would parse back as something else. Empty names or values are written (as Java does)
    and dropped again by `parse_properties`.
    """
    parts: list[str] = []
    for name, value in props.items():
        if NAME_VALUE_SEPARATOR in name or PROPERTY_SEPARATOR in name:
            raise MessageIllegalError(f"property name {name!r} contains a separator (0x01/0x02)")
        if PROPERTY_SEPARATOR in value:
            raise MessageIllegalError(f"property {name!r}: value {value!r} contains 0x02")
        parts.append(f"{name}\x01{value}\x02")
    return "".join(parts).encode()


def parse_properties(raw: bytes) -> dict[str, str]:
    """`string2messageProperties` (§3.4): the property map a Java reader sees.

    Split on 0x02; keep a segment only if its first 0x01 has at least one char before and after
    it (empty names and empty values are dropped); the value is everything after that first 0x01;
    a later duplicate name wins; a missing trailing 0x02 is fine. Invalid UTF-8 is replaced with
    U+FFFD, as Java's decoder does.
    """
    result: dict[str, str] = {}
    for segment in raw.decode("utf-8", "replace").split(PROPERTY_SEPARATOR):
        sep = segment.find(NAME_VALUE_SEPARATOR)
        if 0 < sep < len(segment) - 1:
            result[segment[:sep]] = segment[sep + 1 :]
    return result


def _find_property(raw: bytes, key: bytes) -> bytes | None:
    """The raw value `parse_properties(raw).get(name)` would give, without parsing everything.

    `key` is the name followed by 0x01. A match counts only at a segment start (offset 0 or after
    0x02; values never hold 0x02), the last non-empty one wins, and the value runs to the next
    0x02 or the end. Returns None when the property is absent (or only present with empty values).
    """
    at = raw.rfind(key)
    while at >= 0:
        if at == 0 or raw[at - 1] == 2:
            start = at + len(key)
            stop = raw.find(b"\x02", start)
            value = raw[start : stop if stop >= 0 else len(raw)]
            if value:
                return value
        at = raw.rfind(key, 0, at + len(key) - 1)
    return None


_CRC_PROPERTY_KEY: Final = PROPERTY_CRC_NAME.encode() + b"\x01"
# What write_record overwrites: the ten placeholder digits before the final 0x02.
_CRC_PROPERTY_PLACEHOLDER: Final = _CRC_PROPERTY_KEY + b"0" * PROPERTY_CRC_DIGITS + b"\x02"
assert len(_CRC_PROPERTY_PLACEHOLDER) == PROPERTY_CRC_RESERVED_BYTES


def normalize_properties(raw: bytes) -> bytes:
    """What the broker stores before the 20-byte CRC reservation when the property CRC is on.

    Drops every `__CRC32#` segment the client sent (`MessageUtils.deleteProperty`: at a segment
    start, with its 0x02), then appends one 0x02 if the string is non-empty and lacks it (§3.4),
    so that the reservation parses as a property of its own.
    """
    if raw.rfind(_CRC_PROPERTY_KEY) >= 0:
        segments = raw.split(b"\x02")
        last = segments.pop()
        kept = [s + b"\x02" for s in segments if not s.startswith(_CRC_PROPERTY_KEY)]
        if not last.startswith(_CRC_PROPERTY_KEY):
            kept.append(last)
        raw = b"".join(kept)
    if raw and raw[-1] != 2:
        raw += b"\x02"
    return raw


def java_string_hash(s: str) -> int:
    """Java `String.hashCode()`: h = 31*h + c over UTF-16 code units, as a signed int32."""
    h = 0
    if s.isascii():
        for unit in s.encode("ascii"):
            h = (31 * h + unit) & 0xFFFFFFFF
    else:
        data = s.encode("utf-16-be")
        for (unit,) in struct.iter_unpack(">H", data):
            h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """The consume-queue tagsCode of a TAGS value (§4.2): its Java hash; 0 for None or empty.

    (The schedule topic's delivery timestamp in place of the hash is the dispatcher's business.)
    """
    return java_string_hash(tags) if tags else 0


@functools.lru_cache(maxsize=4096)
def _tags_code_of_value(raw_value: bytes) -> int:
    return java_string_hash(raw_value.decode("utf-8", "replace"))


_TAGS_KEY: Final = b"TAGS\x01"


def _tags_code_of_properties(raw: bytes) -> int:
    value = _find_property(raw, _TAGS_KEY)
    return 0 if value is None else _tags_code_of_value(value)


# --------------------------------------------------------------------------------------------
# Hosts and the decoded record
# --------------------------------------------------------------------------------------------

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
# TOTALSIZE, every record's first field: the one way to find a record's end from its start.
TOTAL_SIZE: Final = _I32
_I64: Final = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class HostPort:
    """A BORNHOST or STOREHOST: IPv4 (4 bytes) or IPv6 (16 bytes) address and a port."""

    ip: bytes
    port: int
    # The field as stored: ip, then port as a big-endian i32 (8 or 20 bytes).
    packed: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.ip) not in (4, 16):
            raise ValueError(f"host ip must be 4 or 16 bytes, got {len(self.ip)}")
        if not 0 <= self.port <= 0xFFFF:
            raise ValueError(f"host port {self.port} is outside [0, 65535]")
        object.__setattr__(self, "packed", bytes(self.ip) + _I32.pack(self.port))

    @classmethod
    def from_str(cls, address: str) -> HostPort:
        """Parse `"127.0.0.1:10911"` or `"[::1]:10911"`; raises ValueError.

        An IPv4-mapped IPv6 address (`[::ffff:1.2.3.4]`, what a dual-stack socket reports) becomes
        IPv4, as Java's `InetAddress` does, so such a producer gets an IPv4 BORNHOST.
        """
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"host address {address!r} is not host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        ip = ipaddress.ip_address(host)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return cls(ip.packed, int(port))

    @property
    def is_v6(self) -> bool:
        return len(self.ip) == 16

    def __str__(self) -> str:
        ip = ipaddress.ip_address(self.ip)
        return f"[{ip}]:{self.port}" if self.is_v6 else f"{ip}:{self.port}"


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One decoded record, every field of §3.1 in order (`properties` as stored, raw)."""

    total_size: int
    magic_code: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phy_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: HostPort
    store_timestamp: int
    store_host: HostPort
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: bytes

    def properties_map(self) -> dict[str, str]:
        return parse_properties(self.properties)

    @property
    def tags(self) -> str | None:
        return self.properties_map().get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        """The KEYS property: space-separated message keys, or None."""
        return self.properties_map().get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        """The UNIQ_KEY property (the client message id), or None."""
        return self.properties_map().get(PROPERTY_UNIQ_KEY)


def offset_msg_id(store_host: HostPort, phy_offset: int) -> str:
    """The offsetMsgId of §3.1: hex of STOREHOST ip + port (i32) + PHYSICALOFFSET (i64), upper case.

    32 chars for an IPv4 store host, 56 for IPv6.
    """
    return (store_host.packed + _I64.pack(phy_offset)).hex().upper()


def offset_msg_ids(store_host: HostPort, phy_offsets: Iterable[int]) -> str:
    """A batch's msgId: the offsetMsgId of each record (offsets >= 0), comma-separated."""
    prefix = store_host.packed.hex().upper()
    return ",".join([f"{prefix}{offset:016X}" for offset in phy_offsets])


# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------


def _host_spec(v6_flag: int) -> cs.Struct:
    return cs.Struct(
        "ip" / cs.IfThenElse(cs.this._.sys_flag & v6_flag, cs.Bytes(16), cs.Bytes(4)),
        "port" / cs.Int32sb,
    )


# Commitlog record, IPv4 born host and IPv4 store host (docs/store-format.md §3.1). An IPv6 host is
# 20 bytes instead of 8 and moves everything after it by 12; a V2 record's TOPICLENGTH is an i16.
#  0           4           8         12         16     20            28               36
#  | TOTALSIZE | MAGICCODE | BODYCRC | QUEUEID  | FLAG | QUEUEOFFSET | PHYSICALOFFSET | SYSFLAG |
#  | i32       | i32       | i32     | i32      | i32  | i64         | i64            | i32     |
#  40              48                     56               64                      72
#  | BORNTIMESTAMP | BORNHOST ip, port    | STORETIMESTAMP | STOREHOST ip, port    |
#  | i64           | 4|16 bytes, i32      | i64            | 4|16 bytes, i32       |
#  72               76                            84           88     88+B
#  | RECONSUMETIMES | PREPARED_TRANSACTION_OFFSET | BODYLENGTH | BODY | TOPICLENGTH | TOPIC |
#  | i32            | i64                         | i32 = B    | B    | i8|i16 = T  | T     |
#                                                                     big-endian, signed
#  | PROPERTIESLENGTH | PROPERTIES (ends with the 20-byte __CRC32# property when enabled) |
#  | i16 = P          | P                                                                 |
RECORD_SPEC = cs.Struct(
    "total_size" / cs.Int32sb,
    "magic_code" / cs.Int32sb,
    "body_crc" / cs.Int32sb,
    "queue_id" / cs.Int32sb,
    "flag" / cs.Int32sb,
    "queue_offset" / cs.Int64sb,
    "phy_offset" / cs.Int64sb,
    "sys_flag" / cs.Int32sb,
    "born_timestamp" / cs.Int64sb,
    "born_host" / _host_spec(SysFlag.BORNHOST_V6_FLAG),
    "store_timestamp" / cs.Int64sb,
    "store_host" / _host_spec(SysFlag.STOREHOSTADDRESS_V6_FLAG),
    "reconsume_times" / cs.Int32sb,
    "prepared_transaction_offset" / cs.Int64sb,
    "body" / cs.Prefixed(cs.Int32sb, cs.GreedyBytes),
    "topic"
    / cs.PascalString(
        cs.Switch(
            cs.this.magic_code,
            {MAGIC_CODE_V1: cs.Int8sb, MAGIC_CODE_V2: cs.Int16sb},
            default=cs.Error,
        ),
        "utf8",
    ),
    "properties" / cs.Prefixed(cs.Int16sb, cs.GreedyBytes),
)

# A layout is the pair of host widths, indexed by SYSFLAG & 0x30 >> 4: 0 v4/v4, 1 v6 born,
# 2 v6 store, 3 v6/v6.
_LAYOUTS: Final = (0, 1, 2, 3)
_HOST_BYTES: Final = (8, 20)


def _born_len(layout: int) -> int:
    return _HOST_BYTES[layout & 1]


def _store_len(layout: int) -> int:
    return _HOST_BYTES[layout >> 1]


# Fixed part: everything up to and including BODYLENGTH (88 bytes for v4/v4, 112 for v6/v6).
_FIXED_BYTES: Final = tuple(72 + _born_len(x) + _store_len(x) for x in _LAYOUTS)
assert _FIXED_BYTES == (88, 100, 100, 112)
# The smallest record of each layout (V1, empty body, topic and properties): 74 + hosts + 1.
_RECORD_BYTES_MIN: Final = tuple(f + 1 + 2 for f in _FIXED_BYTES)
assert _RECORD_BYTES_MIN[0] == 91
_STORE_TIMESTAMP_POS: Final = tuple(48 + _born_len(x) for x in _LAYOUTS)

# Hot-path header: precomputed pieces around the three fields known only inside the lock.
#   head (TOTALSIZE..FLAG) | QUEUEOFFSET PHYSICALOFFSET | mid (SYSFLAG..BORNHOST) |
#   STORETIMESTAMP | post (STOREHOST..BODYLENGTH)
_HEAD: Final = struct.Struct(">iiiii")
_MID: Final = struct.Struct(">iq")
_POST: Final = struct.Struct(">iqi")
_HEADERS: Final = tuple(
    struct.Struct(f">20sqq{12 + _born_len(x)}sq{16 + _store_len(x)}s") for x in _LAYOUTS
)
assert tuple(h.size for h in _HEADERS) == _FIXED_BYTES
# Filled in at append: QUEUEOFFSET and PHYSICALOFFSET at record offset 20, and STORETIMESTAMP
# at _STORE_TIMESTAMP_POS[layout].
_OFFSETS: Final = struct.Struct(">qq")

# Cold-path codec of the fixed part, and the subset check_record reads (hosts skipped).
_FIXED: Final = tuple(
    struct.Struct(f">iiiiiqqiq{_born_len(x) - 4}siq{_store_len(x) - 4}siiqi") for x in _LAYOUTS
)
_CHECK: Final = tuple(
    struct.Struct(f">iiiiiqqiq{_born_len(x)}xq{_store_len(x)}x12xi") for x in _LAYOUTS
)
assert tuple(s.size for s in _FIXED) == tuple(s.size for s in _CHECK) == _FIXED_BYTES
_SIZE_MAGIC: Final = struct.Struct(">ii")


def _layout_of(born_host: HostPort, store_host: HostPort) -> int:
    return (len(born_host.ip) == 16) | (len(store_host.ip) == 16) << 1


def _layout_sys_flag(sys_flag: int, layout: int) -> int:
    """A client's SYSFLAG with the V6 bits replaced by the real hosts' (§3.2)."""
    return (sys_flag & ~_HOST_V6_FLAGS) | (layout << 4)


def _topic_length_bytes(magic_code: int) -> int:
    return 2 if magic_code == MAGIC_CODE_V2 else 1


def _topic_magic_code(topic: str, topic_raw: bytes) -> int:
    # Java switches to V2 on the char count (autoMessageVersionOnTopicLen); a topic of <= 127
    # chars but > 127 UTF-8 bytes (never a legal topic) would overflow Java's i8, so it is V2 too.
    if len(topic) > TOPIC_CHARS_MAX or len(topic_raw) > V1_TOPIC_BYTES_MAX:
        return MAGIC_CODE_V2
    return MAGIC_CODE_V1


def record_size(
    *, sys_flag: int, magic_code: int, body_bytes: int, topic_bytes: int, properties_bytes: int
) -> int:
    """`calMsgLength` (§3.1): TOTALSIZE of a record with these lengths (properties incl. CRC)."""
    layout = (sys_flag & _HOST_V6_FLAGS) >> 4
    return (
        _FIXED_BYTES[layout]
        + body_bytes
        + _topic_length_bytes(magic_code)
        + topic_bytes
        + 2
        + properties_bytes
    )


# --------------------------------------------------------------------------------------------
# Cold path: make / encode / decode
# --------------------------------------------------------------------------------------------


def _crc_digits(crc: int) -> bytes:
    """The 10 ASCII digits of a record CRC, least significant first, '0'-padded (§3.4)."""
    return (b"%010d" % crc)[::-1]


def make_record(
    *,
    topic: str,
    body: bytes,
    properties: bytes = b"",
    born_host: HostPort,
    store_host: HostPort,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    phy_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    store_timestamp: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    magic_code: int | None = None,
    append_prop_crc: bool = False,
) -> MessageRecord:
    """A consistent record: TOTALSIZE, BODYCRC and the V6 bits filled in from the other fields.

    `magic_code` defaults to what `prepare_message` picks for the topic. With `append_prop_crc`,
    `properties` gets the 20-byte `__CRC32#` property appended, with the right digits;
    `properties` is otherwise taken as is (pass it through `normalize_properties` first to mirror
    the broker). Damaged records are made with `dataclasses.replace` on the result.
    """
    topic_raw = topic.encode()
    if magic_code is None:
        magic_code = _topic_magic_code(topic, topic_raw)
    layout = _layout_of(born_host, store_host)
    sys_flag = _layout_sys_flag(sys_flag, layout)
    stored_properties = properties + (_CRC_PROPERTY_PLACEHOLDER if append_prop_crc else b"")
    total_size = record_size(
        sys_flag=sys_flag,
        magic_code=magic_code,
        body_bytes=len(body),
        topic_bytes=len(topic_raw),
        properties_bytes=len(stored_properties),
    )
    record = MessageRecord(
        total_size=total_size,
        magic_code=magic_code,
        body_crc=crc32(body),
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        phy_offset=phy_offset,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=born_host,
        store_timestamp=store_timestamp,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
        body=body,
        topic=topic,
        properties=stored_properties,
    )
    if not append_prop_crc:
        return record
    crc = crc32(encode_record(record)[: total_size - PROPERTY_CRC_RESERVED_BYTES])
    return dataclasses.replace(
        record, properties=properties + _CRC_PROPERTY_KEY + _crc_digits(crc) + b"\x02"
    )


def encode_record(rec: MessageRecord) -> bytes:
    """The record's bytes, every field exactly as given (TOTALSIZE and BODYCRC are not recomputed).

    Raises ValueError when the fields cannot be laid out: a host whose width disagrees with its
    SYSFLAG bit, an unknown magic code, a topic or property string too long for its length field.
    """
    layout = (rec.sys_flag & _HOST_V6_FLAGS) >> 4
    if len(rec.born_host.packed) != _born_len(layout):
        raise ValueError(f"BORNHOST {rec.born_host} disagrees with SYSFLAG={rec.sys_flag:#x}")
    if len(rec.store_host.packed) != _store_len(layout):
        raise ValueError(f"STOREHOST {rec.store_host} disagrees with SYSFLAG={rec.sys_flag:#x}")
    topic_raw = rec.topic.encode()
    if rec.magic_code == MAGIC_CODE_V1:
        if len(topic_raw) > V1_TOPIC_BYTES_MAX:
            raise ValueError(f"V1 topic of {len(topic_raw)} bytes exceeds {V1_TOPIC_BYTES_MAX}")
        topic_length = _I8.pack(len(topic_raw))
    elif rec.magic_code == MAGIC_CODE_V2:
        topic_length = _I16.pack(len(topic_raw))
    else:
        raise ValueError(f"MAGICCODE={rec.magic_code & 0xFFFFFFFF:#010x} is not V1 or V2")
    if len(rec.properties) > MAX_PROPERTIES_BYTES:
        raise ValueError(f"{len(rec.properties)} property bytes exceed {MAX_PROPERTIES_BYTES}")
    fixed = _FIXED[layout].pack(
        rec.total_size,
        rec.magic_code,
        rec.body_crc,
        rec.queue_id,
        rec.flag,
        rec.queue_offset,
        rec.phy_offset,
        rec.sys_flag,
        rec.born_timestamp,
        rec.born_host.ip,
        rec.born_host.port,
        rec.store_timestamp,
        rec.store_host.ip,
        rec.store_host.port,
        rec.reconsume_times,
        rec.prepared_transaction_offset,
        len(rec.body),
    )
    return b"".join(
        (
            fixed,
            rec.body,
            topic_length,
            topic_raw,
            _I16.pack(len(rec.properties)),
            rec.properties,
        )
    )


def _corrupt(pos: int, what: str) -> RecordCorruptError:
    return RecordCorruptError(f"record at {pos}: {what}")


def decode_record(buf: Buffer, pos: int = 0) -> MessageRecord:
    """Decode the record at `pos`, checking its structure; raises `RecordCorruptError`.

    Checked: enough bytes, the magic code (V1/V2; a BLANK is an error here), TOTALSIZE against
    the parsed lengths, non-negative lengths, UTF-8 topic, valid hosts. Not checked: the CRCs
    and PHYSICALOFFSET (that is `check_record`'s job); the error names the field and value.
    """
    view = memoryview(buf).cast("B")
    if not 0 <= pos <= len(view):
        raise ValueError(f"pos={pos} outside the buffer of {len(view)} bytes")
    left = len(view) - pos
    if left < 8:
        raise _corrupt(pos, f"only {left} bytes left, TOTALSIZE and MAGICCODE need 8")
    total_size, magic_code = _SIZE_MAGIC.unpack_from(view, pos)
    if magic_code not in (MAGIC_CODE_V1, MAGIC_CODE_V2):
        raise _corrupt(pos, f"MAGICCODE={magic_code & 0xFFFFFFFF:#010x} is not V1 or V2")
    # SYSFLAG decides the layout; read it only once the smallest record is known to fit.
    if not _RECORD_BYTES_MIN[0] <= total_size <= left:
        raise _corrupt(
            pos, f"TOTALSIZE={total_size} outside [{_RECORD_BYTES_MIN[0]}, {left}] (bytes left)"
        )
    (sys_flag,) = _I32.unpack_from(view, pos + 36)
    layout = (sys_flag & _HOST_V6_FLAGS) >> 4
    topic_length_bytes = _topic_length_bytes(magic_code)
    fixed_bytes = _FIXED_BYTES[layout]
    if total_size < fixed_bytes + topic_length_bytes + 2:
        raise _corrupt(pos, f"TOTALSIZE={total_size} too small for SYSFLAG={sys_flag:#x}")
    (
        _,
        _,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        phy_offset,
        _,
        born_timestamp,
        born_ip,
        born_port,
        store_timestamp,
        store_ip,
        store_port,
        reconsume_times,
        prepared_transaction_offset,
        body_length,
    ) = _FIXED[layout].unpack_from(view, pos)
    end = pos + total_size
    body_pos = pos + fixed_bytes
    if not 0 <= body_length <= end - body_pos - topic_length_bytes - 2:
        raise _corrupt(pos, f"BODYLENGTH={body_length} does not fit TOTALSIZE={total_size}")
    topic_pos = body_pos + body_length
    length_struct = _I16 if topic_length_bytes == 2 else _I8
    (topic_length,) = length_struct.unpack_from(view, topic_pos)
    topic_pos += topic_length_bytes
    if not 0 <= topic_length <= end - topic_pos - 2:
        raise _corrupt(pos, f"TOPICLENGTH={topic_length} does not fit TOTALSIZE={total_size}")
    topic_end = topic_pos + topic_length
    (properties_length,) = _I16.unpack_from(view, topic_end)
    properties_pos = topic_end + 2
    if properties_length < 0 or properties_pos + properties_length != end:
        raise _corrupt(
            pos,
            f"PROPERTIESLENGTH={properties_length}: lengths add up to "
            f"{properties_pos + properties_length - pos}, TOTALSIZE={total_size}",
        )
    try:
        topic = str(view[topic_pos:topic_end], "utf-8")
    except UnicodeDecodeError as err:
        raise _corrupt(pos, f"TOPIC is not UTF-8: {err}") from err
    try:
        born_host = HostPort(bytes(born_ip), born_port)
        store_host = HostPort(bytes(store_ip), store_port)
    except ValueError as err:
        raise _corrupt(pos, f"BORNHOST/STOREHOST: {err}") from err
    return MessageRecord(
        total_size=total_size,
        magic_code=magic_code,
        body_crc=body_crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        phy_offset=phy_offset,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=born_host,
        store_timestamp=store_timestamp,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
        body=bytes(view[body_pos : body_pos + body_length]),
        topic=topic,
        properties=bytes(view[properties_pos:end]),
    )


def read_store_timestamp(buf: Buffer, pos: int) -> int:
    """STORETIMESTAMP of the record at `pos` (at 56, or 68 after an IPv6 BORNHOST).

    For a record already checked; raises struct.error if the buffer ends first.
    """
    (sys_flag,) = _I32.unpack_from(buf, pos + 36)
    (store_timestamp,) = _I64.unpack_from(
        buf, pos + _STORE_TIMESTAMP_POS[(sys_flag & _HOST_V6_FLAGS) >> 4]
    )
    return int(store_timestamp)


def write_blank(buf: WritableBuffer, pos: int, size: int) -> None:
    """Write the 8-byte BLANK record (§3.6) claiming the `size` bytes to the end of the file."""
    if size < BLANK_RECORD_BYTES:
        raise ValueError(f"BLANK size={size} is below {BLANK_RECORD_BYTES}")
    _SIZE_MAGIC.pack_into(buf, pos, size, BLANK_MAGIC_CODE)


# --------------------------------------------------------------------------------------------
# Hot path: prepare before the append lock, write inside it
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _encoded_topic(topic: str, batch: bool, /) -> tuple[int, bytes]:
    """(magic code, TOPICLENGTH + TOPIC bytes) of a topic; raises `MessageIllegalError`.

    Cached (positional arguments keep the lookup cheap): a broker sees few distinct topics.
    """
    if not topic:
        raise MessageIllegalError("topic is empty")
    limit = (
        RETRY_TOPIC_CHARS_MAX
        if not batch and topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        else TOPIC_CHARS_MAX
    )
    if len(topic) > limit:
        shown = topic if len(topic) <= 60 else f"{topic[:60]}..."
        raise MessageIllegalError(
            f"{'batch ' if batch else ''}topic {shown!r}: {len(topic)} chars exceeds the limit "
            f"of {limit}"
        )
    topic_raw = topic.encode()
    magic_code = _topic_magic_code(topic, topic_raw)
    length_struct = _I16 if magic_code == MAGIC_CODE_V2 else _I8
    return magic_code, length_struct.pack(len(topic_raw)) + topic_raw


def _stored_properties(raw: bytes, append_prop_crc: bool, /) -> tuple[bytes, int]:
    """(PROPERTIES as stored without the CRC reservation, PROPERTIESLENGTH with it)."""
    if not append_prop_crc:
        return raw, len(raw)
    # (rfind: `in` is twice as slow on short bytes.)
    if raw.rfind(_CRC_PROPERTY_KEY) >= 0 or (raw and raw[-1] != 2):
        raw = normalize_properties(raw)
    return raw, len(raw) + PROPERTY_CRC_RESERVED_BYTES


def _properties_too_long(what: str, length: int, append_prop_crc: bool) -> MessageIllegalError:
    reservation = " (with the 20-byte __CRC32# reservation)" if append_prop_crc else ""
    return MessageIllegalError(
        f"{what}: properties_size={length}{reservation} exceeds the limit of {MAX_PROPERTIES_BYTES}"
    )


_INT_FIELD_BITS: Final = {
    "total_size": 32,
    "queue_id": 32,
    "flag": 32,
    "sys_flag": 32,
    "born_timestamp": 64,
    "reconsume_times": 32,
    "prepared_transaction_offset": 64,
}


def _int_range_error(what: str, values: Mapping[str, int]) -> MessageIllegalError:
    """Name the field a struct.error came from (only on the error path)."""
    for name, value in values.items():
        bits = _INT_FIELD_BITS[name]
        if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            return MessageIllegalError(
                f"{what}: {name}={value} does not fit a signed {bits}-bit field"
            )
    return MessageIllegalError(f"{what}: a field does not fit its width: {dict(values)}")


# EncodedMessage and RecordCheck are NamedTuples, not frozen dataclasses: one is built per message
# and the other per record scanned by recovery, and a frozen dataclass's __init__ costs ~70 ns
# per field here (13 fields: 0.9 us; as a NamedTuple: 0.18 us). Both are just as immutable.
class EncodedMessage(NamedTuple):
    """A validated message, pre-encoded once before the append lock: its record with zeros for
    QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and the record CRC digits, which `write_record`
    fills in. Made only by `prepare_message`.
    """

    topic: str
    queue_id: int
    sys_flag: int  # as stored: the client's flags with the V6 bits of the real hosts
    tags_code: int  # hash of TAGS (0 if none), for the consume-queue unit
    total_size: int
    body: bytes
    properties: bytes  # as stored, without the 20-byte CRC reservation
    append_prop_crc: bool
    template: bytes  # the record, total_size bytes
    store_timestamp_at: int  # STORETIMESTAMP's position in the record

    def __repr__(self) -> str:
        return (
            f"EncodedMessage(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"sys_flag={self.sys_flag:#x}, tags_code={self.tags_code}, "
            f"total_size={self.total_size}, append_prop_crc={self.append_prop_crc})"
        )


def prepare_message(
    *,
    topic: str,
    queue_id: int,
    flag: int,
    body: bytes,
    properties: bytes,
    sys_flag: int,
    born_timestamp: int,
    born_host: HostPort,
    store_host: HostPort,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    append_prop_crc: bool = True,
    max_message_size: int,
) -> EncodedMessage:
    """Validate one message and pre-encode its record; raises `MessageIllegalError`.

    Limits: topic non-empty and <= 127 chars (a `%RETRY%` topic <= 255, stored as V2 beyond 127);
    body <= `max_message_size` bytes; properties <= 32767 bytes including the 20-byte reservation;
    integer fields within their widths. With `append_prop_crc` the client's `__CRC32#` property
    is dropped and a missing final 0x02 added (§3.4); without it the properties are stored as
    sent (Java's behaviour). SYSFLAG's V6 bits come from the hosts, never from the client (§3.2).
    """
    magic_code, topic_part = _encoded_topic(topic, False)
    body_length = len(body)
    if body_length > max_message_size:
        raise MessageIllegalError(
            f"topic {topic}: body_size={body_length} exceeds max_message_size={max_message_size}"
        )
    properties, properties_length = _stored_properties(properties, append_prop_crc)
    if properties_length > MAX_PROPERTIES_BYTES:
        raise _properties_too_long(f"topic {topic}", properties_length, append_prop_crc)
    # _layout_of and _layout_sys_flag, inlined.
    layout = (len(born_host.ip) == 16) | (len(store_host.ip) == 16) << 1
    sys_flag = (sys_flag & ~_HOST_V6_FLAGS) | (layout << 4)
    header = _HEADERS[layout]
    total_size = header.size + body_length + len(topic_part) + 2 + properties_length
    try:
        head = _HEAD.pack(total_size, magic_code, _isal_crc32(body) & CRC32_MASK, queue_id, flag)
        mid = _MID.pack(sys_flag, born_timestamp) + born_host.packed
        post = store_host.packed + _POST.pack(
            reconsume_times, prepared_transaction_offset, body_length
        )
    except struct.error as err:
        raise _int_range_error(
            f"topic {topic}",
            {
                "total_size": total_size,
                "queue_id": queue_id,
                "flag": flag,
                "sys_flag": sys_flag,
                "born_timestamp": born_timestamp,
                "reconsume_times": reconsume_times,
                "prepared_transaction_offset": prepared_transaction_offset,
            },
        ) from err
    template = b"".join(
        (
            header.pack(head, 0, 0, mid, 0, post),
            body,
            topic_part,
            _I16.pack(properties_length),
            properties,
            _CRC_PROPERTY_PLACEHOLDER if append_prop_crc else b"",
        )
    )
    return EncodedMessage(
        topic,
        queue_id,
        sys_flag,
        _tags_code_of_properties(properties),
        total_size,
        body,
        properties,
        append_prop_crc,
        template,
        _STORE_TIMESTAMP_POS[layout],
    )


def write_record(
    buf: WritableBuffer,
    pos: int,
    msg: EncodedMessage,
    *,
    queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
) -> int:
    """Write `msg`'s record at `buf[pos : pos + msg.total_size]`; returns `msg.total_size`.

    The caller has checked that the record fits. With the property CRC, the digits cover the
    offsets and the store timestamp. Runs in C (`store/_native.c`) when built, else
    `write_record_python`; tests hold the two to the same bytes.
    """
    if _native is None:
        return write_record_python(
            buf, pos, msg, queue_offset=queue_offset, phy_offset=phy_offset,
            store_timestamp=store_timestamp,
        )
    return _native.write_record(
        buf, pos, msg.template, queue_offset, phy_offset, store_timestamp,
        msg.store_timestamp_at, msg.append_prop_crc,
    )


def write_record_python(
    buf: WritableBuffer,
    pos: int,
    msg: EncodedMessage,
    *,
    queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
) -> int:
    """`write_record` in Python: the reference for the C version, and its stand-in."""
    end = pos + msg.total_size
    buf[pos:end] = msg.template
    _OFFSETS.pack_into(buf, pos + 20, queue_offset, phy_offset)
    _I64.pack_into(buf, pos + msg.store_timestamp_at, store_timestamp)
    if msg.append_prop_crc:
        crc = _isal_crc32(memoryview(buf)[pos : end - PROPERTY_CRC_RESERVED_BYTES]) & CRC32_MASK
        buf[end - 11 : end - 1] = (b"%010d" % crc)[::-1]  # _crc_digits, inlined
    return msg.total_size


# --------------------------------------------------------------------------------------------
# Batches: the SEND_BATCH_MESSAGE body, and one record per inner message
# --------------------------------------------------------------------------------------------

# Wire batch body entry (docs/remoting-protocol.md §6.3), one per inner message:
#  0           4           8         12     16           20     20+B               22+B
#  | TOTALSIZE | MAGICCODE | BODYCRC | FLAG | BODYLENGTH | BODY | PROPERTIESLENGTH | PROPERTIES |
#  | i32       | i32 (0)   | i32 (0) | i32  | i32 = B    | B    | i16 = P          | P          |
BATCH_ENTRY_SPEC = cs.Struct(
    "total_size" / cs.Int32sb,
    "magic_code" / cs.Int32sb,
    "body_crc" / cs.Int32sb,
    "flag" / cs.Int32sb,
    "body" / cs.Prefixed(cs.Int32sb, cs.GreedyBytes),
    "properties" / cs.Prefixed(cs.Int16sb, cs.GreedyBytes),
)
_BATCH_ENTRY_HEAD: Final = struct.Struct(">12xii")
BATCH_ENTRY_FIXED_BYTES: Final = 22


def batch_body_is_plain(body: bytes, append_prop_crc: bool) -> bool:
    """True if a SEND_BATCH_MESSAGE body is well formed and needs no normalising, checked in C
    in one walk; False when it is not, or when the extension is not built (then
    `decode_batch_body` decides, with the same refusals)."""
    return _native is not None and bool(_native.batch_body_is_plain(body, append_prop_crc))


def decode_batch_body(body: bytes) -> list[tuple[int, bytes, bytes]]:
    """Split a SEND_BATCH_MESSAGE body into (flag, body, properties) per inner message.

    Like Java, the entries' TOTALSIZE, MAGICCODE and BODYCRC are not relied on (clients write 0
    for the latter two). Raises `MessageIllegalError` naming the entry and field when a length is
    negative or runs past the body.
    """
    messages: list[tuple[int, bytes, bytes]] = []
    pos = 0
    size = len(body)
    while pos < size:
        index = len(messages)
        if size - pos < BATCH_ENTRY_FIXED_BYTES:
            raise MessageIllegalError(
                f"batch message {index} at {pos}: {size - pos} bytes left, an entry needs "
                f"{BATCH_ENTRY_FIXED_BYTES}"
            )
        flag, body_length = _BATCH_ENTRY_HEAD.unpack_from(body, pos)
        body_pos = pos + 20
        if not 0 <= body_length <= size - body_pos - 2:
            raise MessageIllegalError(
                f"batch message {index} at {pos}: BODYLENGTH={body_length} outside "
                f"[0, {size - body_pos - 2}]"
            )
        properties_pos = body_pos + body_length + 2
        (properties_length,) = _I16.unpack_from(body, properties_pos - 2)
        if not 0 <= properties_length <= size - properties_pos:
            raise MessageIllegalError(
                f"batch message {index} at {pos}: PROPERTIESLENGTH={properties_length} outside "
                f"[0, {size - properties_pos}]"
            )
        pos = properties_pos + properties_length
        messages.append((flag, body[body_pos : body_pos + body_length], body[properties_pos:pos]))
    return messages


@dataclass(frozen=True, slots=True, eq=False)
class EncodedBatch:
    """A validated SEND_BATCH_MESSAGE, pre-encoded: one record per inner message (§3.7).

    `template` holds all records back to back with zero offsets, store timestamp and CRC digits;
    `write_batch` copies it once and fills those in. `bounds[i]` is record i's start relative to
    the batch, `bounds[count] == total_size`. The arrays are read-only; no equality (the arrays
    would make it ambiguous).
    """

    topic: str
    queue_id: int
    count: int
    total_size: int
    sizes: npt.NDArray[np.int32]
    tags_codes: npt.NDArray[np.int64]
    sys_flag: int
    append_prop_crc: bool
    bounds: tuple[int, ...] = field(repr=False)
    template: bytes = field(repr=False)
    store_timestamp_at: int = field(repr=False)  # STORETIMESTAMP's position in each record


def prepare_batch(
    *,
    topic: str,
    queue_id: int,
    inner: Sequence[tuple[int, bytes, bytes]],
    sys_flag: int,
    born_timestamp: int,
    born_host: HostPort,
    store_host: HostPort,
    reconsume_times: int = 0,
    append_prop_crc: bool = True,
    max_message_size: int,
) -> EncodedBatch:
    """Validate a batch of (flag, body, properties) and pre-encode its records.

    HEAD behaviour (§3.7): each record's PROPERTIES is the inner message's own string; batch-level
    properties are not copied. Limits: topic <= 127 chars (so V1); at least one message; the batch
    as sent (22 + body + properties bytes per message, docs/remoting-protocol.md §6.3) <=
    `max_message_size`; each property string <= 32767 bytes with the CRC reservation; flags within
    i32. PREPARED_TRANSACTION_OFFSET is 0. With `append_prop_crc`, inner properties are normalised
    like a single message's (a pyrmq choice: Java copies them as is, which leaves the CRC property
    unparseable after a string lacking its final 0x02). Raises `MessageIllegalError`.
    """
    magic_code, topic_part = _encoded_topic(topic, True)
    if not inner:
        raise MessageIllegalError(f"topic {topic}: batch has no messages")
    sent_bytes = sum(BATCH_ENTRY_FIXED_BYTES + len(body) + len(props) for _, body, props in inner)
    if sent_bytes > max_message_size:
        raise MessageIllegalError(
            f"topic {topic}: batch body_size={sent_bytes} exceeds max_message_size="
            f"{max_message_size}"
        )
    layout = _layout_of(born_host, store_host)
    sys_flag = _layout_sys_flag(sys_flag, layout)
    header = _HEADERS[layout]
    fixed_size = header.size + len(topic_part) + 2
    try:
        mid = _MID.pack(sys_flag, born_timestamp) + born_host.packed
        post_prefix = store_host.packed + _I32.pack(reconsume_times) + _I64.pack(0)
    except struct.error as err:
        raise _int_range_error(
            f"topic {topic}",
            {
                "sys_flag": sys_flag,
                "born_timestamp": born_timestamp,
                "reconsume_times": reconsume_times,
            },
        ) from err
    crc_placeholder = _CRC_PROPERTY_PLACEHOLDER if append_prop_crc else b""
    parts: list[bytes] = []
    tags: list[int] = []
    bounds = [0]
    offset = 0
    for index, (flag, body, raw_properties) in enumerate(inner):
        properties, properties_length = _stored_properties(raw_properties, append_prop_crc)
        if properties_length > MAX_PROPERTIES_BYTES:
            raise _properties_too_long(
                f"topic {topic}: batch message {index}", properties_length, append_prop_crc
            )
        size = fixed_size + len(body) + properties_length
        try:
            head = _HEAD.pack(size, magic_code, _isal_crc32(body) & CRC32_MASK, queue_id, flag)
        except struct.error as err:
            raise _int_range_error(
                f"topic {topic}: batch message {index}",
                {"total_size": size, "queue_id": queue_id, "flag": flag},
            ) from err
        parts += (
            header.pack(head, 0, 0, mid, 0, post_prefix + _I32.pack(len(body))),
            body,
            topic_part,
            _I16.pack(properties_length),
            properties,
            crc_placeholder,
        )
        tags.append(_tags_code_of_properties(properties))
        offset += size
        bounds.append(offset)
    sizes = np.diff(np.array(bounds, dtype=np.int64)).astype(np.int32)
    tags_codes = np.array(tags, dtype=np.int64)
    sizes.flags.writeable = tags_codes.flags.writeable = False
    return EncodedBatch(
        topic=topic,
        queue_id=queue_id,
        count=len(inner),
        total_size=offset,
        sizes=sizes,
        tags_codes=tags_codes,
        sys_flag=sys_flag,
        append_prop_crc=append_prop_crc,
        bounds=tuple(bounds),
        template=b"".join(parts),
        store_timestamp_at=_STORE_TIMESTAMP_POS[layout],
    )


def prepare_batch_body(
    *,
    topic: str,
    queue_id: int,
    body: bytes,
    sys_flag: int,
    born_timestamp: int,
    born_host: HostPort,
    store_host: HostPort,
    reconsume_times: int = 0,
    append_prop_crc: bool = True,
    max_message_size: int,
) -> EncodedBatch:
    """`prepare_batch` of a SEND_BATCH_MESSAGE body as received: the same batch, the same
    refusals. The common body (well formed, properties stored as sent, ASCII tags) is encoded
    in C in one pass (`_native.encode_batch`); anything else goes through `decode_batch_body`
    and `prepare_batch`, which name what is wrong."""
    if _native is not None and len(body) <= max_message_size:
        magic_code, topic_part = _encoded_topic(topic, True)
        layout = _layout_of(born_host, store_host)
        stored_sys_flag = _layout_sys_flag(sys_flag, layout)
        try:  # QUEUEOFFSET .. PREPARED_TRANSACTION_OFFSET, as prepare_batch's header.pack
            middle = b"".join((
                bytes(16), _MID.pack(stored_sys_flag, born_timestamp), born_host.packed, bytes(8),
                store_host.packed, _I32.pack(reconsume_times), bytes(8),
            ))
        except struct.error:
            pass  # out-of-range field: prepare_batch names it
        else:
            encoded = _native.encode_batch(
                body, magic_code, queue_id, middle, topic_part, append_prop_crc)
            if encoded is not None:
                template, sizes, tags_codes, bounds = encoded
                return EncodedBatch(
                    topic=topic,
                    queue_id=queue_id,
                    count=len(bounds) - 1,
                    total_size=bounds[-1],
                    sizes=np.frombuffer(sizes, dtype=np.int32),
                    tags_codes=np.frombuffer(tags_codes, dtype=np.int64),
                    sys_flag=stored_sys_flag,
                    append_prop_crc=append_prop_crc,
                    bounds=bounds,
                    template=template,
                    store_timestamp_at=_STORE_TIMESTAMP_POS[layout],
                )
    return prepare_batch(
        topic=topic, queue_id=queue_id, inner=decode_batch_body(body), sys_flag=sys_flag,
        born_timestamp=born_timestamp, born_host=born_host, store_host=store_host,
        reconsume_times=reconsume_times, append_prop_crc=append_prop_crc,
        max_message_size=max_message_size,
    )


def write_batch(
    buf: WritableBuffer,
    pos: int,
    batch: EncodedBatch,
    *,
    first_queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
) -> int:
    """Write the batch's records back to back at `pos`; returns `batch.total_size`.

    Record i gets QUEUEOFFSET `first_queue_offset + i` and PHYSICALOFFSET `phy_offset +
    batch.bounds[i]` (`phy_offset` is the commitlog offset of `buf[pos]`). The caller has checked
    that the whole batch fits. Runs in C (`store/_native.c`) when built, else
    `write_batch_python`; tests hold the two to the same bytes.
    """
    if _native is None:
        return write_batch_python(
            buf, pos, batch, first_queue_offset=first_queue_offset, phy_offset=phy_offset,
            store_timestamp=store_timestamp,
        )
    return _native.write_batch(
        buf, pos, batch.template, batch.sizes, first_queue_offset, phy_offset, store_timestamp,
        batch.store_timestamp_at, batch.append_prop_crc,
    )


def write_batch_python(
    buf: WritableBuffer,
    pos: int,
    batch: EncodedBatch,
    *,
    first_queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
) -> int:
    """`write_batch` in Python: the reference for the C version, and its stand-in."""
    buf[pos : pos + batch.total_size] = batch.template
    view = memoryview(buf)
    queue_offset = first_queue_offset
    timestamp = _I64.pack(store_timestamp)
    at = batch.store_timestamp_at
    bounds = batch.bounds
    for index in range(batch.count):
        start = pos + bounds[index]
        end = pos + bounds[index + 1]
        _OFFSETS.pack_into(buf, start + 20, queue_offset, phy_offset + bounds[index])
        buf[start + at : start + at + 8] = timestamp
        if batch.append_prop_crc:
            crc = _isal_crc32(view[start : end - PROPERTY_CRC_RESERVED_BYTES]) & CRC32_MASK
            buf[end - 11 : end - 1] = (b"%010d" % crc)[::-1]  # _crc_digits, inlined
        queue_offset += 1
    return batch.total_size


# --------------------------------------------------------------------------------------------
# Checking records (recovery, and reads before serving)
# --------------------------------------------------------------------------------------------


class CheckStatus(enum.Enum):
    VALID = "VALID"
    BLANK = "BLANK"  # end of file: continue at the next file
    INVALID = "INVALID"  # end of the valid data (zeros, a torn write, damage)


class RecordCheck(NamedTuple):
    """`check_record`'s verdict, with the fields dispatch needs when VALID.

    `size`: the record's TOTALSIZE (VALID), the BLANK's TOTALSIZE (BLANK), 0 (INVALID).
    `reason`: for INVALID, the field and value that failed; empty otherwise.
    """

    status: CheckStatus
    size: int
    reason: str = ""
    topic: str = ""
    queue_id: int = 0
    queue_offset: int = 0
    store_timestamp: int = 0
    tags_code: int = 0
    sys_flag: int = 0
    phy_offset: int = 0


def _invalid(pos: int, reason: str) -> RecordCheck:
    return RecordCheck(CheckStatus.INVALID, 0, f"record at {pos}: {reason}")


def check_record(
    buf: Buffer,
    pos: int,
    *,
    limit: int,
    expected_phy_offset: int | None,
    check_body_crc: bool,
    verify_prop_crc: bool,
) -> RecordCheck:
    """Check the record at `buf[pos:limit]` (§3.8 and pyrmq's stricter rules), never raising for
    bad bytes.

    INVALID when: fewer than 8 bytes; an unknown magic; TOTALSIZE outside [the layout's minimum,
    `limit - pos`]; a negative length, or lengths that do not add up to TOTALSIZE; PHYSICALOFFSET
    != `expected_phy_offset` (when given); with `check_body_crc`, BODYCRC != crc32(body) (also
    for an empty body, whose CRC is 0); with `verify_prop_crc`, the last 20 bytes are not a
    `__CRC32#` property starting a segment whose digits are the CRC of bytes
    [0, TOTALSIZE - 20); a topic that is not UTF-8. Both CRCs are checked when both flags are on
    (Java lets the property CRC replace the body check). BLANK: `size` is its TOTALSIZE, which
    must be in [8, `limit - pos`]. VALID: `tags_code` is the hash of TAGS (0 if none).
    Raises ValueError only for a `pos` or `limit` outside the buffer.
    """
    view = buf if type(buf) is memoryview else memoryview(buf)
    if pos < 0 or limit > len(view):
        raise ValueError(f"pos={pos}, limit={limit} outside the buffer of {len(view)} bytes")
    left = limit - pos
    if left < 8:
        return _invalid(pos, f"{left} bytes left, TOTALSIZE and MAGICCODE need 8")
    total_size, magic_code = _SIZE_MAGIC.unpack_from(view, pos)
    if magic_code == MAGIC_CODE_V1:
        topic_length_struct = _I8
    elif magic_code == MAGIC_CODE_V2:
        topic_length_struct = _I16
    elif magic_code == BLANK_MAGIC_CODE:
        if not BLANK_RECORD_BYTES <= total_size <= left:
            return _invalid(pos, f"BLANK TOTALSIZE={total_size} outside [8, {left}]")
        return RecordCheck(CheckStatus.BLANK, total_size)
    elif magic_code == 0 and total_size == 0:
        return _invalid(pos, "zeros (TOTALSIZE=0, MAGICCODE=0): end of data")
    else:
        return _invalid(pos, f"MAGICCODE={magic_code & 0xFFFFFFFF:#010x} is not V1/V2/BLANK")
    if not _RECORD_BYTES_MIN[0] <= total_size <= left:
        return _invalid(pos, f"TOTALSIZE={total_size} outside [{_RECORD_BYTES_MIN[0]}, {left}]")
    # Read as IPv4/IPv4 (the common layout), again with the right layout if SYSFLAG disagrees.
    fields = _CHECK[0].unpack_from(view, pos)
    sys_flag = fields[7]
    layout = (sys_flag & _HOST_V6_FLAGS) >> 4
    fixed_bytes = _FIXED_BYTES[layout]
    topic_length_bytes = topic_length_struct.size
    if layout:
        if total_size < fixed_bytes + topic_length_bytes + 2:
            return _invalid(pos, f"TOTALSIZE={total_size} too small for SYSFLAG={sys_flag:#x}")
        fields = _CHECK[layout].unpack_from(view, pos)
    _, _, body_crc, queue_id, _, queue_offset, phy_offset, _, _, store_timestamp, body_length = (
        fields
    )
    end = pos + total_size
    body_pos = pos + fixed_bytes
    topic_pos = body_pos + body_length
    if body_length < 0 or topic_pos > end - topic_length_bytes - 2:
        return _invalid(pos, f"BODYLENGTH={body_length} does not fit TOTALSIZE={total_size}")
    (topic_length,) = topic_length_struct.unpack_from(view, topic_pos)
    topic_pos += topic_length_bytes
    topic_end = topic_pos + topic_length
    if topic_length < 0 or topic_end > end - 2:
        return _invalid(pos, f"TOPICLENGTH={topic_length} does not fit TOTALSIZE={total_size}")
    (properties_length,) = _I16.unpack_from(view, topic_end)
    if properties_length < 0 or topic_end + 2 + properties_length != end:
        return _invalid(
            pos,
            f"PROPERTIESLENGTH={properties_length}: lengths add up to "
            f"{topic_end + 2 + properties_length - pos}, TOTALSIZE={total_size} (half message)",
        )
    if expected_phy_offset is not None and phy_offset != expected_phy_offset:
        return _invalid(pos, f"PHYSICALOFFSET={phy_offset} != expected {expected_phy_offset}")
    if check_body_crc:
        crc = _isal_crc32(view[body_pos : topic_pos - topic_length_bytes]) & CRC32_MASK
        if crc != body_crc:
            return _invalid(pos, f"BODYCRC={body_crc:#010x} != crc32(body)={crc:#010x}")
    properties = view[topic_end + 2 : end].tobytes()
    if verify_prop_crc:
        crc_pos = end - PROPERTY_CRC_RESERVED_BYTES
        crc = _isal_crc32(view[pos:crc_pos]) & CRC32_MASK
        # _crc_digits inlined; the property must also start a segment, or Java would miss it.
        if properties[-PROPERTY_CRC_RESERVED_BYTES:] != b"%b%b\x02" % (
            _CRC_PROPERTY_KEY,
            (b"%010d" % crc)[::-1],
        ) or (
            properties_length > PROPERTY_CRC_RESERVED_BYTES
            and properties[-PROPERTY_CRC_RESERVED_BYTES - 1] != 2
        ):
            return _invalid(pos, _prop_crc_mismatch(properties, crc))
    try:
        topic = str(view[topic_pos:topic_end], "utf-8")
    except UnicodeDecodeError:
        return _invalid(pos, f"TOPIC of {topic_length} bytes is not UTF-8")
    return RecordCheck(
        CheckStatus.VALID,
        total_size,
        "",
        topic,
        queue_id,
        queue_offset,
        store_timestamp,
        _tags_code_of_properties(properties),
        sys_flag,
        phy_offset,
    )


def _prop_crc_mismatch(properties: bytes, crc: int) -> str:
    """Why a record's `__CRC32#` property does not verify (only on the error path)."""
    reserved = properties[-PROPERTY_CRC_RESERVED_BYTES:]
    if (
        len(reserved) < PROPERTY_CRC_RESERVED_BYTES
        or not reserved.startswith(_CRC_PROPERTY_KEY)
        or reserved[-1] != 2
        or (len(properties) > len(reserved) and properties[-len(reserved) - 1] != 2)
    ):
        return f"no __CRC32# property in the last 20 bytes of PROPERTIES: {reserved!r}"
    digits = reserved[len(_CRC_PROPERTY_KEY) : -1]
    return f"__CRC32# digits {digits.decode('ascii', 'replace')} != crc32(record)={crc}"
