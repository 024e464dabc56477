"""Batches (`MessageExtBatch`, docs/store-format.md §3.7): the SEND_BATCH_MESSAGE body as sent
(docs/remoting-protocol.md §6.3), and its pre-encoding into one record per inner message.

`prepare_batch` (or `prepare_batch_body`, straight from the request body) validates and
pre-encodes before the append lock, `write_batch` fills in each record's offsets, the store
timestamp and the record CRCs inside it. Where `store._native` is built these loops run in C;
the Python here is their reference, held to the same bytes as `encode_record` of each record.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import construct as cs
import numpy as np
import numpy.typing as npt
from isal.isal_zlib import crc32 as _isal_crc32

from store.errors import MessageIllegalError
from store.host_port import HostPort
from store.message_crc import CRC32_MASK
from store.message_encoder import (
    encoded_topic,
    int_range_error,
    properties_too_long,
    stored_properties,
)
from store.message_properties import (
    CRC_PROPERTY_PLACEHOLDER,
    MAX_PROPERTIES_BYTES,
    PROPERTY_CRC_RESERVED_BYTES,
    tags_code_of_properties,
)
from store.native import native as _native
from store.record_layout import (
    I16,
    I32,
    I64,
    RECORD_HEAD,
    RECORD_HEADERS,
    RECORD_MID,
    RECORD_OFFSETS,
    STORE_TIMESTAMP_POS,
    WritableBuffer,
    layout_of,
    layout_sys_flag,
)

if TYPE_CHECKING:
    pass


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
        (properties_length,) = I16.unpack_from(body, properties_pos - 2)
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
    magic_code, topic_part = encoded_topic(topic, True)
    if not inner:
        raise MessageIllegalError(f"topic {topic}: batch has no messages")
    sent_bytes = sum(BATCH_ENTRY_FIXED_BYTES + len(body) + len(props) for _, body, props in inner)
    if sent_bytes > max_message_size:
        raise MessageIllegalError(
            f"topic {topic}: batch body_size={sent_bytes} exceeds max_message_size="
            f"{max_message_size}"
        )
    layout = layout_of(born_host, store_host)
    sys_flag = layout_sys_flag(sys_flag, layout)
    header = RECORD_HEADERS[layout]
    fixed_size = header.size + len(topic_part) + 2
    try:
        mid = RECORD_MID.pack(sys_flag, born_timestamp) + born_host.packed
        post_prefix = store_host.packed + I32.pack(reconsume_times) + I64.pack(0)
    except struct.error as err:
        raise int_range_error(
            f"topic {topic}",
            {
                "sys_flag": sys_flag,
                "born_timestamp": born_timestamp,
                "reconsume_times": reconsume_times,
            },
        ) from err
    crc_placeholder = CRC_PROPERTY_PLACEHOLDER if append_prop_crc else b""
    parts: list[bytes] = []
    tags: list[int] = []
    bounds = [0]
    offset = 0
    for index, (flag, body, raw_properties) in enumerate(inner):
        properties, properties_length = stored_properties(raw_properties, append_prop_crc)
        if properties_length > MAX_PROPERTIES_BYTES:
            raise properties_too_long(
                f"topic {topic}: batch message {index}", properties_length, append_prop_crc
            )
        size = fixed_size + len(body) + properties_length
        try:
            head = RECORD_HEAD.pack(
                size, magic_code, _isal_crc32(body) & CRC32_MASK, queue_id, flag
            )
        except struct.error as err:
            raise int_range_error(
                f"topic {topic}: batch message {index}",
                {"total_size": size, "queue_id": queue_id, "flag": flag},
            ) from err
        parts += (
            header.pack(head, 0, 0, mid, 0, post_prefix + I32.pack(len(body))),
            body,
            topic_part,
            I16.pack(properties_length),
            properties,
            crc_placeholder,
        )
        tags.append(tags_code_of_properties(properties))
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
        store_timestamp_at=STORE_TIMESTAMP_POS[layout],
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
        magic_code, topic_part = encoded_topic(topic, True)
        layout = layout_of(born_host, store_host)
        stored_sys_flag = layout_sys_flag(sys_flag, layout)
        try:  # QUEUEOFFSET .. PREPARED_TRANSACTION_OFFSET, as prepare_batch's header.pack
            middle = b"".join((
                bytes(16), RECORD_MID.pack(stored_sys_flag, born_timestamp), born_host.packed,
                bytes(8), store_host.packed, I32.pack(reconsume_times), bytes(8),
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
                    store_timestamp_at=STORE_TIMESTAMP_POS[layout],
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
    timestamp = I64.pack(store_timestamp)
    at = batch.store_timestamp_at
    bounds = batch.bounds
    for index in range(batch.count):
        start = pos + bounds[index]
        end = pos + bounds[index + 1]
        RECORD_OFFSETS.pack_into(buf, start + 20, queue_offset, phy_offset + bounds[index])
        buf[start + at : start + at + 8] = timestamp
        if batch.append_prop_crc:
            crc = _isal_crc32(view[start : end - PROPERTY_CRC_RESERVED_BYTES]) & CRC32_MASK
            buf[end - 11 : end - 1] = (b"%010d" % crc)[::-1]  # crc_digits, inlined
        queue_offset += 1
    return batch.total_size
