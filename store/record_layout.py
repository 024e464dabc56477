"""The commitlog record's byte layout (docs/store-format.md §3.1): magic codes, the field
diagram and its construct spec, the fixed part of each host layout, and the decoded record.

One stored message is one record; a SEND_BATCH_MESSAGE stores one record per inner message
(§3.7). The codecs build on this module: `store.message_decoder` (cold path, and the oracle),
`store.message_encoder` (hot path, one message), `store.message_batch` (batches) and
`store.record_check` (recovery and reads).

Invariants:
- TOTALSIZE = 74 + born host (8 or 20) + store host (8 or 20) + body + topic-length width (1 for
  V1, 2 for V2) + topic + properties, all in bytes (§3.1).
- SYSFLAG's two V6 bits always describe the two hosts actually written (§3.2).
- With the property CRC (§3.4), the last 20 bytes of a record are `__CRC32#` 0x01, ten ASCII
  digits (least significant first), 0x02; the digits are crc32 & 0x7FFFFFFF of the record's bytes
  [0, TOTALSIZE - 20), so together with BODYCRC every byte of the record is covered by a CRC.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias

import construct as cs

from store.host_port import HostPort
from store.message_properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    parse_properties,
)
from store.message_sys_flag import HOST_V6_FLAGS, SysFlag

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

# TopicValidator: 127 chars, except %RETRY% topics (POP retry topics are longer) up to 255.
TOPIC_CHARS_MAX: Final = 127
RETRY_TOPIC_CHARS_MAX: Final = 255
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
# A V1 topic length is a signed i8.
V1_TOPIC_BYTES_MAX: Final = 127

BLANK_RECORD_BYTES: Final = 8  # TOTALSIZE + MAGICCODE; the rest of the file is not written

I8: Final = struct.Struct(">b")
I16: Final = struct.Struct(">h")
I32: Final = struct.Struct(">i")
# TOTALSIZE, every record's first field: the one way to find a record's end from its start.
TOTAL_SIZE: Final = I32
I64: Final = struct.Struct(">q")


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


def born_host_bytes(layout: int) -> int:
    return _HOST_BYTES[layout & 1]


def store_host_bytes(layout: int) -> int:
    return _HOST_BYTES[layout >> 1]


# Fixed part: everything up to and including BODYLENGTH (88 bytes for v4/v4, 112 for v6/v6).
FIXED_BYTES: Final = tuple(72 + born_host_bytes(x) + store_host_bytes(x) for x in _LAYOUTS)
assert FIXED_BYTES == (88, 100, 100, 112)
# The smallest record of each layout (V1, empty body, topic and properties): 74 + hosts + 1.
RECORD_BYTES_MIN: Final = tuple(f + 1 + 2 for f in FIXED_BYTES)
assert RECORD_BYTES_MIN[0] == 91
STORE_TIMESTAMP_POS: Final = tuple(48 + born_host_bytes(x) for x in _LAYOUTS)

# Hot-path header: precomputed pieces around the three fields known only inside the lock.
#   head (TOTALSIZE..FLAG) | QUEUEOFFSET PHYSICALOFFSET | mid (SYSFLAG..BORNHOST) |
#   STORETIMESTAMP | post (STOREHOST..BODYLENGTH)
RECORD_HEAD: Final = struct.Struct(">iiiii")
RECORD_MID: Final = struct.Struct(">iq")
RECORD_POST: Final = struct.Struct(">iqi")
RECORD_HEADERS: Final = tuple(
    struct.Struct(f">20sqq{12 + born_host_bytes(x)}sq{16 + store_host_bytes(x)}s") for x in _LAYOUTS
)
assert tuple(h.size for h in RECORD_HEADERS) == FIXED_BYTES
# Filled in at append: QUEUEOFFSET and PHYSICALOFFSET at record offset 20, and STORETIMESTAMP
# at STORE_TIMESTAMP_POS[layout].
RECORD_OFFSETS: Final = struct.Struct(">qq")

# Cold-path codec of the fixed part, and the subset check_record reads (hosts skipped).
FIXED_FIELDS: Final = tuple(
    struct.Struct(f">iiiiiqqiq{born_host_bytes(x) - 4}siq{store_host_bytes(x) - 4}siiqi")
    for x in _LAYOUTS
)
CHECK_FIELDS: Final = tuple(
    struct.Struct(f">iiiiiqqiq{born_host_bytes(x)}xq{store_host_bytes(x)}x12xi") for x in _LAYOUTS
)
assert tuple(s.size for s in FIXED_FIELDS) == tuple(s.size for s in CHECK_FIELDS) == FIXED_BYTES
SIZE_MAGIC: Final = struct.Struct(">ii")


def layout_of(born_host: HostPort, store_host: HostPort) -> int:
    return (len(born_host.ip) == 16) | (len(store_host.ip) == 16) << 1


def layout_sys_flag(sys_flag: int, layout: int) -> int:
    """A client's SYSFLAG with the V6 bits replaced by the real hosts' (§3.2)."""
    return (sys_flag & ~HOST_V6_FLAGS) | (layout << 4)


def topic_length_size(magic_code: int) -> int:
    return 2 if magic_code == MAGIC_CODE_V2 else 1


def topic_magic_code(topic: str, topic_raw: bytes) -> int:
    # Java switches to V2 on the char count (autoMessageVersionOnTopicLen); a topic of <= 127
    # chars but > 127 UTF-8 bytes (never a legal topic) would overflow Java's i8, so it is V2 too.
    if len(topic) > TOPIC_CHARS_MAX or len(topic_raw) > V1_TOPIC_BYTES_MAX:
        return MAGIC_CODE_V2
    return MAGIC_CODE_V1


def record_size(
    *, sys_flag: int, magic_code: int, body_bytes: int, topic_bytes: int, properties_bytes: int
) -> int:
    """`calMsgLength` (§3.1): TOTALSIZE of a record with these lengths (properties incl. CRC)."""
    layout = (sys_flag & HOST_V6_FLAGS) >> 4
    return (
        FIXED_BYTES[layout]
        + body_bytes
        + topic_length_size(magic_code)
        + topic_bytes
        + 2
        + properties_bytes
    )


def read_store_timestamp(buf: Buffer, pos: int) -> int:
    """STORETIMESTAMP of the record at `pos` (at 56, or 68 after an IPv6 BORNHOST).

    For a record already checked; raises struct.error if the buffer ends first.
    """
    (sys_flag,) = I32.unpack_from(buf, pos + 36)
    (store_timestamp,) = I64.unpack_from(
        buf, pos + STORE_TIMESTAMP_POS[(sys_flag & HOST_V6_FLAGS) >> 4]
    )
    return int(store_timestamp)


def write_blank(buf: WritableBuffer, pos: int, size: int) -> None:
    """Write the 8-byte BLANK record (§3.6) claiming the `size` bytes to the end of the file."""
    if size < BLANK_RECORD_BYTES:
        raise ValueError(f"BLANK size={size} is below {BLANK_RECORD_BYTES}")
    SIZE_MAGIC.pack_into(buf, pos, size, BLANK_MAGIC_CODE)
