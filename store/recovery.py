"""Recovery decisions over commitlog bytes: where to start scanning and where valid data ends.

Pure: functions take buffers and numbers and return results; the store opens the files,
dispatches what the scan reports, and truncates (docs/store-format.md §9).

Rules (pyrmq is stricter than RocketMQ's defaults, docs/reliability.md M13):
- A record is valid only if its magic, every length, its PHYSICALOFFSET field (= its position),
  its body CRC and, when required, its whole-record `__CRC32#` CRC all check.
- The scan of a file stops at the first invalid record; the log ends there, even if valid-looking
  records follow (they may be stale bytes from before a truncation).
- A BLANK record ends a file's data; the scan continues at the next file.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
from isal import isal_zlib

from store.message_crc import CRC32_MASK
from store.message_properties import PROPERTY_CRC_NAME, java_string_hash
from store.native import native as _native
from store.record_check import CheckStatus, RecordCheck, check_record
from store.record_layout import MAGIC_CODE_V1, MAGIC_CODE_V2

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
    return _last_file(
        firsts, lambda first: first.phy_offset <= dispatch_from_phy_offset, lowest=1
    )


def start_file_abnormal(
    firsts: Sequence[FirstRecord], *, min_timestamp: int, logics_physical_offset: int = 0
) -> int:
    """Index of the file an abnormal recovery scans from (§9.3 step 2), the earlier of two rules:
    5.3.3's, the last file whose first record is valid and stored no later than the
    checkpoint's min timestamp; and, when the checkpoint's logicsPhysicalOffset is known (> 0),
    5.5.0's, the last file whose first record is valid, stamped and starts at or before it
    (without 5.5.0's 10-file look-back cap: starting earlier only costs time)."""
    by_timestamp = _last_file(
        firsts, lambda first: first.store_timestamp <= min_timestamp, lowest=0
    )
    if logics_physical_offset <= 0:
        return by_timestamp
    by_offset = _last_file(
        firsts, lambda first: first.phy_offset <= logics_physical_offset, lowest=0
    )
    return min(by_timestamp, by_offset)


def _last_file(
    firsts: Sequence[FirstRecord], accept: Callable[[FirstRecord], bool], *, lowest: int
) -> int:
    """The last index >= lowest whose first record is valid, stamped and accepted, else 0."""
    for index in range(len(firsts) - 1, lowest - 1, -1):
        first = firsts[index]
        if first.valid and first.store_timestamp != 0 and accept(first):
            return index
    return 0


def clamp_confirm_offset(
    confirm_offset: int, *, min_phy_offset: int, bound: int
) -> int:
    """Controller-mode confirmOffset after recovery (§9.2 step 5, §9.3 step 5)."""
    if confirm_offset < min_phy_offset:
        return min_phy_offset
    return min(confirm_offset, bound)


# ------------------------------------------------------------------------------------------
# Fast scan: the same answer as `scan_file`, with the per-record work vectorized.
# ------------------------------------------------------------------------------------------

_SIZE_MAGIC: Final = struct.Struct(">ii")
# The common layout (IPv4 born and store hosts, V1 magic): fixed fields end at BODY (88).
_V4_FIXED_BYTES: Final = 88
_V4_RECORD_BYTES_MIN: Final = _V4_FIXED_BYTES + 1 + 2
_CRC_KEY: Final = np.frombuffer(PROPERTY_CRC_NAME.encode() + b"\x01", dtype=np.uint8)
_DIGIT_WEIGHTS: Final = 10 ** np.arange(10, dtype=np.int64)
_OFFSETS_8: Final = np.arange(8, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class FastFileScan:
    """`scan` as `scan_file` returns it, plus the valid records' positions and sizes."""

    scan: FileScan
    positions: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]


def _gather_be(u8: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64],
               width: int) -> npt.NDArray[np.int64]:
    """Big-endian signed integers of `width` bytes at each offset."""
    rows = u8[offsets[:, None] + _OFFSETS_8[:width]]
    values: npt.NDArray[np.int64] = rows.view(f">i{width}").reshape(-1).astype(np.int64)
    return values


