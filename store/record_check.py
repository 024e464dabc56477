"""Checking a record in place (`CommitLog.checkMessageAndReturnSize`, docs/store-format.md §3.8):
what recovery and reads rely on.

Invariant: `check_record` never raises for bad bytes: damage is an INVALID result that names the
field and the value.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, NamedTuple

from isal.isal_zlib import crc32 as _isal_crc32

from store.message_crc import CRC32_MASK
from store.message_properties import (
    CRC_PROPERTY_KEY,
    PROPERTY_CRC_RESERVED_BYTES,
    tags_code_of_properties,
)
from store.message_sys_flag import HOST_V6_FLAGS
from store.record_layout import (
    BLANK_MAGIC_CODE,
    BLANK_RECORD_BYTES,
    CHECK_FIELDS,
    FIXED_BYTES,
    I8,
    I16,
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    RECORD_BYTES_MIN,
    SIZE_MAGIC,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer


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
    total_size, magic_code = SIZE_MAGIC.unpack_from(view, pos)
    if magic_code == MAGIC_CODE_V1:
        topic_length_struct = I8
    elif magic_code == MAGIC_CODE_V2:
        topic_length_struct = I16
    elif magic_code == BLANK_MAGIC_CODE:
        if not BLANK_RECORD_BYTES <= total_size <= left:
            return _invalid(pos, f"BLANK TOTALSIZE={total_size} outside [8, {left}]")
        return RecordCheck(CheckStatus.BLANK, total_size)
    elif magic_code == 0 and total_size == 0:
        return _invalid(pos, "zeros (TOTALSIZE=0, MAGICCODE=0): end of data")
    else:
        return _invalid(pos, f"MAGICCODE={magic_code & 0xFFFFFFFF:#010x} is not V1/V2/BLANK")
    if not RECORD_BYTES_MIN[0] <= total_size <= left:
        return _invalid(pos, f"TOTALSIZE={total_size} outside [{RECORD_BYTES_MIN[0]}, {left}]")
    # Read as IPv4/IPv4 (the common layout), again with the right layout if SYSFLAG disagrees.
    fields = CHECK_FIELDS[0].unpack_from(view, pos)
    sys_flag = fields[7]
    layout = (sys_flag & HOST_V6_FLAGS) >> 4
    fixed_bytes = FIXED_BYTES[layout]
    topic_length_bytes = topic_length_struct.size
    if layout:
        if total_size < fixed_bytes + topic_length_bytes + 2:
            return _invalid(pos, f"TOTALSIZE={total_size} too small for SYSFLAG={sys_flag:#x}")
        fields = CHECK_FIELDS[layout].unpack_from(view, pos)
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
    (properties_length,) = I16.unpack_from(view, topic_end)
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
        # crc_digits inlined; the property must also start a segment, or Java would miss it.
        if properties[-PROPERTY_CRC_RESERVED_BYTES:] != b"%b%b\x02" % (
            CRC_PROPERTY_KEY,
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
        tags_code_of_properties(properties),
        sys_flag,
        phy_offset,
    )


def _prop_crc_mismatch(properties: bytes, crc: int) -> str:
    """Why a record's `__CRC32#` property does not verify (only on the error path)."""
    reserved = properties[-PROPERTY_CRC_RESERVED_BYTES:]
    if (
        len(reserved) < PROPERTY_CRC_RESERVED_BYTES
        or not reserved.startswith(CRC_PROPERTY_KEY)
        or reserved[-1] != 2
        or (len(properties) > len(reserved) and properties[-len(reserved) - 1] != 2)
    ):
        return f"no __CRC32# property in the last 20 bytes of PROPERTIES: {reserved!r}"
    digits = reserved[len(CRC_PROPERTY_KEY) : -1]
    return f"__CRC32# digits {digits.decode('ascii', 'replace')} != crc32(record)={crc}"
