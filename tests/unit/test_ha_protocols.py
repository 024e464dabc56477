"""The master and slave protocol cores, alone and wired to each other through real frames."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ha.errors import HandshakeRefusedError, HAProtocolError, NoConsistentPointError
from ha.frames import (
    MasterFrame,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveAck,
    SlaveFrameDecoder,
    SlaveHandshake,
    TransferFrame,
    TransferHeader,
)
from ha.master_protocol import Acked, MasterConnectionProtocol, StoreView, epoch_label
from ha.slave_protocol import (
    Append,
    AppendEpoch,
    AppendRun,
    Send,
    SetConfirmOffset,
    SlaveEffect,
    SlaveProtocol,
    TruncateTo,
)
from ha.states import HAConnectionState
from store.epoch_cache import EpochCache

REPLICAS = frozenset({1, 2, 3})


def cache(drawing: str) -> EpochCache:
    """`"1:0 2:100"` -> the epoch cache with those (epoch, start) pairs."""
    pairs = []
    for item in drawing.split():
        epoch, _, start = item.partition(":")
        pairs.append((int(epoch), int(start)))
    return EpochCache(pairs)


def view(max_phy: int, epochs: str = "1:0", *, min_phy: int = 0, file_size: int = 1024,
         confirm: int | None = None) -> StoreView:
    return StoreView(max_phy, min_phy, file_size, cache(epochs).entries,
                     max_phy if confirm is None else confirm)


def transferring(store: StoreView, ack: int = 0) -> MasterConnectionProtocol:
    conn = MasterConnectionProtocol("slave", now_ms=0)
    conn.receive(SlaveHandshake(False, False, 2), replica_ids=REPLICAS, store=store)
    assert conn.handshake_reply(store) is not None
    conn.receive(SlaveAck(ack), replica_ids=REPLICAS, store=store)
    return conn


def batches(conn: MasterConnectionProtocol, store: StoreView, *, batch: int = 300
            ) -> list[TransferHeader]:
    out = []
    while (header := conn.next_transfer(store, now_ms=0, batch_size=batch,
                                        heartbeat_interval_ms=5000)) is not None:
        out.append(header)
    return out


# ------------------------------------------------------------------------------ master


def test_master_refuses_a_handshake_from_outside_the_replica_set() -> None:
    conn = MasterConnectionProtocol("rogue", now_ms=0)
    with pytest.raises(HandshakeRefusedError, match="slave_broker_id=9"):
        conn.receive(SlaveHandshake(False, False, 9), replica_ids=REPLICAS, store=view(0))


def test_master_refuses_an_ack_before_the_handshake() -> None:
    conn = MasterConnectionProtocol("slave", now_ms=0)
    with pytest.raises(HAProtocolError, match="before its HANDSHAKE"):
        conn.receive(SlaveAck(0), replica_ids=REPLICAS, store=view(0))


def test_master_clamps_acks_to_the_bytes_sent_1155() -> None:
    store = view(1000)
    conn = transferring(store)
    assert [(h.offset, h.body_size) for h in batches(conn, store)] == \
        [(0, 300), (300, 300), (600, 300), (900, 100)]
    conn.receive(SlaveAck(1000), replica_ids=REPLICAS, store=store)
    with pytest.raises(HAProtocolError, match="#1155"):
        conn.receive(SlaveAck(1001), replica_ids=REPLICAS, store=store)


def test_master_refuses_a_first_ack_beyond_its_max_offset() -> None:
    conn = MasterConnectionProtocol("slave", now_ms=0)
    conn.receive(SlaveHandshake(False, False, 2), replica_ids=REPLICAS, store=view(100))
    with pytest.raises(HAProtocolError, match="max_offset=101"):
        conn.receive(SlaveAck(101), replica_ids=REPLICAS, store=view(100))


def test_master_refuses_a_decreasing_ack() -> None:
    store = view(1000)
    conn = transferring(store, ack=500)
    with pytest.raises(HAProtocolError, match="below its previous ack 500"):
        conn.receive(SlaveAck(400), replica_ids=REPLICAS, store=store)


def test_master_ack_is_reported() -> None:
    store = view(1000)
    conn = MasterConnectionProtocol("slave", now_ms=0)
    conn.receive(SlaveHandshake(False, True, 3), replica_ids=REPLICAS, store=store)
    assert conn.receive(SlaveAck(700), replica_ids=REPLICAS, store=store) == Acked(3, 700, True)


def test_master_sends_nothing_before_the_first_ack() -> None:
    store = view(1000)
    conn = MasterConnectionProtocol("slave", now_ms=0)
    conn.receive(SlaveHandshake(False, False, 2), replica_ids=REPLICAS, store=store)
    assert conn.next_transfer(store, now_ms=10_000, batch_size=300,
                              heartbeat_interval_ms=5000) is None


def test_repeated_handshakes_collapse_into_one_reply() -> None:
    store = view(2048, "1:0 2:1024")
    conn = MasterConnectionProtocol("slave", now_ms=0)
    for _ in range(3):
        conn.receive(SlaveHandshake(False, False, 2), replica_ids=REPLICAS, store=store)
    assert conn.handshake_reply(store) == MasterHandshake(2048, ((1, 0), (2, 1024)))
    assert conn.handshake_reply(store) is None


@pytest.mark.parametrize(
    ("epochs", "expected"),
    [
        # True labelling (§7.3): the batch [0, 1000) carries epoch 1, not Java's "next" label.
        pytest.param("1:0 2:1000", [(0, 300, 1), (300, 300, 1), (600, 300, 1), (900, 100, 1),
                                    (1000, 100, 2)], id="cut-at-epoch-boundary"),
        pytest.param("1:0 2:300 3:300 4:400", [(0, 300, 1), (300, 100, 3), (400, 300, 4),
                                               (700, 300, 4), (1000, 100, 4)],
                     id="empty-epoch-skipped"),
    ],
)
def test_master_batches_never_cross_an_epoch(
    epochs: str, expected: list[tuple[int, int, int]]
) -> None:
    store = view(1100, epochs, file_size=4096)
    conn = transferring(store)
    assert [(h.offset, h.body_size, h.epoch) for h in batches(conn, store)] == expected


def test_master_batches_never_cross_a_file() -> None:
    store = view(1500, file_size=1024)
    conn = transferring(store)
    assert [(h.offset, h.body_size) for h in batches(conn, store, batch=800)] == \
        [(0, 800), (800, 224), (1024, 476)]


def test_master_starts_from_the_last_file_for_sync_from_last_file() -> None:
    store = view(2500, file_size=1024)
    conn = MasterConnectionProtocol("slave", now_ms=0)
    conn.receive(SlaveHandshake(True, False, 2), replica_ids=REPLICAS, store=store)
    conn.receive(SlaveAck(0), replica_ids=REPLICAS, store=store)
    assert batches(conn, store, batch=4096)[0].offset == 2048


def test_master_starts_at_its_min_offset_for_an_empty_slave() -> None:
    store = view(2500, min_phy=1024, file_size=1024)
    conn = transferring(store)
    assert batches(conn, store, batch=4096)[0].offset == 1024


def test_master_refuses_a_slave_behind_its_min_offset() -> None:
    store = view(2500, min_phy=2048, file_size=1024)
    conn = transferring(store, ack=0)
    conn.next_transfer_from_where = 100
    with pytest.raises(HAProtocolError, match="below the master's min offset 2048"):
        conn.next_transfer(store, now_ms=0, batch_size=100, heartbeat_interval_ms=5000)


def test_master_heartbeat_when_idle() -> None:
    store = view(100, "1:0 2:50", confirm=80)
    conn = transferring(store, ack=100)
    # confirmOffset 80 was never sent: an empty frame carries it at once.
    assert conn.next_transfer(store, now_ms=1, batch_size=100, heartbeat_interval_ms=5000) \
        == TransferHeader(0, 100, 2, 50, 80)
    conn.wrote(1)
    assert conn.next_transfer(store, now_ms=5000, batch_size=100,
                              heartbeat_interval_ms=5000) is None
    assert conn.next_transfer(store, now_ms=5001, batch_size=100, heartbeat_interval_ms=5000) \
        == TransferHeader(0, 100, 2, 50, 80)
    assert conn.caught_up(store)


def test_master_ships_a_new_confirm_offset_without_waiting_for_the_heartbeat() -> None:
    conn = transferring(view(100, confirm=80), ack=100)
    conn.next_transfer(view(100, confirm=80), now_ms=1, batch_size=100, heartbeat_interval_ms=5000)
    conn.wrote(1)
    assert conn.next_transfer(view(100, confirm=100), now_ms=2, batch_size=100,
                              heartbeat_interval_ms=5000) == TransferHeader(0, 100, 1, 0, 100)


def test_master_ships_a_moved_confirm_offset_once_the_connection_is_idle() -> None:
    """With `confirm_idle_ms`, a moved confirmOffset waits for the connection to have written
    nothing for that long (a data frame meanwhile carries it)."""
    conn = MasterConnectionProtocol("slave", now_ms=0, confirm_idle_ms=2)
    conn.receive(SlaveHandshake(False, False, 2), replica_ids=REPLICAS, store=view(100))
    assert conn.handshake_reply(view(100)) is not None
    conn.receive(SlaveAck(100), replica_ids=REPLICAS, store=view(100))
    assert conn.next_transfer(view(100, confirm=100), now_ms=10, batch_size=100,
                              heartbeat_interval_ms=5000) == TransferHeader(0, 100, 1, 0, 100)
    conn.wrote(10)
    assert conn.next_transfer(view(150, confirm=120), now_ms=11, batch_size=100,
                              heartbeat_interval_ms=5000) == TransferHeader(50, 100, 1, 0, 120)
    conn.wrote(11)
    moved = view(150, confirm=150)
    assert conn.next_transfer(moved, now_ms=12, batch_size=100, heartbeat_interval_ms=5000) \
        is None
    assert conn.next_transfer(moved, now_ms=13, batch_size=100, heartbeat_interval_ms=5000) \
        == TransferHeader(0, 150, 1, 0, 150)
    conn.wrote(13)
    assert conn.next_transfer(moved, now_ms=20, batch_size=100, heartbeat_interval_ms=5000) \
        is None


def test_master_picks_up_a_new_epoch_on_a_live_connection() -> None:
    """5.5.0 behaviour (§14 item 12): data of a later epoch carries the new label at once."""
    conn = transferring(view(100), ack=100)
    store = view(200, "1:0 2:100")
    assert [(h.offset, h.epoch, h.epoch_start_offset) for h in batches(conn, store)] == \
        [(100, 2, 100)]


def test_epoch_label_below_the_first_entry_uses_the_first() -> None:
    entries = EpochCache([(3, 500), (4, 900)]).entries
    assert epoch_label(entries, 0).epoch == 3
    assert epoch_label(entries, 950).epoch == 4


# ------------------------------------------------------------------------------ slave


def slave(local_max: int = 0, epochs: str = "", confirm: int = 0) -> SlaveProtocol:
    proto = SlaveProtocol("master", slave_broker_id=2)
    effects = proto.connected(local_max_phy_offset=local_max, local_epochs=cache(epochs),
                              confirm_offset=confirm)
    assert effects == [Send(SlaveHandshake(False, False, 2).encode())]
    return proto


def transfer(header: TransferHeader, body: bytes = b"") -> TransferFrame:
    return TransferFrame(header, memoryview(body))


@pytest.mark.parametrize(
    ("local", "local_max", "master", "master_max", "point"),
    [
        pytest.param("1:0 2:100", 300, ((1, 0), (2, 100)), 250, 250, id="master-shorter"),
        pytest.param("1:0 2:100", 300, ((1, 0), (3, 100)), 400, 100, id="diverged-at-2"),
        pytest.param("1:0", 500, ((1, 0), (2, 300)), 900, 300, id="old-master-tail"),
    ],
)
def test_slave_truncates_to_the_consistent_point(
    local: str, local_max: int, master: tuple[tuple[int, int], ...], master_max: int, point: int
) -> None:
    proto = slave(local_max, local)
    assert proto.receive(MasterHandshake(master_max, master)) == [TruncateTo(point, False)]
    assert proto.state is HAConnectionState.HANDSHAKE  # nothing reported before the cut
    assert proto.truncated(point) == [Send(SlaveAck(point).encode())]
    assert proto.state.name == "TRANSFER"


def test_slave_reports_its_own_end_when_the_point_is_beyond_it() -> None:
    """§6 step 7 edge case: report min(point, local end), not the point."""
    proto = slave(800, "1:0 2:1000")
    assert proto.receive(MasterHandshake(1500, ((1, 0), (2, 1000)))) == [TruncateTo(1500, False)]
    assert proto.truncated(1500) == [Send(SlaveAck(800).encode())]


def test_slave_without_common_epoch_truncates_nothing() -> None:
    proto = slave(100, "1:0")
    with pytest.raises(NoConsistentPointError, match="no common epoch"):
        proto.receive(MasterHandshake(50, ((2, 0),)))


def test_slave_with_an_empty_epoch_cache_resumes_at_its_end() -> None:
    proto = slave(0, "")
    assert proto.receive(MasterHandshake(0, ())) == [Send(SlaveAck(0).encode())]


def test_slave_flags_a_cut_below_its_confirm_offset() -> None:
    proto = slave(500, "1:0", confirm=400)
    assert proto.receive(MasterHandshake(900, ((1, 0), (2, 300)))) == [TruncateTo(300, True)]


def test_slave_appends_acks_and_confirms() -> None:
    proto = slave(0, "")
    proto.receive(MasterHandshake(0, ()))
    effects = proto.receive(transfer(TransferHeader(4, 0, 1, 0, 2), b"abcd"))
    assert [type(e) for e in effects] == [AppendEpoch, Append, SetConfirmOffset, Send]
    assert effects[0] == AppendEpoch(1, 0)
    assert effects[2] == SetConfirmOffset(2)
    assert effects[3] == Send(SlaveAck(4).encode())
    # A heartbeat: same epoch, nothing appended, confirm moves up to the local end only.
    assert proto.receive(transfer(TransferHeader(0, 4, 1, 0, 9))) == [SetConfirmOffset(4)]


def test_slave_accepts_javas_next_epoch_label_for_a_cut_batch() -> None:
    proto = slave(0, "")
    proto.receive(MasterHandshake(0, ()))
    first = proto.receive(transfer(TransferHeader(3, 0, 2, 3, 3), b"abc"))
    assert first[0] == AppendEpoch(2, 3)
    second = proto.receive(transfer(TransferHeader(2, 3, 2, 3, 5), b"de"))
    assert not any(isinstance(e, AppendEpoch) for e in second)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        pytest.param(TransferHeader(0, 99, 2, 0, 0), "offset=99 but the local commitlog ends",
                     id="offset-not-local-end"),
        pytest.param(TransferHeader(0, 100, 1, 0, 0), "goes back", id="epoch-backwards"),
        pytest.param(TransferHeader(0, 100, 5, 10, 0), "before the local last epoch",
                     id="epoch-start-backwards"),
    ],
)
def test_slave_refuses_bad_transfers(header: TransferHeader, message: str) -> None:
    proto = slave(100, "1:0 2:50")
    proto.receive(MasterHandshake(100, ((1, 0), (2, 50))))
    proto.truncated(100)
    with pytest.raises(HAProtocolError, match=message):
        proto.receive(transfer(header))


def test_slave_refuses_a_transfer_during_the_handshake() -> None:
    proto = slave()
    with pytest.raises(HAProtocolError, match="in state HANDSHAKE"):
        proto.receive(transfer(TransferHeader(0, 0, 1, 0, 0)))


def test_slave_refuses_a_second_handshake_reply_in_transfer() -> None:
    proto = slave()
    proto.receive(MasterHandshake(0, ()))
    with pytest.raises(HAProtocolError, match="in state TRANSFER"):
        proto.receive(MasterHandshake(0, ()))


def test_slave_confirm_never_goes_back() -> None:
    proto = slave(0, "")
    proto.receive(MasterHandshake(0, ()))
    proto.receive(transfer(TransferHeader(4, 0, 1, 0, 4), b"abcd"))
    assert proto.receive(transfer(TransferHeader(0, 4, 1, 0, 2))) == []


# ------------------------------------------------------------------------------ both


@dataclass
class Node:
    """A broker's log in memory: bytes and epoch entries."""

    log: bytearray = field(default_factory=bytearray)
    epochs: EpochCache = field(default_factory=EpochCache)
    confirm: int = 0


