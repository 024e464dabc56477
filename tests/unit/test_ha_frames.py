"""HA frames: golden bytes from docs/ha-protocol.md §3.7 and the decoders' refusals."""

from __future__ import annotations

import resource

import pytest

from ha.errors import FrameTooLargeError, HAProtocolError
from ha.frames import (
    MASTER_HANDSHAKE_BODY_BYTES_MAX,
    MasterFrame,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveAck,
    SlaveFrame,
    SlaveFrameDecoder,
    SlaveHandshake,
    TransferFrame,
    TransferHeader,
    encode_slave_ack,
)


def hx(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def decode_master(data: bytes) -> list[MasterFrame | tuple[TransferHeader, bytes]]:
    decoder = MasterFrameDecoder("master")
    decoder.feed(data)
    frames: list[MasterFrame | tuple[TransferHeader, bytes]] = []
    while (frame := decoder.next_frame()) is not None:
        frames.append((frame.header, bytes(frame.body)) if isinstance(frame, TransferFrame)
                      else frame)
    assert decoder.buffered_bytes == 0
    return frames


def decode_slave(data: bytes) -> list[SlaveFrame]:
    decoder = SlaveFrameDecoder("slave")
    decoder.feed(data)
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    return frames


@pytest.mark.parametrize(
    ("frame", "golden"),
    [
        pytest.param(SlaveHandshake(False, False, 2),
                     "00000001 0000 0000 0000000000000002", id="handshake-id-2"),
        pytest.param(SlaveHandshake(True, True, 3),
                     "00000001 0001 0001 0000000000000003", id="handshake-both-flags"),
        pytest.param(SlaveAck(2048), "00000002 0000000000000800", id="ack-2048"),
        pytest.param(SlaveAck(0), "00000002 0000000000000000", id="ack-empty-slave"),
        pytest.param(SlaveAck(5368709124), "00000002 0000000140000004", id="ack-above-4GiB"),
    ],
)
def test_slave_frames_golden(frame: SlaveHandshake | SlaveAck, golden: str) -> None:
    assert frame.encode() == hx(golden)
    assert decode_slave(hx(golden)) == [frame]


def test_encode_slave_ack_is_the_ack_frame() -> None:
    assert encode_slave_ack(2048) == SlaveAck(2048).encode()


@pytest.mark.parametrize(
    ("frame", "golden"),
    [
        pytest.param(
            MasterHandshake(2048, ((1, 0), (2, 1024))),
            "00000001 00000018 0000000000000800 00000002"
            "00000001 0000000000000000 00000002 0000000000000400",
            id="reply-two-epochs",
        ),
        pytest.param(MasterHandshake(0, ()), "00000001 00000000 0000000000000000 FFFFFFFF",
                     id="reply-empty-cache"),
    ],
)
def test_master_handshake_golden(frame: MasterHandshake, golden: str) -> None:
    assert frame.encode() == hx(golden)
    assert decode_master(hx(golden)) == [frame]


@pytest.mark.parametrize(
    ("header", "body", "golden"),
    [
        pytest.param(TransferHeader(0, 2048, 2, 1024, 2048), b"",
                     "00000002 00000000 0000000000000800 00000002 0000000000000400"
                     "0000000000000800", id="heartbeat"),
        pytest.param(TransferHeader(0, -1, 1, 0, 0), b"",
                     "00000002 00000000 FFFFFFFFFFFFFFFF 00000001 0000000000000000"
                     "0000000000000000", id="heartbeat-no-start-position"),
        pytest.param(TransferHeader(4, 5368709120, 3, 4294967296, 5368709124),
                     hx("DEADBEEF"),
                     "00000002 00000004 0000000140000000 00000003 0000000100000000"
                     "0000000140000004 DEADBEEF", id="data-above-4GiB"),
        # Epoch-boundary sequence (§3.7): Java's labelling of the cut batch, then true labelling.
        pytest.param(TransferHeader(1000, 0, 2, 1000, 1100), bytes(1000),
                     "00000002 000003E8 0000000000000000 00000002 00000000000003E8"
                     "000000000000044C" + "00" * 1000, id="java-cut-batch-labelled-next"),
        pytest.param(TransferHeader(1000, 0, 1, 0, 1100), bytes(1000),
                     "00000002 000003E8 0000000000000000 00000001 0000000000000000"
                     "000000000000044C" + "00" * 1000, id="true-labelling"),
        pytest.param(TransferHeader(0, 1000, 2, 1000, 1100), b"",
                     "00000002 00000000 00000000000003E8 00000002 00000000000003E8"
                     "000000000000044C", id="empty-frame-at-boundary"),
    ],
)
def test_transfer_golden(header: TransferHeader, body: bytes, golden: str) -> None:
    assert header.encode() + body == hx(golden)
    assert decode_master(hx(golden)) == [(header, body)]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param("00000000 0000000000000000", "state=0", id="state-ready"),
        pytest.param("00000003 0000000000000000", "state=3", id="state-suspend"),
        pytest.param("FFFFFFFF 0000000000000000", "state=-1", id="state-negative"),
        pytest.param("00000002 FFFFFFFFFFFFFFFF", "max_offset=-1", id="negative-ack"),
        pytest.param("00000001 0002 0000 0000000000000002", "is_sync_from_last_file=2",
                     id="flag-outside-0-1"),
        pytest.param("00000001 0000 FFFF 0000000000000002", "is_async_learner=-1",
                     id="flag-negative"),
        pytest.param("00000001 0000 0000 0000000000000000", "slave_broker_id=0", id="id-zero"),
        pytest.param("00000001 0000 0000 FFFFFFFFFFFFFFFF", "slave_broker_id=-1",
                     id="id-negative"),
    ],
)
def test_slave_decoder_refuses(data: str, message: str) -> None:
    with pytest.raises(HAProtocolError, match=message):
        decode_slave(hx(data))