@dataclass(frozen=True, slots=True, eq=False)
class RecordBatch:
    """Dispatch fields of verified common-layout records, as arrays in log order; each entry
    equals what `check_record` reports for that record. `topic_index` indexes `topics`."""

    topics: tuple[str, ...]
    topic_index: npt.NDArray[np.int64]
    queue_id: npt.NDArray[np.int64]
    queue_offset: npt.NDArray[np.int64]
    phy_offset: npt.NDArray[np.int64]
    size: npt.NDArray[np.int64]
    sys_flag: npt.NDArray[np.int64]
    store_timestamp: npt.NDArray[np.int64]
    tags_code: npt.NDArray[np.int64]


_TAGS_KEY: Final = b"TAGS\x01"
# `store._native.tags_codes`' mark of a value with a non-ASCII byte (Java hashes are int32).
_TAGS_NOT_ASCII: Final = -(1 << 62)
_PEEL_TOPICS_MAX: Final = 16


def _tags_value(buf: Any, start: int, end: int) -> bytes | None:  # noqa: ANN401 - mmap/bytes
    """`message_properties`' TAGS lookup on buf[start:end] in place: a match counts only at a
    segment start, the last non-empty value wins, the value runs to the next 0x02."""
    key_length = len(_TAGS_KEY)
    at = buf.rfind(_TAGS_KEY, start, end)
    while at >= 0:
        if at == start or buf[at - 1] == 2:
            value_start = at + key_length
            stop = buf.find(b"\x02", value_start, end)
            value = bytes(buf[value_start : stop if stop >= 0 else end])
            if value:
                return value
        at = buf.rfind(_TAGS_KEY, start, at + key_length - 1)
    return None


def record_batch(buf: Buffer, pos: npt.NDArray[np.int64], size: npt.NDArray[np.int64], *,
                 file_from_offset: int) -> RecordBatch:
    """The dispatch fields of records at `pos` (V1, IPv4 hosts, already verified)."""
    u8 = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    try:
        body_length = _gather_be(u8, pos + 84, 4)
        topic_length_pos = pos + _V4_FIXED_BYTES + body_length
        topic_length = u8[topic_length_pos].astype(np.int64)
        topic_start = topic_length_pos + 1
        topic_index = np.zeros(len(pos), dtype=np.int64)
        topics: list[str] = []
        for length in np.flatnonzero(np.bincount(topic_length, minlength=1)).tolist():
            rows = np.flatnonzero(topic_length == length)
            names = u8[topic_start[rows][:, None] + np.arange(length, dtype=np.int64)]
            # A log holds few topics: peel them off one at a time (a sort of a million rows
            # costs seconds); past a handful, sort what is left.
            left = np.arange(len(rows))
            while len(left) and len(topics) < _PEEL_TOPICS_MAX:
                first = names[left[0]]
                same = (names[left] == first).all(axis=1)
                topic_index[rows[left[same]]] = len(topics)
                topics.append(bytes(first).decode())
                left = left[~same]
            if len(left):
                distinct, inverse = np.unique(names[left], axis=0, return_inverse=True)
                topic_index[rows[left]] = inverse.reshape(-1) + len(topics)
                topics.extend(bytes(row).decode() for row in distinct)
        fields = (
            _gather_be(u8, pos + 12, 4), _gather_be(u8, pos + 20, 8),
            _gather_be(u8, pos + 36, 4), _gather_be(u8, pos + 56, 8),
        )
    finally:
        del u8
    properties_start = topic_start + topic_length + 2
    ends = pos + size
    return RecordBatch(
        tuple(topics), topic_index, fields[0], fields[1], pos + file_from_offset, size,
        fields[2], fields[3], _tags_codes(buf, properties_start, ends),
    )


