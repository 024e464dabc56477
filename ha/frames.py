"""AutoSwitchHA frames (docs/ha-protocol.md §3): layouts, encoders and incremental, bounded
decoders.

A pure core: bytes in, frames out; nothing here touches a socket. Every frame is declared once
(diagram, construct spec, precompiled `struct.Struct`, size check). construct is the readable
spec and the tests' oracle; the `struct`s run. All integers are big-endian signed (Java
`ByteBuffer`).

Decoders follow wsproto: `feed(data)`, then `next_frame()` until it returns None ("need more
bytes"). Each declared size is checked before its body is buffered, and the unconsumed bytes a
decoder holds are bounded; anything invalid raises `HAProtocolError` (or its subclass
`FrameTooLargeError`) naming the field, the value and the limit. A decoder that raised is
finished: the connection it served is closed.

What the decoders check (the protocol cores check the rest, e.g. offsets against the store):
- slave -> master: state is HANDSHAKE or TRANSFER; handshake flags are 0 or 1 (Java treats any
  value but 1 as false; a Java slave only sends 0 or 1); broker id >= 1; ack offset >= 0.
- master -> slave: state is HANDSHAKE or TRANSFER; sizes non-negative and bounded; handshake body a
  whole number of 12-byte entries, epochs strictly increasing and start offsets non-decreasing and
  non-negative, the header epoch equal to the last entry's (-1 for none); transfer offset >= 0
  (-1 only in an empty frame: a master without a commitlog file, §3.4), epoch and epoch start
  offset non-negative, confirm offset non-negative.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import Final

import construct as cs

from ha.errors import FrameTooLargeError, HAProtocolError
from ha.states import HAConnectionState

_HANDSHAKE: Final = int(HAConnectionState.HANDSHAKE)
_TRANSFER: Final = int(HAConnectionState.TRANSFER)
_I32_MAX: Final = 2**31 - 1

# ------------------------------------------------------------------------------------------------
# Slave -> master: HANDSHAKE, 16 bytes, no body (§3.1). Sent in state HANDSHAKE only.
#  0       4                       6                  8                 16
#  | state | is_sync_from_last_file | is_async_learner | slave_broker_id |
#  | i32=1 | i16 (0/1)              | i16 (0/1)        | i64             |   big-endian
SLAVE_HANDSHAKE_SPEC: Final = cs.Struct(
    "state" / cs.Int32sb,
    "is_sync_from_last_file" / cs.Int16sb,
    "is_async_learner" / cs.Int16sb,
    "slave_broker_id" / cs.Int64sb,
)
SLAVE_HANDSHAKE: Final = struct.Struct(">ihhq")
assert SLAVE_HANDSHAKE.size == SLAVE_HANDSHAKE_SPEC.sizeof() == 16

# Slave -> master: TRANSFER (ACK), 12 bytes, no body (§3.2). The slave's commitlog end.
#  0       4          12
#  | state | max_offset |
#  | i32=2 | i64        |   big-endian
SLAVE_ACK_SPEC: Final = cs.Struct("state" / cs.Int32sb, "max_offset" / cs.Int64sb)
SLAVE_ACK: Final = struct.Struct(">iq")
assert SLAVE_ACK.size == SLAVE_ACK_SPEC.sizeof() == 12

# Master -> slave: HANDSHAKE reply header, 20 bytes, then body_size/12 epoch entries (§3.3).
#  0       4           8          16      20
#  | state | body_size | offset   | epoch |
#  | i32=1 | i32 (12N) | i64      | i32   |   big-endian; offset = master max phy offset,
#                                             epoch = master's last epoch (-1: no entry)
MASTER_HANDSHAKE_HEADER_SPEC: Final = cs.Struct(
    "state" / cs.Int32sb,
    "body_size" / cs.Int32sb,
    "offset" / cs.Int64sb,
    "epoch" / cs.Int32sb,
)
MASTER_HANDSHAKE_HEADER: Final = struct.Struct(">iiqi")
assert MASTER_HANDSHAKE_HEADER.size == MASTER_HANDSHAKE_HEADER_SPEC.sizeof() == 20

# One epoch entry of the handshake body, 12 bytes; ascending epochs, no end offsets.
#  0       4              12
#  | epoch | start_offset |
#  | i32   | i64          |
EPOCH_ENTRY_SPEC: Final = cs.Struct("epoch" / cs.Int32sb, "start_offset" / cs.Int64sb)
EPOCH_ENTRY: Final = struct.Struct(">iq")
assert EPOCH_ENTRY.size == EPOCH_ENTRY_SPEC.sizeof() == 12

# Master -> slave: TRANSFER header, 36 bytes, then body_size raw commitlog bytes (§3.4). A
# heartbeat is the header with body_size 0.
#  0       4           8          16      20                   28               36
#  | state | body_size | offset   | epoch | epoch_start_offset | confirm_offset |
#  | i32=2 | i32       | i64      | i32   | i64                | i64            |   big-endian
TRANSFER_HEADER_SPEC: Final = cs.Struct(
    "state" / cs.Int32sb,
    "body_size" / cs.Int32sb,
    "offset" / cs.Int64sb,
    "epoch" / cs.Int32sb,
    "epoch_start_offset" / cs.Int64sb,
    "confirm_offset" / cs.Int64sb,
)
TRANSFER_HEADER: Final = struct.Struct(">iiqiqq")
assert TRANSFER_HEADER.size == TRANSFER_HEADER_SPEC.sizeof() == 36

# Java's master builds its reply in a buffer of 1000 entries (§3.3); docs/reliability.md §8 gives
# pyrmq's decoder a looser bound so a long-lived group never locks itself out.
EPOCH_ENTRIES_MAX: Final = 10_000
MASTER_HANDSHAKE_BODY_BYTES_MAX: Final = EPOCH_ENTRIES_MAX * EPOCH_ENTRY.size
# A Java slave's read buffer is 4 MiB and must hold header + body (§3.5).
TRANSFER_BODY_BYTES_MAX: Final = 4 * 1024 * 1024 - TRANSFER_HEADER.size
# Slave -> master frames are 16 or 12 bytes; Java's master reads into a 1 MiB buffer.
SLAVE_STREAM_BUFFER_BYTES_MAX: Final = 1024 * 1024


# ------------------------------------------------------------------------------------------------
# Frames


@dataclass(frozen=True, slots=True)
class SlaveHandshake:
    """Slave -> master HANDSHAKE (§3.1). `slave_broker_id` is the controller-assigned id."""

    is_sync_from_last_file: bool
    is_async_learner: bool
    slave_broker_id: int

    def encode(self) -> bytes:
        return SLAVE_HANDSHAKE.pack(
            _HANDSHAKE, int(self.is_sync_from_last_file), int(self.is_async_learner),
            self.slave_broker_id,
        )


@dataclass(frozen=True, slots=True)
class SlaveAck:
    """Slave -> master TRANSFER / ACK (§3.2): the slave's commitlog max offset."""

    max_offset: int

    def encode(self) -> bytes:
        return SLAVE_ACK.pack(_TRANSFER, self.max_offset)


