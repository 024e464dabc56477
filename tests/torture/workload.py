"""Seeded store workloads for the crash torture (docs/reliability.md §7), and their oracle.

A `Plan` is a list of store operations derived from one seed: appends (single or batch), commitlog
and consume-queue flushes, checkpoint writes, truncations, epoch entries and (controller mode)
confirmOffset moves. `Layout` replays the commitlog's placement rule on the record sizes alone
(docs/store-format.md §2: a record goes into the current file only if `size + 8` fits, otherwise a
BLANK
fills the rest of the file and the record starts the next one), so the oracle's positions never
come from the store under test.

Every message body carries its own unique key and a CRC of its own (`make_body`), so a record read
back proves where it came from independently of the store's CRCs.

Invariants of a plan (what the generator guarantees, so the store must accept every operation):
- record sizes fit a 64 KiB file; bodies are 40..3000 bytes, some sized to fill a file exactly;
- truncation targets are record starts below the end and at or above confirmOffset;
- epochs strictly increase and start at the current end of the log;
- confirmOffset only moves forward, to a record end at or below the end of the log.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from store.config import StoreConfig
from store.message_batch import EncodedBatch, prepare_batch
from store.message_encoder import EncodedMessage, prepare_message
from store.message_properties import encode_properties
from store.message_store import AppendResult, MessageStore
from tests.support.store_helpers import BORN_HOST, STORE_HOST, small_config

TOPIC: Final = "TortureTopic"
QUEUE_COUNT: Final = 3
FILE_SIZE: Final = 64 * 1024
BLANK_BYTES: Final = 8  # END_FILE_MIN_BLANK_LENGTH: a record fits only if size + 8 <= remaining
BODY_BYTES_MIN: Final = 40
BODY_BYTES_MAX: Final = 3000
BASE_TIMESTAMP_MS: Final = 1_700_000_000_000
BORN_TIMESTAMP_MS: Final = 1_699_999_000_000
# Tags of the records; "zzzzzzzz" has a negative Java hashCode (sign extension in CQ units).
TAGS: Final = ("TagA", "TagB", "TagC", "zzzzzzzz")
KEY_CHARS: Final = 24  # "k" + 12 hex digits of the seed + "-" + 10 decimal digits
BODY_CRC_BYTES: Final = 4
EXTRA_KEY_INDEX: Final = 9_999_999_999  # the key of the one record a second writer run appends


def make_key(seed: int, index: int) -> str:
    """The unique key of record `index` of a plan (fixed width, so record overheads are fixed)."""
    return f"k{seed % 16**12:012x}-{index:010d}"


def make_body(key: str, length: int, rng: random.Random) -> bytes:
    """`key | filler | crc32(key | filler)` (4 bytes, big-endian), `length` bytes in all."""
    head = key.encode() + b"|" + rng.randbytes(length - KEY_CHARS - 1 - BODY_CRC_BYTES)
    return head + zlib.crc32(head).to_bytes(BODY_CRC_BYTES, "big")


def body_key(body: bytes) -> str:
    """The key a body was made with; `ValueError` if the body's own CRC does not match."""
    head, crc = body[:-BODY_CRC_BYTES], body[-BODY_CRC_BYTES:]
    if len(body) < KEY_CHARS + 1 + BODY_CRC_BYTES or zlib.crc32(head).to_bytes(4, "big") != crc:
        raise ValueError(f"body of {len(body)} bytes fails its own CRC (head {body[:30]!r})")
    return head[:KEY_CHARS].decode()


