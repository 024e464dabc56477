"""The hot-path encoding of one message (`MessageExtEncoder`): `prepare_message` validates and
pre-encodes before the append lock, `write_record` fills in the offsets, store timestamp and
record CRC inside it.

Where `store._native` is built, both run in C for the common message; `prepare_message_python`
and `write_record_python` are their references. Invariants: `prepare_message` returns what
`prepare_message_python` returns, and `write_record` writes exactly the bytes of
`encode_record(make_record(...))` for the same message (tested for every generated message).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, NamedTuple

from isal.isal_zlib import crc32 as _isal_crc32

from store.errors import MessageIllegalError
from store.host_port import HostPort
from store.message_crc import CRC32_MASK
from store.message_properties import (
    CRC_PROPERTY_KEY,
    CRC_PROPERTY_PLACEHOLDER,
    MAX_PROPERTIES_BYTES,
    PROPERTY_CRC_RESERVED_BYTES,
    normalize_properties,
    tags_code_of_properties,
)
from store.message_sys_flag import HOST_V6_FLAGS
from store.native import native as _native
from store.record_layout import (
    I8,
    I16,
    I64,
    MAGIC_CODE_V2,
    RECORD_HEAD,
    RECORD_HEADERS,
    RECORD_MID,
    RECORD_OFFSETS,
    RECORD_POST,
    RETRY_GROUP_TOPIC_PREFIX,
    RETRY_TOPIC_CHARS_MAX,
    STORE_TIMESTAMP_POS,
    TOPIC_CHARS_MAX,
    WritableBuffer,
    topic_magic_code,
)

if TYPE_CHECKING:
    pass


@functools.lru_cache(maxsize=1024)
def encoded_topic(topic: str, batch: bool, /) -> tuple[int, bytes]:
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
    magic_code = topic_magic_code(topic, topic_raw)
    length_struct = I16 if magic_code == MAGIC_CODE_V2 else I8
    return magic_code, length_struct.pack(len(topic_raw)) + topic_raw


def stored_properties(raw: bytes, append_prop_crc: bool, /) -> tuple[bytes, int]:
    """(PROPERTIES as stored without the CRC reservation, PROPERTIESLENGTH with it)."""
    if not append_prop_crc:
        return raw, len(raw)
    # (rfind: `in` is twice as slow on short bytes.)
    if raw.rfind(CRC_PROPERTY_KEY) >= 0 or (raw and raw[-1] != 2):
        raw = normalize_properties(raw)
    return raw, len(raw) + PROPERTY_CRC_RESERVED_BYTES


def properties_too_long(what: str, length: int, append_prop_crc: bool) -> MessageIllegalError:
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


def int_range_error(what: str, values: Mapping[str, int]) -> MessageIllegalError:
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
    The common message is encoded in C in one call (`store/_native.c`); tests hold it to
    `prepare_message_python`'s result.
    """
    magic_code, topic_part = encoded_topic(topic, False)
    if _native is not None and len(body) <= max_message_size:
        # layout_of and layout_sys_flag, inlined.
        layout = (len(born_host.ip) == 16) | (len(store_host.ip) == 16) << 1
        stored_sys_flag = (sys_flag & ~HOST_V6_FLAGS) | (layout << 4)
        encoded = _native.encode_message(
            body, properties, topic_part, magic_code, queue_id, flag, stored_sys_flag,
            born_timestamp, born_host.packed, store_host.packed, reconsume_times,
            prepared_transaction_offset, append_prop_crc,
        )
        if encoded is not None:
            template, tags_code = encoded
            return EncodedMessage(
                topic, queue_id, stored_sys_flag, tags_code, len(template), body, properties,
                append_prop_crc, template, STORE_TIMESTAMP_POS[layout],
            )
    return prepare_message_python(
        topic=topic, queue_id=queue_id, flag=flag, body=body, properties=properties,
        sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host,
        store_host=store_host, reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
        append_prop_crc=append_prop_crc, max_message_size=max_message_size,
    )


def prepare_message_python(
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
    """`prepare_message` in Python: the reference for the C version (`_native.encode_message`),
    and the path for whatever C leaves to it (properties to normalise, a field out of its width,
    a non-ASCII TAGS value, no extension built)."""
    magic_code, topic_part = encoded_topic(topic, False)
    body_length = len(body)
    if body_length > max_message_size:
        raise MessageIllegalError(
            f"topic {topic}: body_size={body_length} exceeds max_message_size={max_message_size}"
        )
    properties, properties_length = stored_properties(properties, append_prop_crc)
    if properties_length > MAX_PROPERTIES_BYTES:
        raise properties_too_long(f"topic {topic}", properties_length, append_prop_crc)
    # layout_of and layout_sys_flag, inlined.
    layout = (len(born_host.ip) == 16) | (len(store_host.ip) == 16) << 1
    sys_flag = (sys_flag & ~HOST_V6_FLAGS) | (layout << 4)
    header = RECORD_HEADERS[layout]
    total_size = header.size + body_length + len(topic_part) + 2 + properties_length
    try:
        head = RECORD_HEAD.pack(
            total_size, magic_code, _isal_crc32(body) & CRC32_MASK, queue_id, flag
        )
        mid = RECORD_MID.pack(sys_flag, born_timestamp) + born_host.packed
        post = store_host.packed + RECORD_POST.pack(
            reconsume_times, prepared_transaction_offset, body_length
        )
    except struct.error as err:
        raise int_range_error(
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
            I16.pack(properties_length),
            properties,
            CRC_PROPERTY_PLACEHOLDER if append_prop_crc else b"",
        )
    )
    return EncodedMessage(
        topic,
        queue_id,
        sys_flag,
        tags_code_of_properties(properties),
        total_size,
        body,
        properties,
        append_prop_crc,
        template,
        STORE_TIMESTAMP_POS[layout],
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
    RECORD_OFFSETS.pack_into(buf, pos + 20, queue_offset, phy_offset)
    I64.pack_into(buf, pos + msg.store_timestamp_at, store_timestamp)
    if msg.append_prop_crc:
        crc = _isal_crc32(memoryview(buf)[pos : end - PROPERTY_CRC_RESERVED_BYTES]) & CRC32_MASK
        buf[end - 11 : end - 1] = (b"%010d" % crc)[::-1]  # crc_digits, inlined
    return msg.total_size
