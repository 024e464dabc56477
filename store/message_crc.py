"""The record's CRC-32 (`UtilAll.crc32`, docs/store-format.md §3.5): BODYCRC, and the ten digits
of the `__CRC32#` property (§3.4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from isal.isal_zlib import crc32 as _isal_crc32

if TYPE_CHECKING:
    from typing_extensions import Buffer


CRC32_MASK: Final = 0x7FFFFFFF


def crc32(data: Buffer) -> int:
    """`UtilAll.crc32`: standard CRC-32 (zlib's) with the sign bit cleared (§3.5); empty -> 0."""
    return int(_isal_crc32(data)) & CRC32_MASK


def crc_digits(crc: int) -> bytes:
    """The 10 ASCII digits of a record CRC, least significant first, '0'-padded (§3.4)."""
    return (b"%010d" % crc)[::-1]