def java_hash(text: str) -> int:
    """Java `String.hashCode()` sign-extended to 64 bits: the tagsCode of a CQ unit (naive twin)."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def torture_config(root: Path, *, controller: bool = False, cq_units: int = 100) -> StoreConfig:
    """64 KiB commitlog files, `cq_units`-unit consume-queue files, 16 KiB message limit."""
    return replace(small_config(root), enable_controller_mode=controller,
                   mapped_file_size_consume_queue=cq_units * 20)


# ------------------------------------------------------------------------------------------ ops


@dataclass(frozen=True, slots=True)
class Msg:
    """One message of a plan: its key, queue, tag, body and record size (TOTALSIZE)."""

    key: str
    queue_id: int
    tag: str
    body: bytes
    total_size: int

    @property
    def properties(self) -> bytes:
        return encode_properties({"KEYS": self.key, "TAGS": self.tag})


@dataclass(frozen=True, slots=True)
class Append:
    """Append `msgs` (one message, or a batch into one queue); the clock moves `tick_ms` first."""

    msgs: tuple[Msg, ...]
    batch: bool
    tick_ms: int

    @property
    def total_size(self) -> int:
        return sum(m.total_size for m in self.msgs)


@dataclass(frozen=True, slots=True)
class Flush:
    """msync the commitlog up to its end (with SYNC_FLUSH, this acknowledges the appends)."""


@dataclass(frozen=True, slots=True)
class FlushConsumeQueues:
    """msync every consume queue."""


@dataclass(frozen=True, slots=True)
class WriteCheckpoint:
    """Write the checkpoint file (atomic replace)."""


@dataclass(frozen=True, slots=True)
class Truncate:
    """`truncate_to_blocking(phy_offset)`: a slave's cut at a record start."""

    phy_offset: int


