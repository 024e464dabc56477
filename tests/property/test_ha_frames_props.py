"""HA frames, properties: the fast `struct` codecs equal the construct specs, decoding does not
depend on how the stream is split, and arbitrary bytes give frames or `HAProtocolError` only."""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import asdict

from hypothesis import given
from hypothesis import strategies as st

from ha.errors import HAProtocolError
from ha.frames import (
    EPOCH_ENTRY_SPEC,
    MASTER_HANDSHAKE_HEADER_SPEC,
    SLAVE_ACK_SPEC,
    SLAVE_HANDSHAKE_SPEC,
    TRANSFER_HEADER_SPEC,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveAck,
    SlaveFrame,
    SlaveFrameDecoder,
    SlaveHandshake,
    TransferFrame,
    TransferHeader,
)

I64 = st.integers(0, 2**63 - 1)
I32 = st.integers(0, 2**31 - 1)

slave_handshakes = st.builds(SlaveHandshake, st.booleans(), st.booleans(),
                             st.integers(1, 2**63 - 1))
slave_acks = st.builds(SlaveAck, I64)


@st.composite
def master_handshakes(draw: st.DrawFn) -> MasterHandshake:
    epochs = sorted(draw(st.sets(I32, max_size=8)))
    starts = sorted(draw(st.lists(I64, min_size=len(epochs), max_size=len(epochs))))
    return MasterHandshake(draw(I64), tuple(zip(epochs, starts, strict=True)))


@st.composite
def transfers(draw: st.DrawFn) -> tuple[TransferHeader, bytes]:
    body = draw(st.binary(max_size=64))
    offset = draw(I64) if body else draw(st.one_of(I64, st.just(-1)))
    return TransferHeader(len(body), offset, draw(I32), draw(I64), draw(I64)), body


@given(frame=slave_handshakes)
def test_slave_handshake_fast_equals_spec(frame: SlaveHandshake) -> None:
    assert frame.encode() == SLAVE_HANDSHAKE_SPEC.build({
        "state": 1, "is_sync_from_last_file": int(frame.is_sync_from_last_file),
        "is_async_learner": int(frame.is_async_learner),
        "slave_broker_id": frame.slave_broker_id,
    })


@given(frame=slave_acks)
def test_slave_ack_fast_equals_spec(frame: SlaveAck) -> None:
    assert frame.encode() == SLAVE_ACK_SPEC.build({"state": 2, "max_offset": frame.max_offset})


@given(frame=master_handshakes())
def test_master_handshake_fast_equals_spec(frame: MasterHandshake) -> None:
    spec = MASTER_HANDSHAKE_HEADER_SPEC.build({
        "state": 1, "body_size": 12 * len(frame.entries), "offset": frame.offset,
        "epoch": frame.epoch,
    }) + b"".join(EPOCH_ENTRY_SPEC.build({"epoch": e, "start_offset": s})
                  for e, s in frame.entries)
    assert frame.encode() == spec


@given(frame=transfers())
def test_transfer_header_fast_equals_spec(frame: tuple[TransferHeader, bytes]) -> None:
    header, _ = frame
    packed = header.encode()
    assert packed == TRANSFER_HEADER_SPEC.build({"state": 2, **asdict(header)})
    parsed = TRANSFER_HEADER_SPEC.parse(packed)
    assert TransferHeader(parsed.body_size, parsed.offset, parsed.epoch,
                          parsed.epoch_start_offset, parsed.confirm_offset) == header


def _splits(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def _decode_master(chunks: list[bytes]) -> list[object]:
    decoder = MasterFrameDecoder("master")
    out: list[object] = []
    for chunk in chunks:
        decoder.feed(chunk)
        while (frame := decoder.next_frame()) is not None:
            out.append((frame.header, bytes(frame.body)) if isinstance(frame, TransferFrame)
                       else frame)
    return out


def _decode_slave(chunks: list[bytes]) -> list[SlaveFrame]:
    decoder = SlaveFrameDecoder("slave")
    out: list[SlaveFrame] = []
    for chunk in chunks:
        decoder.feed(chunk)
        while (frame := decoder.next_frame()) is not None:
            out.append(frame)
    return out


@given(
    frames=st.lists(st.one_of(master_handshakes(), transfers()), max_size=6),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_master_stream_decoding_is_split_insensitive(
    frames: list[MasterHandshake | tuple[TransferHeader, bytes]], cuts: list[int]
) -> None:
    data = b"".join(f.encode() if isinstance(f, MasterHandshake) else f[0].encode() + f[1]
                    for f in frames)
    whole = _decode_master([data])
    assert whole == frames
    assert _decode_master(_splits(data, cuts)) == whole
    assert _decode_master([data[i : i + 1] for i in range(len(data))]) == whole


@given(
    frames=st.lists(st.one_of(slave_handshakes, slave_acks), max_size=8),
    cuts=st.lists(st.integers(0, 1000), max_size=8),
)
def test_slave_stream_decoding_is_split_insensitive(
    frames: list[SlaveFrame], cuts: list[int]
) -> None:
    data = b"".join(f.encode() for f in frames)
    assert _decode_slave([data]) == frames
    assert _decode_slave(_splits(data, cuts)) == frames
    assert _decode_slave([data[i : i + 1] for i in range(len(data))]) == frames


@given(data=st.binary(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=6))
def test_arbitrary_bytes_give_master_frames_or_protocol_error(
    data: bytes, cuts: list[int]
) -> None:
    with contextlib.suppress(HAProtocolError):
        _decode_master(_splits(data, cuts))


@given(data=st.binary(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=6))
def test_arbitrary_bytes_give_slave_frames_or_protocol_error(
    data: bytes, cuts: list[int]
) -> None:
    with contextlib.suppress(HAProtocolError):
        _decode_slave(_splits(data, cuts))