def encode_slave_ack(max_offset: int) -> bytes:
    """The 12-byte ACK; the hot path (one per received batch)."""
    return SLAVE_ACK.pack(_TRANSFER, max_offset)


@dataclass(frozen=True, slots=True)
class MasterHandshake:
    """Master -> slave HANDSHAKE reply (§3.3).

    `offset` is the master's max phy offset; `entries` are `(epoch, start_offset)` pairs in
    ascending epoch order. The header's epoch field is derived (last epoch, or -1).
    """

    offset: int
    entries: tuple[tuple[int, int], ...]

    @property
    def epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def encode(self) -> bytes:
        if len(self.entries) > EPOCH_ENTRIES_MAX:
            raise ValueError(
                f"handshake reply: {len(self.entries)} epoch entries exceed {EPOCH_ENTRIES_MAX}"
            )
        out = bytearray(MASTER_HANDSHAKE_HEADER.size + EPOCH_ENTRY.size * len(self.entries))
        MASTER_HANDSHAKE_HEADER.pack_into(
            out, 0, _HANDSHAKE, EPOCH_ENTRY.size * len(self.entries), self.offset, self.epoch
        )
        pos = MASTER_HANDSHAKE_HEADER.size
        for epoch, start_offset in self.entries:
            EPOCH_ENTRY.pack_into(out, pos, epoch, start_offset)
            pos += EPOCH_ENTRY.size
        return bytes(out)


