"""The cold-path record codec (`MessageDecoder`): `make_record`, `encode_record`, `decode_record`.

For tests, tools and the odd lookup; together with `RECORD_SPEC` it is the reference the hot path
(`store.message_encoder`, `store.message_batch`, and the C in `store/_native.c`) is held to.

Invariant: `encode_record(make_record(...))` equals `RECORD_SPEC.build(...)` of the same fields,
and `decode_record` inverts `encode_record` (tested for every generated message).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from store.errors import RecordCorruptError
from store.host_port import HostPort
from store.message_crc import crc32, crc_digits
from store.message_properties import (
    CRC_PROPERTY_KEY,
    CRC_PROPERTY_PLACEHOLDER,
    MAX_PROPERTIES_BYTES,
    PROPERTY_CRC_RESERVED_BYTES,
)
from store.message_sys_flag import HOST_V6_FLAGS
from store.record_layout import (
    FIXED_BYTES,
    FIXED_FIELDS,
    I8,
    I16,
    I32,
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    RECORD_BYTES_MIN,
    SIZE_MAGIC,
    V1_TOPIC_BYTES_MAX,
    MessageRecord,
    born_host_bytes,
    layout_of,
    layout_sys_flag,
    record_size,
    store_host_bytes,
    topic_length_size,
    topic_magic_code,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer


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
        magic_code = topic_magic_code(topic, topic_raw)
    layout = layout_of(born_host, store_host)
    sys_flag = layout_sys_flag(sys_flag, layout)
    stored_properties = properties + (CRC_PROPERTY_PLACEHOLDER if append_prop_crc else b"")
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
        record, properties=properties + CRC_PROPERTY_KEY + crc_digits(crc) + b"\x02"
    )


def encode_record(rec: MessageRecord) -> bytes:
    """The record's bytes, every field exactly as given (TOTALSIZE and BODYCRC are not recomputed).

    Raises ValueError when the fields cannot be laid out: a host whose width disagrees with its
    SYSFLAG bit, an unknown magic code, a topic or property string too long for its length field.
    """
    layout = (rec.sys_flag & HOST_V6_FLAGS) >> 4
    if len(rec.born_host.packed) != born_host_bytes(layout):
        raise ValueError(f"BORNHOST {rec.born_host} disagrees with SYSFLAG={rec.sys_flag:#x}")
    if len(rec.store_host.packed) != store_host_bytes(layout):
        raise ValueError(f"STOREHOST {rec.store_host} disagrees with SYSFLAG={rec.sys_flag:#x}")
    topic_raw = rec.topic.encode()
    if rec.magic_code == MAGIC_CODE_V1:
        if len(topic_raw) > V1_TOPIC_BYTES_MAX:
            raise ValueError(f"V1 topic of {len(topic_raw)} bytes exceeds {V1_TOPIC_BYTES_MAX}")
        topic_length = I8.pack(len(topic_raw))
    elif rec.magic_code == MAGIC_CODE_V2:
        topic_length = I16.pack(len(topic_raw))
    else:
        raise ValueError(f"MAGICCODE={rec.magic_code & 0xFFFFFFFF:#010x} is not V1 or V2")
    if len(rec.properties) > MAX_PROPERTIES_BYTES:
        raise ValueError(f"{len(rec.properties)} property bytes exceed {MAX_PROPERTIES_BYTES}")
    fixed = FIXED_FIELDS[layout].pack(
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
            I16.pack(len(rec.properties)),
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
    total_size, magic_code = SIZE_MAGIC.unpack_from(view, pos)
    if magic_code not in (MAGIC_CODE_V1, MAGIC_CODE_V2):
        raise _corrupt(pos, f"MAGICCODE={magic_code & 0xFFFFFFFF:#010x} is not V1 or V2")
    # SYSFLAG decides the layout; read it only once the smallest record is known to fit.
    if not RECORD_BYTES_MIN[0] <= total_size <= left:
        raise _corrupt(
            pos, f"TOTALSIZE={total_size} outside [{RECORD_BYTES_MIN[0]}, {left}] (bytes left)"
        )
    (sys_flag,) = I32.unpack_from(view, pos + 36)
    layout = (sys_flag & HOST_V6_FLAGS) >> 4
    topic_length_bytes = topic_length_size(magic_code)
    fixed_bytes = FIXED_BYTES[layout]
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
    ) = FIXED_FIELDS[layout].unpack_from(view, pos)
    end = pos + total_size
    body_pos = pos + fixed_bytes
    if not 0 <= body_length <= end - body_pos - topic_length_bytes - 2:
        raise _corrupt(pos, f"BODYLENGTH={body_length} does not fit TOTALSIZE={total_size}")
    topic_pos = body_pos + body_length
    length_struct = I16 if topic_length_bytes == 2 else I8
    (topic_length,) = length_struct.unpack_from(view, topic_pos)
    topic_pos += topic_length_bytes
    if not 0 <= topic_length <= end - topic_pos - 2:
        raise _corrupt(pos, f"TOPICLENGTH={topic_length} does not fit TOTALSIZE={total_size}")
    topic_end = topic_pos + topic_length
    (properties_length,) = I16.unpack_from(view, topic_end)
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
