"""The slave's `receive_transfers` (the frames of one read at once) against its naive twin,
`receive` frame by frame with the shell's coalescing (the last confirmOffset and ACK of a read):
the same bytes at the same offsets, the same epoch entries before the bytes they label, the same
confirmOffset and ACK after each read, and an `HAProtocolError` at the same read."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from ha.errors import HAProtocolError
from ha.frames import MasterHandshake, TransferFrame, TransferHeader
from ha.slave_protocol import (
    Append,
    AppendEpoch,
    AppendRun,
    Send,
    SetConfirmOffset,
    SlaveEffect,
    SlaveProtocol,
)
from store.epoch_cache import EpochCache


@dataclass
class Outcome:
    """What a shell carrying out the effects ends with: a log of epoch entries and byte ranges
    (adjacent ranges merged: how they were split does not matter), per read the last
    confirmOffset and ACK sent, and the read that failed (None: none)."""

    events: list[tuple[str, int, bytes]] = field(default_factory=list)
    confirms: list[int | None] = field(default_factory=list)
    acks: list[bytes | None] = field(default_factory=list)
    failed_at: int | None = None

    def bytes_at(self, offset: int, data: bytes) -> None:
        if self.events and self.events[-1][0] == "bytes":
            _, start, prior = self.events[-1]
            assert start + len(prior) == offset, "ranges must follow each other"
            self.events[-1] = ("bytes", start, prior + data)
        else:
            self.events.append(("bytes", offset, data))

    def carry_out(self, effects: list[SlaveEffect]) -> tuple[int | None, bytes | None]:
        confirm: int | None = None
        ack: bytes | None = None
        for effect in effects:
            match effect:
                case AppendEpoch(epoch=epoch, start_offset=start):
                    self.events.append(("epoch", epoch, start.to_bytes(8, "big")))
                case Append(phy_offset=offset, body=body):
                    self.bytes_at(offset, bytes(body))
                case AppendRun(phy_offset=offset, bodies=bodies):
                    for body in bodies:
                        self.bytes_at(offset, bytes(body))
                        offset += len(body)
                case SetConfirmOffset(confirm_offset=value):
                    confirm = value
                case Send(data=data):
                    ack = data
        return confirm, ack


def connected_slave() -> SlaveProtocol:
    proto = SlaveProtocol("master", slave_broker_id=2)
    proto.connected(local_max_phy_offset=0, local_epochs=EpochCache(), confirm_offset=0)
    proto.receive(MasterHandshake(0, ()))
    return proto


@st.composite
def frame_streams(draw: st.DrawFn) -> list[list[TransferFrame]]:
    """TRANSFER frames from offset 0 (bodies, heartbeats, epoch changes, confirm offsets that
    may run ahead of the data), now and then a bad one, cut into reads."""
    frames: list[TransferFrame] = []
    offset = draw(st.sampled_from([0, 4096]))
    epoch, epoch_start = 1, offset
    for _ in range(draw(st.integers(1, 24))):
        kind = draw(st.sampled_from(["body", "body", "body", "heartbeat", "new-epoch", "bad"]))
        if kind == "new-epoch":
            epoch += draw(st.integers(1, 3))
            epoch_start = offset
        header_offset = offset
        if kind == "bad":
            match draw(st.sampled_from(["offset", "epoch-back", "start-back"])):
                case "start-back" if epoch_start > 0:
                    epoch += 1
                    epoch_start -= 1
                case "epoch-back":
                    epoch -= 1
                case _:
                    header_offset = offset + draw(st.integers(1, 9))
        body = draw(st.binary(min_size=1, max_size=40)) if kind in ("body", "new-epoch") \
            else b""
        confirm = draw(st.integers(0, offset + len(body) + 50))
        frames.append(TransferFrame(
            TransferHeader(len(body), header_offset, epoch, epoch_start, confirm),
            memoryview(body),
        ))
        offset = header_offset + len(body)
    if not frames:
        frames.append(TransferFrame(TransferHeader(0, offset, epoch, epoch_start, 0),
                                    memoryview(b"")))
    cuts = sorted(draw(st.sets(st.integers(1, len(frames)), max_size=6)) | {len(frames)})
    reads, start = [], 0
    for cut in cuts:
        reads.append(frames[start:cut])
        start = cut
    return reads


@settings(max_examples=300)
@given(reads=frame_streams())
def test_receive_transfers_equals_receive_frame_by_frame(
    reads: list[list[TransferFrame]],
) -> None:
    naive, runs = Outcome(), Outcome()
    naive_proto, runs_proto = connected_slave(), connected_slave()
    for index, read in enumerate(reads):
        applied: list[SlaveEffect] = []
        try:
            for frame in read:
                applied.extend(naive_proto.receive(frame))
        except HAProtocolError:
            naive.failed_at = index
        try:
            gathered = runs_proto.receive_transfers(read)
        except HAProtocolError:
            runs.failed_at = index
        assert naive.failed_at == runs.failed_at
        if naive.failed_at is not None:
            break  # the connection closes; nothing of this read is carried out
        for outcome, effects in ((naive, applied), (runs, gathered)):
            confirm, ack = outcome.carry_out(effects)
            outcome.confirms.append(confirm)
            outcome.acks.append(ack)
        assert sum(isinstance(e, AppendRun) for e in gathered) <= \
            1 + sum(isinstance(e, AppendEpoch) for e in gathered)
    assert runs == naive