@dataclass(frozen=True, slots=True)
class TransferHeader:
    """Master -> slave TRANSFER header (§3.4); `body_size` commitlog bytes follow it."""

    body_size: int
    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int

    def encode(self) -> bytes:
        return pack_transfer_header(
            self.body_size, self.offset, self.epoch, self.epoch_start_offset,
            self.confirm_offset,
        )


def pack_transfer_header(
    body_size: int, offset: int, epoch: int, epoch_start_offset: int, confirm_offset: int
) -> bytes:
    """The 36-byte TRANSFER header; the hot path (one per batch)."""
    return TRANSFER_HEADER.pack(
        _TRANSFER, body_size, offset, epoch, epoch_start_offset, confirm_offset
    )


@dataclass(frozen=True, slots=True)
class TransferFrame:
    """A decoded TRANSFER frame. `body` is a view into the decoder's buffer, valid only until
    the decoder's next `feed()` or `read_buffer()` (which release it): copy it (into the
    commitlog) first. The bodies of all frames decoded since the last feed stay valid together
    (a slave appends those of one read at once)."""

    header: TransferHeader
    body: memoryview


SlaveFrame = SlaveHandshake | SlaveAck
MasterFrame = MasterHandshake | TransferFrame


# ------------------------------------------------------------------------------------------------
# Decoders