def test_slave_decoder_waits_for_all_16_handshake_bytes() -> None:
    """Java reads the broker id after only 12 bytes (§14 item 1); we wait for 16."""
    decoder = SlaveFrameDecoder("slave")
    golden = SlaveHandshake(False, False, 2).encode()
    decoder.feed(golden[:12])
    assert decoder.next_frame() is None
    decoder.feed(golden[12:])
    assert decoder.next_frame() == SlaveHandshake(False, False, 2)


def test_slave_decoder_bounds_unread_bytes() -> None:
    decoder = SlaveFrameDecoder("slave", buffer_bytes_max=24)
    decoder.feed(bytes(12))
    with pytest.raises(FrameTooLargeError, match="buffer_bytes_max=24"):
        decoder.feed(bytes(13))


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        pytest.param("00000000 00000000", HAProtocolError, "state=0", id="state-ready"),
        pytest.param("00000004 00000000", HAProtocolError, "state=4", id="state-shutdown"),
        pytest.param("00000002 FFFFFFFF", HAProtocolError, "body_size=-1", id="negative-body"),
        pytest.param("00000002 7FFFFFFF", FrameTooLargeError, "body_size=2147483647",
                     id="body-above-limit"),
        pytest.param("00000001 FFFFFFF4", HAProtocolError, "body_size=-12",
                     id="handshake-negative-body"),
        pytest.param("00000001 0000000D", HAProtocolError, "body_size=13",
                     id="handshake-body-not-multiple-of-12"),
        pytest.param(f"00000001 {MASTER_HANDSHAKE_BODY_BYTES_MAX + 12:08X}", FrameTooLargeError,
                     "10000 entries", id="handshake-too-many-entries"),
        pytest.param("00000001 00000000 FFFFFFFFFFFFFFFF FFFFFFFF", HAProtocolError,
                     "offset=-1", id="handshake-negative-offset"),
        pytest.param("00000001 00000000 0000000000000000 00000001", HAProtocolError,
                     "header epoch=1 but the last entry's epoch is -1",
                     id="handshake-epoch-without-entries"),
        pytest.param("00000001 00000018 0000000000000800 00000001"
                     "00000002 0000000000000000 00000001 0000000000000400", HAProtocolError,
                     "epochs must increase", id="handshake-epochs-decreasing"),
        pytest.param("00000001 00000018 0000000000000800 00000002"
                     "00000001 0000000000000400 00000002 0000000000000000", HAProtocolError,
                     "starts must not decrease", id="handshake-starts-decreasing"),
        pytest.param("00000001 0000000C 0000000000000800 FFFFFFFF"
                     "FFFFFFFF 0000000000000000", HAProtocolError, "negative value",
                     id="handshake-negative-epoch"),
        pytest.param("00000002 00000004 FFFFFFFFFFFFFFFF 00000001 0000000000000000"
                     "0000000000000000", HAProtocolError, "offset=-1",
                     id="data-at-offset-minus-1"),
        pytest.param("00000002 00000000 0000000000000000 FFFFFFFF 0000000000000000"
                     "0000000000000000", HAProtocolError, "epoch=-1", id="negative-epoch"),
        pytest.param("00000002 00000000 0000000000000000 00000001 FFFFFFFFFFFFFFFF"
                     "0000000000000000", HAProtocolError, "epoch_start_offset=-1",
                     id="negative-epoch-start"),
        pytest.param("00000002 00000000 0000000000000000 00000001 0000000000000000"
                     "FFFFFFFFFFFFFFFF", HAProtocolError, "confirm_offset=-1",
                     id="negative-confirm"),
    ],
)
def test_master_decoder_refuses(data: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        decode_master(hx(data))


def test_master_decoder_checks_body_size_before_buffering_the_body() -> None:
    decoder = MasterFrameDecoder("master", body_bytes_max=1024)
    decoder.feed(hx("00000002 00000401"))  # 8 bytes announce 1025 body bytes
    with pytest.raises(FrameTooLargeError, match="body_bytes_max=1024"):
        decoder.next_frame()


def test_transfer_body_view_is_released_by_the_next_feed() -> None:
    decoder = MasterFrameDecoder("master")
    decoder.feed(TransferHeader(2, 0, 1, 0, 2).encode() + b"ab")
    frame = decoder.next_frame()
    assert isinstance(frame, TransferFrame)
    assert bytes(frame.body) == b"ab"
    decoder.feed(b"")
    with pytest.raises(ValueError, match="released"):
        bytes(frame.body)


def test_growing_the_read_buffer_touches_none_of_its_pages() -> None:
    """A slave's pump thread grows the buffer with the GIL held: its new pages must be first
    touched by the read into it (without the GIL), not zeroed by the growth (ha/frames.py
    `_Buffer`). A bytearray of 4 MiB takes a fault per page here."""
    decoder = MasterFrameDecoder("master")
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    room = decoder.read_buffer(4 * 1024 * 1024)
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults
    assert len(room) == 4 * 1024 * 1024
    assert faults < 16, f"{faults} page faults growing the buffer (1024 pages)"
    room.release()


def test_a_partial_frame_survives_the_buffer_growing() -> None:
    decoder = MasterFrameDecoder("master")
    first = TransferHeader(3, 0, 1, 0, 0).encode() + b"abc"
    second = TransferHeader(70_000, 3, 1, 0, 0).encode() + bytes(range(256)) * 273 + b"x" * 112
    decoder.feed(first + second[:100])  # the second frame's first 100 bytes wait unread
    frame = decoder.next_frame()
    assert isinstance(frame, TransferFrame)
    assert bytes(frame.body) == b"abc"
    assert decoder.next_frame() is None
    with decoder.read_buffer(len(second)) as room:  # more than the buffer holds: it grows
        room[: len(second) - 100] = second[100:]
    decoder.received(len(second) - 100)
    frame = decoder.next_frame()
    assert isinstance(frame, TransferFrame)
    assert frame.header.offset == 3
    assert bytes(frame.body) == second[36:]
    assert decoder.buffered_bytes == 0


def test_handshake_reply_encoder_refuses_more_entries_than_the_decoder_takes() -> None:
    entries = tuple((epoch, epoch) for epoch in range(10_001))
    with pytest.raises(ValueError, match="10001 epoch entries"):
        MasterHandshake(20_000, entries).encode()