@dataclass(frozen=True, slots=True)
class AppendEpoch:
    """Persist a new epoch entry starting at the current end of the log."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class SetConfirm:
    """Controller mode: move confirmOffset forward (dispatches up to it)."""

    confirm_offset: int


Op = Append | Flush | FlushConsumeQueues | WriteCheckpoint | Truncate | AppendEpoch | SetConfirm


def encode_single(msg: Msg) -> EncodedMessage:
    return prepare_message(
        topic=TOPIC, queue_id=msg.queue_id, flag=0, body=msg.body, properties=msg.properties,
        sys_flag=0, born_timestamp=BORN_TIMESTAMP_MS, born_host=BORN_HOST, store_host=STORE_HOST,
        max_message_size=16 * 1024,
    )


def append_single(store: MessageStore, msg: Msg) -> AppendResult:
    """Append one message the way the broker's send does (`append_message_fields`: one C call
    for the common message), with `encode_single`'s fields and the torture config's limit."""
    return store.append_message_fields(
        topic=TOPIC, queue_id=msg.queue_id, flag=0, body=msg.body, properties=msg.properties,
        sys_flag=0, born_timestamp=BORN_TIMESTAMP_MS, born_host=BORN_HOST, store_host=STORE_HOST,
    )


def encode_batch(msgs: Sequence[Msg]) -> EncodedBatch:
    return prepare_batch(
        topic=TOPIC, queue_id=msgs[0].queue_id, inner=[(0, m.body, m.properties) for m in msgs],
        sys_flag=0, born_timestamp=BORN_TIMESTAMP_MS, born_host=BORN_HOST, store_host=STORE_HOST,
        max_message_size=4 * 1024 * 1024,
    )


# ------------------------------------------------------------------------------------ oracle


@dataclass(frozen=True, slots=True)
class Rec:
    """One record of the log as the oracle (or a walk of the recovered files) sees it."""

    start: int
    end: int
    key: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    tags_code: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(slots=True)
class Layout:
    """The commitlog and the store's counters, replayed from a plan's operations.

    `records` is the log (in offset order); `blanks` the offsets of BLANK headers; `max_phy_offset`
    the end of the log (a file end after a BLANK). `acked_end` is the end covered by the last
    flush (SYNC_FLUSH acknowledgements), `confirm_offset` the last confirmOffset set (controller),
    `epochs` the persisted `(epoch, start_offset)` list.
    """

    file_size: int = FILE_SIZE
    controller: bool = False
    records: list[Rec] = field(default_factory=list)
    blanks: list[int] = field(default_factory=list)
    max_phy_offset: int = 0
    last_file_start: int | None = None
    files_created: int = 0
    next_queue_offsets: list[int] = field(default_factory=lambda: [0] * QUEUE_COUNT)
    clock_ms: int = BASE_TIMESTAMP_MS
    acked_end: int = 0
    confirm_offset: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)

    def remaining(self) -> int:
        if self.last_file_start is None:
            return 0
        return self.last_file_start + self.file_size - self.max_phy_offset

    def place(self, size: int) -> int:
        """Where a `size`-byte write goes (rolling to a new file, with a BLANK, if needed)."""
        if size + BLANK_BYTES > self.file_size:
            raise ValueError(f"a {size}-byte write never fits a {self.file_size}-byte file")
        if self.last_file_start is not None and size + BLANK_BYTES <= self.remaining():
            return self.max_phy_offset
        if self.last_file_start is None:
            start = 0
        else:
            if self.remaining() > 0:
                self.blanks.append(self.max_phy_offset)
            start = self.last_file_start + self.file_size
        self.last_file_start = self.max_phy_offset = start
        self.files_created += 1
        return start

    def apply(self, op: Op) -> list[Rec]:
        """Replay one operation; returns the records an append adds (empty otherwise)."""
        match op:
            case Append(msgs=msgs, tick_ms=tick_ms):
                self.clock_ms += tick_ms
                pos = self.place(op.total_size)
                added: list[Rec] = []
                for msg in msgs:
                    queue_offset = self.next_queue_offsets[msg.queue_id]
                    self.next_queue_offsets[msg.queue_id] = queue_offset + 1
                    added.append(Rec(pos, pos + msg.total_size, msg.key, msg.queue_id,
                                     queue_offset, self.clock_ms, java_hash(msg.tag)))
                    pos += msg.total_size
                self.records.extend(added)
                self.max_phy_offset = pos
                if not self.controller:
                    self.confirm_offset = pos
                return added
            case Flush():
                self.acked_end = self.max_phy_offset
            case Truncate(phy_offset=cut):
                self.records = [r for r in self.records if r.start < cut]
                self.blanks = [b for b in self.blanks if b < cut]
                self.max_phy_offset = cut
                self.last_file_start = cut - cut % self.file_size
                self.next_queue_offsets = [
                    sum(1 for r in self.records if r.queue_id == q) for q in range(QUEUE_COUNT)
                ]
                self.acked_end = min(self.acked_end, cut)
                self.confirm_offset = min(self.confirm_offset, cut)
                self.epochs = [(e, s) for e, s in self.epochs if s < cut]
            case AppendEpoch(epoch=epoch, start_offset=start):
                self.epochs.append((epoch, start))
            case SetConfirm(confirm_offset=confirm):
                self.confirm_offset = confirm
            case FlushConsumeQueues() | WriteCheckpoint():
                pass
        return []

    def copy(self) -> Layout:
        return replace(
            self, records=list(self.records), blanks=list(self.blanks),
            next_queue_offsets=list(self.next_queue_offsets), epochs=list(self.epochs),
        )


# ---------------------------------------------------------------------------------- plans


@dataclass(frozen=True, slots=True)
class Profile:
    """Relative weights of the operations, and the shape of appends."""

    append: float
    flush: float
    flush_cq: float
    checkpoint: float
    truncate: float
    epoch: float
    confirm: float
    batch_share: float = 0.15
    fill_share: float = 0.3  # when a file-filling size is reachable, how often to pick one
    ticks_ms: tuple[int, ...] = (1, 3, 7, 20)


@dataclass(frozen=True, slots=True)
class Plan:
    seed: int
    controller: bool
    ops: tuple[Op, ...]

    def layout_after(self, count: int) -> Layout:
        """The oracle after the first `count` operations."""
        layout = Layout(controller=self.controller)
        for op in self.ops[:count]:
            layout.apply(op)
        return layout

    def count(self, kind: type) -> int:
        return sum(1 for op in self.ops if isinstance(op, kind))

    @property
    def end_clock_ms(self) -> int:
        return BASE_TIMESTAMP_MS + sum(op.tick_ms for op in self.ops if isinstance(op, Append))


_OVERHEAD_CACHE: dict[str, int] = {}


def record_overhead(tag: str) -> int:
    """TOTALSIZE minus body length of a plan's single message with `tag` (keys are fixed width)."""
    if tag not in _OVERHEAD_CACHE:
        probe = Msg(make_key(0, 0), 0, tag, b"", 0)
        _OVERHEAD_CACHE[tag] = encode_single(probe).total_size
    return _OVERHEAD_CACHE[tag]


