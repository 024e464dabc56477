"""The master's side of one HA connection (docs/ha-protocol.md §7): what to send to one slave, and
what its frames mean. A pure core: the shell (connection.py) feeds it decoded slave frames and a
`StoreView`, and carries out what it returns.

Invariants:
- A handshake is accepted only from a broker id in the replica set, and the id never changes on
  a connection (docs/reliability.md §5, M16).
- Nothing is shipped before the slave's first ACK; data starts at the slave's ACK offset (or,
  for an empty slave, at the master's min offset / last file, §7.2).
- A batch is at most `ha_transfer_batch_size` bytes and never crosses a commitlog file or an
  epoch boundary; it is labelled with the epoch that wrote its bytes (true labelling, §7.3,
  which a Java slave accepts). A new epoch appended while the connection runs is picked up on
  the next batch (5.5.0 behaviour, §14 item 12).
- An idle connection sends an empty TRANSFER frame (a heartbeat) after
  `haSendHeartbeatInterval`, and also when confirmOffset moved past the last value sent and
  nothing was written for `confirm_idle_ms` (0: at once; under load the next data frame
  carries it instead).
- Acks never go backwards, and never exceed the bytes sent on this connection (the first ack:
  the master's max offset) (RocketMQ #1155, M6); a violation closes the connection.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ha.errors import HandshakeRefusedError, HAProtocolError
from ha.frames import MasterHandshake, SlaveAck, SlaveFrame, SlaveHandshake, TransferHeader
from ha.states import HAConnectionState
from store.epoch_cache import EpochEntry


@dataclass(frozen=True, slots=True)
class StoreView:
    """The master store at one instant, as a connection needs it."""

    max_phy_offset: int
    min_phy_offset: int
    file_size: int  # mappedFileSizeCommitLog
    epoch_entries: tuple[EpochEntry, ...]  # the master's epoch cache (ends derived)
    confirm_offset: int


@dataclass(frozen=True, slots=True)
class Acked:
    """The slave acked `max_offset` (the service updates the SyncStateSet and waiters)."""

    broker_id: int
    max_offset: int
    is_async_learner: bool


def epoch_label(entries: tuple[EpochEntry, ...], phy_offset: int) -> EpochEntry:
    """The epoch entry that wrote `phy_offset`: the one containing it; the last entry at or after
    its start; the first entry for an offset below every start (§7.2's recommendation). Raises
    `ValueError` for an empty cache (a master always has an entry)."""
    if not entries:
        raise ValueError("master has no epoch entry: cannot label a transfer")
    for entry in entries:
        if entry.contains(phy_offset):
            return entry
    if phy_offset >= entries[-1].start_offset:
        return entries[-1]
    return entries[0]


class MasterConnectionProtocol:
    """One slave's connection on the master. Feed frames with `receive`; ask `next_transfer`
    what to send; report writes with `wrote` (for heartbeat timing)."""

    __slots__ = (
        "_confirm_idle_ms",
        "_handshake_reply_due",
        "_last_sent_confirm_offset",
        "_last_write_ms",
        "is_async_learner",
        "is_sync_from_last_file",
        "last_master_max_offset",
        "last_transfer_time_ms",
        "next_transfer_from_where",
        "peer",
        "slave_ack_offset",
        "slave_broker_id",
        "slave_request_offset",
        "state",
        "transfer_start_offset",
    )

    def __init__(self, peer: str, *, now_ms: int, confirm_idle_ms: int = 0) -> None:
        self.peer = peer
        self._confirm_idle_ms = confirm_idle_ms
        self.state = HAConnectionState.HANDSHAKE
        self.slave_broker_id: int | None = None
        self.is_sync_from_last_file = False
        self.is_async_learner = False
        self.slave_request_offset: int | None = None  # first ack of this connection
        self.slave_ack_offset: int | None = None
        self.next_transfer_from_where: int | None = None
        self.transfer_start_offset: int | None = None  # where this connection began shipping
        self.last_master_max_offset = -1
        self.last_transfer_time_ms = now_ms
        self._handshake_reply_due = False
        self._last_write_ms = now_ms
        self._last_sent_confirm_offset = -1

    def receive(
        self, frame: SlaveFrame, *, replica_ids: Collection[int], store: StoreView
    ) -> Acked | None:
        """Apply one slave frame; returns `Acked` for an ACK. Raises `HAProtocolError` (close)."""
        if isinstance(frame, SlaveHandshake):
            self._handshake(frame, replica_ids)
            return None
        return self._ack(frame, store)

    def _handshake(self, frame: SlaveHandshake, replica_ids: Collection[int]) -> None:
        if frame.slave_broker_id not in replica_ids:
            raise HandshakeRefusedError(
                f"HANDSHAKE from {self.peer}: slave_broker_id={frame.slave_broker_id} is not in "
                f"the replica set {sorted(replica_ids)}"
            )
        if self.slave_broker_id is not None and frame.slave_broker_id != self.slave_broker_id:
            raise HAProtocolError(
                f"HANDSHAKE from {self.peer}: slave_broker_id={frame.slave_broker_id} after "
                f"{self.slave_broker_id} on the same connection"
            )
        self.slave_broker_id = frame.slave_broker_id
        # A flag can be switched on by a handshake, never off again (§7.4).
        self.is_sync_from_last_file |= frame.is_sync_from_last_file
        self.is_async_learner |= frame.is_async_learner
        self.state = HAConnectionState.HANDSHAKE
        self._handshake_reply_due = True

    def _ack(self, frame: SlaveAck, store: StoreView) -> Acked:
        if self.slave_broker_id is None:
            raise HAProtocolError(f"ACK from {self.peer} before its HANDSHAKE")
        ack = frame.max_offset
        if self.slave_ack_offset is not None and ack < self.slave_ack_offset:
            raise HAProtocolError(
                f"ACK from {self.peer} (broker {self.slave_broker_id}): max_offset={ack} below "
                f"its previous ack {self.slave_ack_offset}"
            )
        if self.next_transfer_from_where is None:
            limit = store.max_phy_offset if self.slave_request_offset is None else \
                self.slave_request_offset
        else:
            limit = self.next_transfer_from_where
        if ack > limit:
            raise HAProtocolError(
                f"ACK from {self.peer} (broker {self.slave_broker_id}): max_offset={ack} beyond "
                f"the {limit} bytes this connection can vouch for (RocketMQ #1155)"
            )
        if self.slave_request_offset is None:
            self.slave_request_offset = ack
        self.slave_ack_offset = ack
        self.state = HAConnectionState.TRANSFER
        return Acked(self.slave_broker_id, ack, self.is_async_learner)

    def handshake_reply(self, store: StoreView) -> MasterHandshake | None:
        """The reply to send now, or None. Handshakes received before it collapse into one."""
        if not self._handshake_reply_due:
            return None
        self._handshake_reply_due = False
        return MasterHandshake(
            store.max_phy_offset, tuple((e.epoch, e.start_offset) for e in store.epoch_entries)
        )

    def wrote(self, now_ms: int) -> None:
        self._last_write_ms = now_ms

    def _start_offset(self, store: StoreView) -> int:
        request = self.slave_request_offset
        assert request is not None
        if request != 0:
            return request
        if self.is_sync_from_last_file:
            return max(0, store.max_phy_offset - store.max_phy_offset % store.file_size)
        return store.min_phy_offset

    def next_transfer(
        self, store: StoreView, *, now_ms: int, batch_size: int, heartbeat_interval_ms: int
    ) -> TransferHeader | None:
        """The next TRANSFER header to send (data `[offset, offset + body_size)` follows it), a
        heartbeat when idle for `heartbeat_interval_ms`, or None (nothing to send: wait for new
        data or the heartbeat time). Raises `HAProtocolError` when the slave needs bytes the
        master no longer has (deleted by retention)."""
        if self.state is not HAConnectionState.TRANSFER or self.slave_request_offset is None:
            return None
        if self.next_transfer_from_where is None:
            self.next_transfer_from_where = self.transfer_start_offset = \
                self._start_offset(store)
        where = self.next_transfer_from_where
        if where < store.min_phy_offset:
            raise HAProtocolError(
                f"slave {self.slave_broker_id} at {self.peer} needs offset {where}, below the "
                f"master's min offset {store.min_phy_offset} (files deleted)"
            )
        file_end = (where // store.file_size + 1) * store.file_size
        size = min(batch_size, max(0, min(store.max_phy_offset, file_end) - where))
        label = epoch_label(store.epoch_entries, where)
        if label.end_offset > where:
            size = min(size, label.end_offset - where)  # never cross an epoch boundary
        if size == 0:
            # Idle: a heartbeat when due, or when confirmOffset moved since the last frame and
            # nothing was written for confirm_idle_ms (the slave's consumers would otherwise
            # wait for the next heartbeat; a write meanwhile means data is flowing, and the
            # next data frame carries it).
            idle_ms = now_ms - self._last_write_ms
            if idle_ms < heartbeat_interval_ms and (
                    store.confirm_offset <= self._last_sent_confirm_offset
                    or idle_ms < self._confirm_idle_ms):
                return None
            self._last_sent_confirm_offset = store.confirm_offset
            return TransferHeader(0, where, label.epoch, label.start_offset,
                                  store.confirm_offset)
        self.next_transfer_from_where = where + size
        self.last_master_max_offset = store.max_phy_offset
        self.last_transfer_time_ms = now_ms
        self._last_sent_confirm_offset = store.confirm_offset
        return TransferHeader(size, where, label.epoch, label.start_offset, store.confirm_offset)

    def next_transfers(
        self, store: StoreView, *, now_ms: int, batch_size: int, heartbeat_interval_ms: int,
        bytes_max: int,
    ) -> list[TransferHeader]:
        """What `next_transfer` called until `bytes_max` body bytes gave, as one call: [] for
        None, one heartbeat, or TRANSFER headers of consecutive data (the first as
        `next_transfer` gives it, the others the same cut of the rest of its file and epoch;
        the next call goes on from there, also into the next file or epoch)."""
        first = self.next_transfer(store, now_ms=now_ms, batch_size=batch_size,
                                   heartbeat_interval_ms=heartbeat_interval_ms)
        if first is None:
            return []
        headers = [first]
        if not first.body_size:
            return headers
        where = first.offset + first.body_size
        file_end = (first.offset // store.file_size + 1) * store.file_size
        limit = min(store.max_phy_offset, file_end)
        label_end = epoch_label(store.epoch_entries, first.offset).end_offset
        if label_end > first.offset:
            limit = min(limit, label_end)
        total = first.body_size
        epoch, start, confirm = first.epoch, first.epoch_start_offset, first.confirm_offset
        while total < bytes_max and where < limit:
            size = min(batch_size, limit - where)
            headers.append(TransferHeader(size, where, epoch, start, confirm))
            where += size
            total += size
        self.next_transfer_from_where = where
        return headers

    def caught_up(self, store: StoreView) -> bool:
        """Nothing left to send (§7.3 step 3: the slave counts as caught up now)."""
        return (self.next_transfer_from_where is not None
                and self.next_transfer_from_where >= store.max_phy_offset)
