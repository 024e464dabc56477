"""The StoreCheckpoint file `${root}/checkpoint` (docs/store-format.md §7): six timestamps/offsets.

Layout (4096 bytes, big-endian). Java 5.3.3 reads bytes [0, 40), Java 5.5.0 bytes [0, 48), and
both ignore the rest; pyrmq adds a trailer in that unused area so a torn or damaged file is
detected instead of trusted:

    0                    8                    16                  24                     32
    | physic_msg_timestamp | logics_msg_timestamp | index_msg_timestamp | master_flushed_offset |
    | i64                  | i64                  | i64                 | i64                   |
    32                   40                       48          56      60                   4096
    | confirm_phy_offset | logics_physical_offset | "PYRMQCK2" | crc   | zeros ...            |
    | i64                | i64 (5.5.0; 0=unknown) | 8 bytes    | i32   |                      |

`crc` = `zlib.crc32(bytes[0:48]) & 0x7FFFFFFF` (RocketMQ's `UtilAll.crc32` convention).
`logics_physical_offset` is 5.5.0's `logicsPhysicalOffset`: the start (PHYSICALOFFSET) of the last
record dispatched into a consume queue before the last consume-queue flush; 5.3.3 leaves it 0 and
never writes it.

Invariants:
- A file of any size other than 4096, or with a trailer magic but a wrong CRC, is *bad*:
  `load_checkpoint` says so and returns zeros; the store then recovers as after an abnormal exit
  with `min_timestamp() == 0` (docs/reliability.md §7.2 g), i.e. it scans the whole window.
- A 4096-byte file without a magic (written by Java) is accepted as it is if bytes [48, 4096)
  are zeros, as Java leaves them; anything else there is *bad* (random bytes would otherwise
  pass for a Java file with random offsets and timestamps). A 5.3.3 file (zeros from 40 on)
  loads with `logics_physical_offset` 0.
- A file of pyrmq's earlier layout (five fields, trailer "PYRMQCK1" at 40, CRC over [0, 40))
  still loads, with `logics_physical_offset` 0; pyrmq writes only the current layout.
- Writes go through `atomic_replace` (fault prefix "checkpoint.write"): the name `checkpoint`
  always holds a whole old or a whole new version. The file is written about once a second, off
  the event loop.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Final

import construct as cs

from store.atomic_file import atomic_replace, store_error

CHECKPOINT_FILE_NAME: Final = "checkpoint"
CHECKPOINT_FILE_SIZE: Final = 4096
# RocketMQ's StoreCheckpoint.getMinTimestamp() steps back 3 s from the smaller timestamp.
MIN_TIMESTAMP_MARGIN_MS: Final = 3000

CHECKPOINT_FIELDS_SPEC = cs.Struct(
    "physic_msg_timestamp" / cs.Int64sb,
    "logics_msg_timestamp" / cs.Int64sb,
    "index_msg_timestamp" / cs.Int64sb,
    "master_flushed_offset" / cs.Int64sb,
    "confirm_phy_offset" / cs.Int64sb,
    "logics_physical_offset" / cs.Int64sb,
)
CHECKPOINT_FIELDS: Final = struct.Struct(">qqqqqq")
assert CHECKPOINT_FIELDS.size == CHECKPOINT_FIELDS_SPEC.sizeof() == 48
# The five fields of Java 5.3.3 (and of pyrmq's earlier layout): the sixth is 5.5.0's.
FIELDS_5_3_3: Final = struct.Struct(">qqqqq")

TRAILER_MAGIC: Final = b"PYRMQCK2"
TRAILER_OFFSET: Final = CHECKPOINT_FIELDS.size
# pyrmq's earlier layout: its trailer right after the five 5.3.3 fields (read, never written).
OLD_TRAILER_MAGIC: Final = b"PYRMQCK1"
OLD_TRAILER_OFFSET: Final = FIELDS_5_3_3.size
CHECKPOINT_TRAILER_SPEC = cs.Struct(
    "magic" / cs.Const(TRAILER_MAGIC),
    "crc" / cs.Int32sb,
)
CHECKPOINT_TRAILER: Final = struct.Struct(">8si")
assert CHECKPOINT_TRAILER.size == CHECKPOINT_TRAILER_SPEC.sizeof() == 12

_I64_MIN: Final = -(2**63)
_I64_MAX: Final = 2**63 - 1


def checkpoint_crc(fields: bytes) -> int:
    """CRC of the field bytes as stored in the trailer (non-negative i32)."""
    return zlib.crc32(fields) & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The six values of the checkpoint; all zero for a new store. Timestamps are epoch ms."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    logics_physical_offset: int = 0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not _I64_MIN <= value <= _I64_MAX:
                raise ValueError(f"checkpoint field {field.name}={value} does not fit an i64")

    def min_timestamp(self, *, message_index_safe: bool = False) -> int:
        """Store timestamp (ms) from which abnormal recovery may start scanning (§7, §9.3).

        `min(physic, logics) - 3000`, floored at 0; with `message_index_safe` (RocketMQ
        `messageIndexSafe`) also no later than `index_msg_timestamp`.
        """
        min_ts = max(
            min(self.physic_msg_timestamp, self.logics_msg_timestamp) - MIN_TIMESTAMP_MARGIN_MS,
            0,
        )
        if message_index_safe:
            return min(min_ts, self.index_msg_timestamp)
        return min_ts


@dataclass(frozen=True, slots=True)
class CheckpointLoad:
    """What `load_checkpoint` found.

    `checkpoint` is all zeros when the file is absent or bad. `existed`: the file was there.
    `bad`: it was there but unusable (wrong size, or trailer CRC mismatch); `reason` says why
    (None when not bad). A bad checkpoint means: recover as after an abnormal exit, min timestamp 0.
    """

    checkpoint: Checkpoint
    existed: bool
    bad: bool
    reason: str | None = None


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """The 4096 bytes of the file: fields, pyrmq trailer, zeros."""
    buf = bytearray(CHECKPOINT_FILE_SIZE)
    CHECKPOINT_FIELDS.pack_into(buf, 0, *astuple(checkpoint))
    crc = checkpoint_crc(bytes(buf[:TRAILER_OFFSET]))
    CHECKPOINT_TRAILER.pack_into(buf, TRAILER_OFFSET, TRAILER_MAGIC, crc)
    return bytes(buf)


def decode_checkpoint(data: bytes, *, path: Path | str = "checkpoint") -> CheckpointLoad:
    """Check and decode the bytes of an existing checkpoint file (`path` only names it)."""
    if len(data) != CHECKPOINT_FILE_SIZE:
        return _bad(f"checkpoint {path}: size {len(data)} != {CHECKPOINT_FILE_SIZE}")
    magic, stored_crc = CHECKPOINT_TRAILER.unpack_from(data, TRAILER_OFFSET)
    if magic == TRAILER_MAGIC:
        fields_end = TRAILER_OFFSET
    else:
        magic, stored_crc = CHECKPOINT_TRAILER.unpack_from(data, OLD_TRAILER_OFFSET)
        fields_end = OLD_TRAILER_OFFSET if magic == OLD_TRAILER_MAGIC else 0
    if fields_end:
        expected = checkpoint_crc(data[:fields_end])
        if stored_crc != expected:
            return _bad(f"checkpoint {path}: crc32 {stored_crc:#010x} != {expected:#010x}")
        values = FIELDS_5_3_3.unpack_from(data, 0) if fields_end == OLD_TRAILER_OFFSET else \
            CHECKPOINT_FIELDS.unpack_from(data, 0)
        return CheckpointLoad(Checkpoint(*values), existed=True, bad=False)
    # Without a magic the file was written by Java (no trailer): trusted as Java trusts it.
    if data[TRAILER_OFFSET:].strip(b"\0"):
        return _bad(
            f"checkpoint {path}: no pyrmq trailer, and bytes after the {TRAILER_OFFSET} field "
            "bytes are not the zeros Java leaves there"
        )
    return CheckpointLoad(
        Checkpoint(*CHECKPOINT_FIELDS.unpack_from(data, 0)), existed=True, bad=False
    )


def _bad(reason: str) -> CheckpointLoad:
    return CheckpointLoad(Checkpoint(), existed=True, bad=True, reason=reason)


def load_checkpoint(path: Path) -> CheckpointLoad:
    """Read `path` (absent -> zeros, `existed=False`). Raises `StoreIOError` on a read error."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return CheckpointLoad(Checkpoint(), existed=False, bad=False)
    except OSError as err:
        raise store_error(path, "read of", err) from err
    return decode_checkpoint(data, path=path)


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Replace `path` atomically with `checkpoint` (blocking: call it off the event loop).

    Raises `DiskFullError` / `StoreIOError` naming the file; the old file stays whole.
    """
    atomic_replace(path, encode_checkpoint(checkpoint), fault_prefix="checkpoint.write")