def _body_length(rng: random.Random, tag: str, layout: Layout, fill_share: float) -> int:
    """A random body length, or one that makes the record fill the current file exactly."""
    remaining = layout.remaining()
    overhead = record_overhead(tag)
    if remaining and rng.random() < fill_share:
        # remaining - 8: fits, leaving an 8-byte BLANK; - 9: leaves 9; - 7 and remaining: one
        # byte too big and exactly the rest, both roll to the next file.
        target = remaining - rng.choice((8, 9, 7, 0))
        length = target - overhead
        if BODY_BYTES_MIN <= length <= BODY_BYTES_MAX:
            return length
    return rng.randint(BODY_BYTES_MIN, BODY_BYTES_MAX)


def make_plan(
    seed: int,
    *,
    n_ops: int,
    controller: bool,
    profile: Profile,
    first_ops: Iterable[Op] = (),
) -> Plan:
    """`n_ops` operations from `seed` (after `first_ops`, e.g. a first epoch entry)."""
    rng = random.Random(seed)
    layout = Layout(controller=controller)
    ops: list[Op] = []
    for first in first_ops:
        layout.apply(first)
        ops.append(first)
    kinds = ("append", "flush", "flush_cq", "checkpoint", "truncate", "epoch", "confirm")
    weights: Mapping[str, float] = {
        "append": profile.append, "flush": profile.flush, "flush_cq": profile.flush_cq,
        "checkpoint": profile.checkpoint, "truncate": profile.truncate, "epoch": profile.epoch,
        "confirm": profile.confirm if controller else 0.0,
    }
    next_index = 0
    while len(ops) < n_ops:
        kind = rng.choices(kinds, [weights[k] for k in kinds])[0]
        op: Op
        if kind == "append":
            queue_id = rng.randrange(QUEUE_COUNT)
            is_batch = rng.random() < profile.batch_share
            count = rng.randint(2, 6) if is_batch else 1
            msgs: list[Msg] = []
            for _ in range(count):
                tag = rng.choice(TAGS)
                key = make_key(seed, next_index)
                next_index += 1
                length = rng.randint(BODY_BYTES_MIN, BODY_BYTES_MAX) if is_batch else \
                    _body_length(rng, tag, layout, profile.fill_share)
                msgs.append(Msg(key, queue_id, tag, make_body(key, length, rng), 0))
            if is_batch:
                sizes = encode_batch(msgs).sizes.tolist()
                msgs = [replace(m, total_size=int(s)) for m, s in zip(msgs, sizes, strict=True)]
            else:
                msgs = [replace(msgs[0], total_size=encode_single(msgs[0]).total_size)]
            op = Append(tuple(msgs), is_batch, rng.choice(profile.ticks_ms))
        elif kind == "truncate":
            # Controller mode refuses a cut below confirmOffset; outside it, confirmOffset just
            # follows the end of the log.
            floor = layout.confirm_offset if controller else 0
            starts = [r.start for r in layout.records[-12:] if r.start >= floor]
            if not starts:
                continue
            op = Truncate(rng.choice(starts))
        elif kind == "epoch":
            last = layout.epochs[-1][0] if layout.epochs else 0
            op = AppendEpoch(last + rng.randint(1, 2), layout.max_phy_offset)
        elif kind == "confirm":
            ends = [r.end for r in layout.records if r.end > layout.confirm_offset]
            if not ends:
                continue
            op = SetConfirm(rng.choice(ends[-20:]))
        elif kind == "flush":
            op = Flush()
        elif kind == "flush_cq":
            op = FlushConsumeQueues()
        else:
            op = WriteCheckpoint()
        layout.apply(op)
        ops.append(op)
    return Plan(seed, controller, tuple(ops))


def extra_msg(seed: int) -> Msg:
    """The one short record a second writer run appends (queue 0, smallest body)."""
    key = make_key(seed, EXTRA_KEY_INDEX)
    msg = Msg(key, 0, TAGS[0], make_body(key, BODY_BYTES_MIN, random.Random(seed)), 0)
    return replace(msg, total_size=encode_single(msg).total_size)