class _Buffer:
    """A byte buffer with a read position (`pos`) and an end of valid bytes (`end`); its
    capacity is kept between frames (no allocation per read) and consumed bytes are dropped
    lazily by moving the unread tail (at most one partial frame) to the front.

    The bytes live in an anonymous mapping, not a bytearray: a bytearray's new pages are
    zeroed by the interpreter with the GIL held, while a mapping's are first touched by the
    read into it (`recv_into`), in the kernel, without the GIL. On a VM whose host backs
    memory again on first touch that matters: a slave's pump thread growing a bytearray to
    its 4 MiB read held the GIL for 11 ms, and the slave's event loop waited that long for
    it (perf, 2026-11-28)."""

    __slots__ = ("data", "end", "pos")

    def __init__(self) -> None:
        self.data = mmap.mmap(-1, mmap.PAGESIZE)
        self.pos = 0
        self.end = 0

    def _make_room(self, size: int) -> None:
        if self.pos == self.end:
            self.pos = self.end = 0
        elif self.pos and (self.pos > 65536 or self.end + size > len(self.data)):
            unread = self.end - self.pos
            self.data[:unread] = self.data[self.pos : self.end]
            self.pos, self.end = 0, unread
        need = self.end + size
        if need > len(self.data):
            # Unread bytes are at the front here (moved above when there was not room).
            grown = mmap.mmap(-1, -(-need // mmap.PAGESIZE) * mmap.PAGESIZE)
            grown[: self.end] = self.data[: self.end]
            self.data = grown

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        size = len(data)
        self._make_room(size)
        self.data[self.end : self.end + size] = data
        self.end += size

    def writable(self, size: int) -> memoryview:
        """Room for `size` bytes after the end (release the view before the next call)."""
        self._make_room(size)
        with memoryview(self.data) as whole:
            return whole[self.end : self.end + size]

    @property
    def available(self) -> int:
        return self.end - self.pos


class SlaveFrameDecoder:
    """Master side: decodes the slave's HANDSHAKE (16 B) and ACK (12 B) frames.

    `peer` only names the slave in errors. At most `buffer_bytes_max` unconsumed bytes may be
    held (call `next_frame()` until None after every `feed()`).
    """

    __slots__ = ("_buf", "buffer_bytes_max", "peer")

    def __init__(
        self, peer: str, *, buffer_bytes_max: int = SLAVE_STREAM_BUFFER_BYTES_MAX
    ) -> None:
        self.peer = peer
        self.buffer_bytes_max = buffer_bytes_max
        self._buf = _Buffer()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._buf.available + len(data) > self.buffer_bytes_max:
            raise FrameTooLargeError(
                f"HA stream from {self.peer}: {self._buf.available + len(data)} unread bytes "
                f"exceed buffer_bytes_max={self.buffer_bytes_max}"
            )
        self._buf.feed(data)

    def next_frame(self) -> SlaveFrame | None:
        buf = self._buf
        if buf.available < 4:
            return None
        (state,) = struct.unpack_from(">i", buf.data, buf.pos)
        if state == _TRANSFER:
            if buf.available < SLAVE_ACK.size:
                return None
            _, max_offset = SLAVE_ACK.unpack_from(buf.data, buf.pos)
            if max_offset < 0:
                raise HAProtocolError(f"ACK from {self.peer}: max_offset={max_offset} < 0")
            buf.pos += SLAVE_ACK.size
            return SlaveAck(max_offset)
        if state == _HANDSHAKE:
            # Java reads the broker id before checking that 16 bytes arrived (§14 item 1).
            if buf.available < SLAVE_HANDSHAKE.size:
                return None
            _, from_last_file, learner, broker_id = SLAVE_HANDSHAKE.unpack_from(buf.data, buf.pos)
            for name, flag in (("is_sync_from_last_file", from_last_file),
                               ("is_async_learner", learner)):
                if flag not in (0, 1):
                    raise HAProtocolError(
                        f"HANDSHAKE from {self.peer}: {name}={flag} is neither 0 nor 1"
                    )
            if broker_id < 1:
                raise HAProtocolError(
                    f"HANDSHAKE from {self.peer}: slave_broker_id={broker_id} < 1"
                )
            buf.pos += SLAVE_HANDSHAKE.size
            return SlaveHandshake(bool(from_last_file), bool(learner), broker_id)
        raise HAProtocolError(
            f"HA frame from {self.peer}: state={state} is neither HANDSHAKE (1) nor TRANSFER (2)"
        )


class MasterFrameDecoder:
    """Slave side: decodes the master's HANDSHAKE replies and TRANSFER frames.

    `body_bytes_max` bounds a TRANSFER body (default: what a Java slave can take, §3.5); a
    handshake body holds at most `EPOCH_ENTRIES_MAX` entries. `peer` names the master in errors.
    """

    __slots__ = ("_body_views", "_buf", "body_bytes_max", "peer")

    def __init__(self, peer: str, *, body_bytes_max: int = TRANSFER_BODY_BYTES_MAX) -> None:
        if not 0 < body_bytes_max <= _I32_MAX:
            raise ValueError(f"body_bytes_max={body_bytes_max} outside (0, {_I32_MAX}]")
        self.peer = peer
        self.body_bytes_max = body_bytes_max
        self._buf = _Buffer()
        self._body_views: list[memoryview] = []

    def _release_bodies(self) -> None:
        # The bodies handed out since the last feed are views of the buffer: they end here
        # (the buffer may move or grow).
        for view in self._body_views:
            view.release()
        self._body_views.clear()

    @property
    def buffered_bytes(self) -> int:
        return self._buf.available

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._release_bodies()
        limit = self._limit()
        if self._buf.available + len(data) > limit:
            raise FrameTooLargeError(
                f"HA stream from {self.peer}: {self._buf.available + len(data)} unread bytes "
                f"exceed {limit}"
            )
        self._buf.feed(data)

    def read_buffer(self, size: int) -> memoryview:
        """Room for up to `size` bytes to read into straight from the socket (no copy through
        `feed`), within the decoder's bound; report the count with `received`, and release the
        view before calling anything else. Raises `FrameTooLargeError` when there is no room."""
        self._release_bodies()
        room = min(size, self._limit() - self._buf.available)
        if room <= 0:
            raise FrameTooLargeError(
                f"HA stream from {self.peer}: {self._buf.available} unread bytes reach "
                f"{self._limit()}"
            )
        return self._buf.writable(room)

    def received(self, nbytes: int) -> None:
        """`nbytes` were read into the view of `read_buffer`."""
        self._buf.end += nbytes

    def _limit(self) -> int:
        # One frame is at most header + body_bytes_max; the shell drains frames after every
        # feed, so more than two frames' worth of unread bytes means it did not.
        return 2 * (TRANSFER_HEADER.size + max(self.body_bytes_max,
                                                MASTER_HANDSHAKE_BODY_BYTES_MAX))

    def next_frame(self) -> MasterFrame | None:
        buf = self._buf
        if buf.available < 8:
            return None
        state, body_size = struct.unpack_from(">ii", buf.data, buf.pos)
        if state == _TRANSFER:
            return self._transfer(body_size)
        if state == _HANDSHAKE:
            return self._handshake(body_size)
        raise HAProtocolError(
            f"HA frame from {self.peer}: state={state} is neither HANDSHAKE (1) nor TRANSFER (2)"
        )

    def _transfer(self, body_size: int) -> TransferFrame | None:
        buf = self._buf
        if body_size < 0:
            raise HAProtocolError(f"TRANSFER from {self.peer}: body_size={body_size} < 0")
        if body_size > self.body_bytes_max:
            raise FrameTooLargeError(
                f"TRANSFER from {self.peer}: body_size={body_size} exceeds "
                f"body_bytes_max={self.body_bytes_max}"
            )
        if buf.available < TRANSFER_HEADER.size:
            return None
        _, _, offset, epoch, epoch_start, confirm = TRANSFER_HEADER.unpack_from(buf.data, buf.pos)
        if offset < 0 and not (offset == -1 and body_size == 0):
            raise HAProtocolError(
                f"TRANSFER from {self.peer}: offset={offset} (only an empty frame may carry -1)"
            )
        if epoch < 0 or epoch_start < 0:
            raise HAProtocolError(
                f"TRANSFER from {self.peer}: epoch={epoch} epoch_start_offset={epoch_start}; "
                "both must be >= 0"
            )
        if confirm < 0:
            raise HAProtocolError(f"TRANSFER from {self.peer}: confirm_offset={confirm} < 0")
        end = buf.pos + TRANSFER_HEADER.size + body_size
        if buf.end < end:
            return None
        start = buf.pos + TRANSFER_HEADER.size
        buf.pos = end
        header = TransferHeader(body_size, offset, epoch, epoch_start, confirm)
        with memoryview(buf.data) as whole:
            body = whole[start:end]
        self._body_views.append(body)
        return TransferFrame(header, body)

    def _handshake(self, body_size: int) -> MasterHandshake | None:
        buf = self._buf
        if body_size < 0 or body_size % EPOCH_ENTRY.size:
            raise HAProtocolError(
                f"HANDSHAKE reply from {self.peer}: body_size={body_size} is not a non-negative "
                f"multiple of {EPOCH_ENTRY.size}"
            )
        if body_size > MASTER_HANDSHAKE_BODY_BYTES_MAX:
            raise FrameTooLargeError(
                f"HANDSHAKE reply from {self.peer}: body_size={body_size} exceeds "
                f"{MASTER_HANDSHAKE_BODY_BYTES_MAX} ({EPOCH_ENTRIES_MAX} entries)"
            )
        if buf.available < MASTER_HANDSHAKE_HEADER.size + body_size:
            return None
        _, _, offset, epoch = MASTER_HANDSHAKE_HEADER.unpack_from(buf.data, buf.pos)
        if offset < 0:
            raise HAProtocolError(f"HANDSHAKE reply from {self.peer}: offset={offset} < 0")
        entries = tuple(
            EPOCH_ENTRY.unpack_from(buf.data, buf.pos + MASTER_HANDSHAKE_HEADER.size + i)
            for i in range(0, body_size, EPOCH_ENTRY.size)
        )
        previous: tuple[int, int] | None = None
        for entry_epoch, start_offset in entries:
            if entry_epoch < 0 or start_offset < 0:
                raise HAProtocolError(
                    f"HANDSHAKE reply from {self.peer}: entry {entry_epoch}-{start_offset} "
                    "has a negative value"
                )
            if previous is not None and (entry_epoch <= previous[0]
                                         or start_offset < previous[1]):
                raise HAProtocolError(
                    f"HANDSHAKE reply from {self.peer}: entry {entry_epoch}-{start_offset} after "
                    f"{previous[0]}-{previous[1]} (epochs must increase, starts must not "
                    "decrease)"
                )
            previous = (entry_epoch, start_offset)
        expected_epoch = entries[-1][0] if entries else -1
        if epoch != expected_epoch:
            raise HAProtocolError(
                f"HANDSHAKE reply from {self.peer}: header epoch={epoch} but the last entry's "
                f"epoch is {expected_epoch}"
            )
        buf.pos += MASTER_HANDSHAKE_HEADER.size + body_size
        return MasterHandshake(offset, entries)
