"""SYSFLAG, the record's flag word (`MessageSysFlag`, docs/store-format.md §3.2).

Invariant: in a stored record the two V6 bits describe the hosts actually written; the codecs
take them from the hosts, never from the client.
"""

from __future__ import annotations

import enum
from typing import Final


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
HOST_V6_FLAGS: Final = 0x30  # BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
