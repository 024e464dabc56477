"""Recovery decisions over commitlog bytes: where to start scanning and where valid data ends.

Pure: functions take buffers and numbers and return results; the store opens the files,
dispatches what the scan reports, and truncates (store-format.md §9).

Rules (pyrmq is stricter than RocketMQ's defaults, reliability.md M13):
- A record is valid only if its magic, every length, its PHYSICALOFFSET field (= its position),
  its body CRC and, when required, its whole-record `__CRC32#` CRC all check.
- The scan of a file stops at the first invalid record; the log ends there, even if valid-looking
  records follow (they may be stale bytes from before a truncation).
- A BLANK record ends a file's data; the scan continues at the next file.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from store.message_format import CheckStatus, RecordCheck, check_record

if TYPE_CHECKING:
    from typing_extensions import Buffer


class ScanStop(enum.Enum):
    BLANK = "blank"  # the file's data ended with a BLANK record: go on with the next file
    FILE_END = "file_end"  # records reached the file's last byte exactly
    INVALID = "invalid"  # the log's valid data ends here


@dataclass(frozen=True, slots=True)
class FileScan:
    """Where a scan of one file stopped: `end_pos` is just after the last valid record."""

    end_pos: int
    stop: ScanStop
    reason: str | None
    records: int


def scan_file(
    buf: Buffer,
    *,
    file_from_offset: int,
    file_size: int,
    start_pos: int = 0,
    check_body_crc: bool,
    verify_prop_crc: bool,
    on_record: Callable[[RecordCheck], None] | None = None,
) -> FileScan:
    """Walk records from `start_pos` until a BLANK, the file end or the first invalid record.

    `on_record` is called for each valid record in order (the store dispatches from it).
    """
    pos = start_pos
    count = 0
    while pos < file_size:
        check = check_record(
            buf, pos, limit=file_size, expected_phy_offset=file_from_offset + pos,
            check_body_crc=check_body_crc, verify_prop_crc=verify_prop_crc,
        )
        if check.status is CheckStatus.VALID:
            if on_record is not None:
                on_record(check)
            pos += check.size
            count += 1
        elif check.status is CheckStatus.BLANK:
            if check.size != file_size - pos:
                return FileScan(pos, ScanStop.INVALID,
                                f"BLANK record at {pos} declares {check.size} bytes, "
                                f"{file_size - pos} remain", count)
            return FileScan(pos, ScanStop.BLANK, None, count)
        else:
            return FileScan(pos, ScanStop.INVALID, check.reason, count)
    return FileScan(pos, ScanStop.FILE_END, None, count)


@dataclass(frozen=True, slots=True)
class FirstRecord:
    """What recovery needs to know of a file's first record to pick the start file."""

    valid: bool
    phy_offset: int
    store_timestamp: int


def first_record(
    buf: Buffer, *, file_from_offset: int, file_size: int, check_body_crc: bool,
    verify_prop_crc: bool,
) -> FirstRecord:
    check = check_record(
        buf, 0, limit=file_size, expected_phy_offset=file_from_offset,
        check_body_crc=check_body_crc, verify_prop_crc=verify_prop_crc,
    )
    if check.status is not CheckStatus.VALID:
        return FirstRecord(False, file_from_offset, 0)
    return FirstRecord(True, check.phy_offset, check.store_timestamp)


def start_file_normal(firsts: Sequence[FirstRecord], *, dispatch_from_phy_offset: int) -> int:
    """Index of the file a normal recovery scans from (§9.2 step 2, HEAD rule): the last file
    after the first whose first record is valid, stamped, and already dispatched."""
    for index in range(len(firsts) - 1, 0, -1):
        first = firsts[index]
        if (first.valid and first.store_timestamp != 0
                and first.phy_offset <= dispatch_from_phy_offset):
            return index
    return 0


def start_file_abnormal(firsts: Sequence[FirstRecord], *, min_timestamp: int) -> int:
    """Index of the file an abnormal recovery scans from (§9.3 step 2): the last file whose
    first record is valid and stored no later than the checkpoint's min timestamp."""
    for index in range(len(firsts) - 1, -1, -1):
        first = firsts[index]
        if first.valid and first.store_timestamp != 0 and first.store_timestamp <= min_timestamp:
            return index
    return 0


def clamp_confirm_offset(
    confirm_offset: int, *, min_phy_offset: int, bound: int
) -> int:
    """Controller-mode confirmOffset after recovery (§9.2 step 5, §9.3 step 5)."""
    if confirm_offset < min_phy_offset:
        return min_phy_offset
    return min(confirm_offset, bound)