def replicate(master: Node, follower: Node, *, batch: int, file_size: int = 1 << 20,
              write_bytes: int | None = None) -> int:
    """Run both cores over real frames until the slave has caught up; returns frames sent.
    `write_bytes`: the master gives the frames of up to that many body bytes at once
    (`next_transfers`) and the slave applies what one feed decodes together
    (`receive_transfers`), as the shells do; None: a frame at a time."""
    m_dec, s_dec = SlaveFrameDecoder("slave"), MasterFrameDecoder("master")
    proto = SlaveProtocol("master", slave_broker_id=2)
    conn = MasterConnectionProtocol("slave", now_ms=0)

    def store() -> StoreView:
        return StoreView(len(master.log), 0, file_size, master.epochs.entries, len(master.log))

    def to_master(data: bytes) -> None:
        m_dec.feed(data)
        while (frame := m_dec.next_frame()) is not None:
            conn.receive(frame, replica_ids=REPLICAS, store=store())

    def carry_out(effects: list[SlaveEffect]) -> None:
        for effect in effects:
            match effect:
                case Send(data=data):
                    to_master(data)
                case TruncateTo(phy_offset=point):
                    del follower.log[point:]
                    follower.epochs = follower.epochs.truncate_suffix_by_offset(point)
                    carry_out(proto.truncated(point))
                case AppendEpoch(epoch=epoch, start_offset=start):
                    follower.epochs = follower.epochs.append(epoch, start)
                case Append(phy_offset=offset, body=body):
                    assert offset == len(follower.log)
                    follower.log += body
                case AppendRun(phy_offset=offset, bodies=bodies):
                    assert offset == len(follower.log)
                    for body in bodies:
                        follower.log += body
                case SetConfirmOffset(confirm_offset=confirm):
                    follower.confirm = confirm

    carry_out(proto.connected(local_max_phy_offset=len(follower.log),
                              local_epochs=follower.epochs, confirm_offset=follower.confirm))
    reply = conn.handshake_reply(store())
    assert reply is not None
    s_dec.feed(reply.encode())
    frames = 0
    while True:
        decoded: list[MasterFrame] = []
        while (frame := s_dec.next_frame()) is not None:
            decoded.append(frame)
        if write_bytes is not None and proto.state is HAConnectionState.TRANSFER and \
                all(isinstance(frame, TransferFrame) for frame in decoded):
            carry_out(proto.receive_transfers(
                [frame for frame in decoded if isinstance(frame, TransferFrame)]))
        else:
            for frame in decoded:
                carry_out(proto.receive(frame))
        if write_bytes is None:
            header = conn.next_transfer(store(), now_ms=0, batch_size=batch,
                                        heartbeat_interval_ms=1 << 40)
            headers = [] if header is None else [header]
        else:
            headers = conn.next_transfers(store(), now_ms=0, batch_size=batch,
                                          heartbeat_interval_ms=1 << 40, bytes_max=write_bytes)
        if not headers:
            return frames
        frames += len(headers)
        s_dec.feed(b"".join(header.encode() + bytes(master.log[header.offset:
                                                               header.offset + header.body_size])
                            for header in headers))