def _tags_codes(buf: Buffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
                ) -> npt.NDArray[np.int64]:
    """The tagsCode of each properties range buf[starts[i]:ends[i]] (`_tags_value`, hashed).
    In C for ASCII values when `store._native` is built (`tags_codes`, without the GIL); the
    others (and every value without it) here, each distinct value hashed once."""
    codes: npt.NDArray[np.int64]
    if _native is not None:
        codes = np.frombuffer(_native.tags_codes(buf, starts, ends), dtype=np.int64).copy()
        todo = np.flatnonzero(codes == _TAGS_NOT_ASCII)
    else:
        codes = np.zeros(len(starts), dtype=np.int64)
        todo = np.arange(len(starts))
    memo: dict[bytes | None, int] = {None: 0}
    for index, start, end in zip(todo.tolist(), starts[todo].tolist(), ends[todo].tolist(),
                                 strict=True):
        value = _tags_value(buf, start, end)
        code = memo.get(value)
        if code is None:
            code = memo[value] = java_string_hash(value.decode("utf-8", "replace")) if value \
                else 0
        codes[index] = code
    return codes


def _known_chain(
    u8: npt.NDArray[np.uint8],
    known: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None,
    *,
    file_from_offset: int,
    file_size: int,
    start_pos: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The longest prefix of `known` records that starts at `start_pos`, is contiguous, fits
    the file and matches the TOTALSIZE written at each position: positions and sizes."""
    empty = np.empty(0, dtype=np.int64)
    if known is None or not len(known[0]):
        return empty, empty
    pos = known[0] - file_from_offset
    size = known[1]
    first = int(np.searchsorted(pos, start_pos))
    pos, size = pos[first:], size[first:]
    if not len(pos) or pos[0] != start_pos:
        return empty, empty
    fits = (size >= _V4_RECORD_BYTES_MIN) & (pos + size <= file_size)
    fits[1:] &= pos[1:] == pos[:-1] + size[:-1]
    count = len(pos) if fits.all() else int(np.argmin(fits))
    pos, size = pos[:count], size[:count]
    agrees = _gather_be(u8, pos, 4) == size
    count = len(pos) if agrees.all() else int(np.argmin(agrees))
    return pos[:count], size[:count]


def _walk(buf: Buffer, pos: int, file_size: int) -> tuple[npt.NDArray[np.int64], int]:
    """Follow TOTALSIZE from `pos` while the magic is V1/V2 and the size fits; returns the
    record positions and where the walk stopped (a BLANK, bad bytes, or the end). In C when
    `store._native` is built (`walk_records`, without the GIL), else the loop below."""
    if _native is not None:
        found, end = _native.walk_records(buf, pos, file_size, MAGIC_CODE_V1, MAGIC_CODE_V2,
                                          _V4_RECORD_BYTES_MIN)
        return np.frombuffer(found, dtype=np.int64), end
    unpack = _SIZE_MAGIC.unpack_from
    positions: list[int] = []
    append = positions.append
    last_header = file_size - 8
    v1, v2 = MAGIC_CODE_V1, MAGIC_CODE_V2
    while pos <= last_header:
        size, magic = unpack(buf, pos)
        if (magic != v1 and magic != v2) or size < _V4_RECORD_BYTES_MIN or size > file_size - pos:
            break
        append(pos)
        pos += size
    return np.array(positions, dtype=np.int64), pos


def _crcs(crc: Callable[[memoryview], int], view: memoryview, starts: npt.NDArray[np.int64],
          stops: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Masked CRC32 of view[start:stop] for each pair; the loop runs in C (map chains)."""
    slices = map(slice, starts.tolist(), stops.tolist())
    values = np.fromiter(map(crc, map(view.__getitem__, slices)), dtype=np.int64,
                         count=len(starts))
    masked: npt.NDArray[np.int64] = values & CRC32_MASK
    return masked


def _surely_valid(
    buf: Buffer, u8: npt.NDArray[np.uint8], pos: npt.NDArray[np.int64],
    size: npt.NDArray[np.int64], *, file_from_offset: int, check_body_crc: bool,
    verify_prop_crc: bool,
) -> npt.NDArray[np.bool_]:
    """Per record: True only if `check_record` would certainly say VALID (common layout with
    every check passed). False means "ask `check_record`", not "invalid". In numpy, for when
    `store._native` (its `records_surely_valid`) is not built."""
    end = pos + size
    magic = _gather_be(u8, pos + 4, 4)
    host_flags = u8[pos + 39] & 0x30  # SYSFLAG's low byte holds the two IPv6 bits
    phy = _gather_be(u8, pos + 28, 8)
    body_length = _gather_be(u8, pos + 84, 4)
    ok = (magic == MAGIC_CODE_V1) & (host_flags == 0)
    ok &= phy == pos + file_from_offset
    topic_length_pos = pos + _V4_FIXED_BYTES + body_length
    ok &= (body_length >= 0) & (topic_length_pos <= end - 3)
    topic_length_pos = np.where(ok, topic_length_pos, pos)
    topic_length = u8[topic_length_pos].view(np.int8).astype(np.int64)
    topic_end = topic_length_pos + 1 + topic_length
    ok &= (topic_length >= 0) & (topic_end <= end - 2)
    topic_end = np.where(ok, topic_end, pos)
    properties_length = _gather_be(u8, topic_end, 2)
    ok &= (properties_length >= 0) & (topic_end + 2 + properties_length == end)
    # Topics must be UTF-8: accept pure ASCII here, leave the rest to check_record.
    for length in np.flatnonzero(np.bincount(topic_length[ok], minlength=1)).tolist():
        rows = np.flatnonzero(ok & (topic_length == length))
        if length and rows.size:
            starts = topic_length_pos[rows] + 1
            topics = u8[starts[:, None] + np.arange(length, dtype=np.int64)]
            ok[rows[(topics >= 0x80).any(axis=1)]] = False
    view = memoryview(buf)
    crc = isal_zlib.crc32
    if check_body_crc:
        body_crc = _gather_be(u8, pos + 8, 4)
        body_start = pos[ok] + _V4_FIXED_BYTES
        body_end = body_start + body_length[ok]
        crcs = _crcs(crc, view, body_start, body_end)
        ok[ok] = crcs == body_crc[ok]
    if verify_prop_crc:
        ok &= properties_length >= 20
        reserved_at = np.where(ok, end - 20, pos)
        reserved = u8[reserved_at[:, None] + np.arange(20, dtype=np.int64)]
        ok &= (reserved[:, :9] == _CRC_KEY).all(axis=1) & (reserved[:, 19] == 2)
        digits = reserved[:, 9:19].astype(np.int64) - 48
        ok &= ((digits >= 0) & (digits <= 9)).all(axis=1)
        # The property must start a segment: a \x02 before it unless it is the only one.
        before = u8[np.where(ok & (properties_length > 20), end - 21, pos)]
        ok &= (properties_length == 20) | (before == 2)
        stored = digits @ _DIGIT_WEIGHTS
        crcs = _crcs(crc, view, pos[ok], end[ok] - 20)
        ok[ok] = crcs == stored[ok]
    result: npt.NDArray[np.bool_] = ok
    return result


def scan_file_fast(
    buf: Buffer,
    *,
    file_from_offset: int,
    file_size: int,
    start_pos: int = 0,
    check_body_crc: bool,
    verify_prop_crc: bool,
    on_record: Callable[[RecordCheck], None] | None = None,
    on_records: Callable[[RecordBatch], None] | None = None,
    known_phy_offsets: npt.NDArray[np.int64] | None = None,
    known_chain: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None,
) -> FastFileScan:
    """`scan_file`, fast: the same stop position, stop kind and valid records.

    A tight loop follows TOTALSIZE; numpy then vouches for the records of the common layout
    whose every check passes; every other record gets the exact `check_record`, in order, and
    the first it rejects ends the scan. `on_record` gets a full `RecordCheck` for each valid
    record whose physical offset is not in `known_phy_offsets` (those the consume queues already
    hold), in log order. `known_chain` (sorted phy offsets and sizes from the consume queues)
    spares the walk over the records it already locates: only its prefix that is contiguous
    from `start_pos` and agrees with each TOTALSIZE field is used.

    With `on_records`, the records the vectorized pass vouched for are reported in bulk instead,
    as `RecordBatch`es holding exactly the fields `check_record` would give; `on_record` still
    gets the others, and the calls interleave in log order.
    """
    u8 = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    try:
        chain = _known_chain(u8, known_chain, file_from_offset=file_from_offset,
                             file_size=file_size, start_pos=start_pos)
        walked, walk_end = _walk(buf, start_pos + int(chain[1].sum()), file_size)
        positions = pos = np.concatenate((chain[0], walked))
        size = _gather_be(u8, pos, 4)
        if _native is not None:  # the same check in one C pass (it also checks body CRCs)
            ok = np.frombuffer(_native.records_surely_valid(
                buf, pos, size, file_from_offset, verify_prop_crc), dtype=np.bool_)
        else:
            ok = _surely_valid(buf, u8, pos, size, file_from_offset=file_from_offset,
                               check_body_crc=check_body_crc, verify_prop_crc=verify_prop_crc)
    finally:
        del u8

    def exact(at: int) -> RecordCheck:
        return check_record(buf, at, limit=file_size, expected_phy_offset=file_from_offset + at,
                            check_body_crc=check_body_crc, verify_prop_crc=verify_prop_crc)

    count = len(positions)
    resume = walk_end
    for index in np.flatnonzero(~ok).tolist():
        check = exact(int(positions[index]))
        if check.status is not CheckStatus.VALID or check.size != size[index]:
            count, resume = index, int(positions[index])
            break
    pos, size, ok = pos[:count], size[:count], ok[:count]
    if on_record is not None:
        need = np.ones(count, dtype=bool)
        if known_phy_offsets is not None and len(known_phy_offsets):
            phys = pos + file_from_offset
            at = np.searchsorted(known_phy_offsets, phys)
            found = known_phy_offsets[np.minimum(at, len(known_phy_offsets) - 1)] == phys
            need &= ~found
        if on_records is None:
            for index in np.flatnonzero(need).tolist():
                on_record(exact(int(positions[index])))
        else:
            # Runs of vouched records go in bulk; the rest one by one, in log order.
            bulk = need & ok
            single = need & ~ok
            cuts = np.flatnonzero(single).tolist()
            run_start = 0
            for cut in [*cuts, count]:
                run = np.flatnonzero(bulk[run_start:cut]) + run_start
                if len(run):
                    on_records(record_batch(buf, pos[run], size[run],
                                            file_from_offset=file_from_offset))
                if cut < count:
                    on_record(exact(int(positions[cut])))
                run_start = cut + 1
    # From where the fast pass stopped, the exact scan decides (BLANK, bad bytes, file end).
    tail_records: list[tuple[int, int]] = []

    def collect(check: RecordCheck) -> None:
        tail_records.append((check.phy_offset - file_from_offset, check.size))
        if on_record is not None:
            on_record(check)

    tail = scan_file(buf, file_from_offset=file_from_offset, file_size=file_size,
                     start_pos=resume, check_body_crc=check_body_crc,
                     verify_prop_crc=verify_prop_crc, on_record=collect)
    if tail_records:
        more = np.array(tail_records, dtype=np.int64).reshape(-1, 2)
        pos = np.concatenate([pos, more[:, 0]])
        size = np.concatenate([size, more[:, 1]])
    return FastFileScan(FileScan(tail.end_pos, tail.stop, tail.reason, len(pos)), pos, size)
