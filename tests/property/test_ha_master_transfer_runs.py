"""The master's `next_transfers` (the frames of one write at once) against its naive twin,
`next_transfer` called until the same number of body bytes: the same headers, and the same
state after (where the next frame starts, the last max offset and confirmOffset sent)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ha.frames import SlaveAck, SlaveHandshake, TransferHeader
from ha.master_protocol import MasterConnectionProtocol, StoreView, epoch_label
from store.epoch_cache import EpochCache

REPLICAS = frozenset({1, 2})


@st.composite
def stores(draw: st.DrawFn) -> StoreView:
    file_size = draw(st.sampled_from([64, 100, 1024]))
    max_phy = draw(st.integers(0, 5 * file_size))
    min_phy = draw(st.integers(0, max_phy)) // file_size * file_size
    starts = sorted(draw(st.sets(st.integers(0, max_phy + 50), min_size=1, max_size=5)))
    epochs = sorted(draw(st.sets(st.integers(1, 40), min_size=len(starts),
                                 max_size=len(starts))))
    cache = EpochCache(list(zip(epochs, starts, strict=True)))
    return StoreView(max_phy, min_phy, file_size, cache.entries,
                     draw(st.integers(0, max_phy)))


def connection(store: StoreView, ack: int) -> MasterConnectionProtocol:
    conn = MasterConnectionProtocol("slave", now_ms=0)
    conn.receive(SlaveHandshake(False, False, 2), replica_ids=REPLICAS, store=store)
    conn.handshake_reply(store)
    conn.receive(SlaveAck(ack), replica_ids=REPLICAS, store=store)
    return conn


def state(conn: MasterConnectionProtocol) -> tuple[object, ...]:
    return (conn.next_transfer_from_where, conn.last_master_max_offset,
            conn.last_transfer_time_ms, conn._last_sent_confirm_offset)


@settings(max_examples=300)
@given(store=stores(), batch=st.integers(1, 80), bytes_max=st.integers(1, 400),
       ack_at=st.floats(0, 1), heartbeat_due=st.booleans())
def test_next_transfers_equals_next_transfer_until_bytes_max(
    store: StoreView, batch: int, bytes_max: int, ack_at: float, heartbeat_due: bool,
) -> None:
    ack = min(store.max_phy_offset, store.min_phy_offset + int(
        ack_at * (store.max_phy_offset - store.min_phy_offset)))
    naive, runs = connection(store, ack), connection(store, ack)
    now = 10_000 if heartbeat_due else 0
    for _ in range(30):  # several calls: each goes on where the last stopped
        expected: list[TransferHeader] = []
        total = 0
        while total < bytes_max:
            header = naive.next_transfer(store, now_ms=now, batch_size=batch,
                                         heartbeat_interval_ms=5000)
            if header is None:
                break
            expected.append(header)
            if not header.body_size:
                break
            total += header.body_size
            following = naive.next_transfer_from_where
            # A run stops at the end of the data (a heartbeat due then is the next call's),
            # of a file, or where the epoch label changes.
            assert following is not None
            if following >= store.max_phy_offset or following % store.file_size == 0 or \
                    epoch_label(
                    store.epoch_entries, following) != epoch_label(store.epoch_entries,
                                                                   header.offset):
                break
        got = runs.next_transfers(store, now_ms=now, batch_size=batch,
                                  heartbeat_interval_ms=5000, bytes_max=bytes_max)
        assert got == expected
        assert state(runs) == state(naive)
        if not got:
            break