def test_two_cores_replicate_a_log_with_three_epochs() -> None:
    master = Node(bytearray(range(256)) * 10, EpochCache([(1, 0), (2, 700), (4, 1900)]))
    follower = Node()
    replicate(master, follower, batch=128)
    assert follower.log == master.log
    assert follower.epochs == master.epochs
    assert follower.confirm == len(master.log)


def test_two_cores_replicate_a_write_of_frames_at_a_time_across_files_and_epochs() -> None:
    master = Node(bytearray(range(256)) * 10, EpochCache([(1, 0), (2, 700), (4, 1900)]))
    follower = Node()
    frames = replicate(master, follower, batch=128, file_size=1000, write_bytes=600)
    assert follower.log == master.log
    assert follower.epochs == master.epochs
    assert follower.confirm == len(master.log)
    # Cut at files (1000, 2000) and epochs (700, 1900) as frame by frame: the same frames.
    assert frames == replicate(master, Node(), batch=128, file_size=1000)


def test_two_cores_cut_a_divergent_tail_and_catch_up() -> None:
    common = bytes(range(200)) * 3
    master = Node(bytearray(common + b"M" * 500), EpochCache([(1, 0), (3, 600)]))
    old_master = Node(bytearray(common + b"S" * 300), EpochCache([(1, 0), (2, 600)]), 600)
    replicate(master, old_master, batch=64)
    assert old_master.log == master.log
    assert old_master.epochs == master.epochs
