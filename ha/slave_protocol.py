"""The slave's side of the HA connection (docs/ha-protocol.md §5, §6): handshake, truncation to the
consistent point, receiving transfers, acknowledging. A pure core: the shell (client.py) feeds
it decoded master frames and carries out the effects it returns, **in order**, stopping at the
first failure (then closes and reconnects).

Invariants:
- Durable order of a truncation: the shell cuts the commitlog (zeroed, fsynced), then rewrites
  the epoch file, and only then calls `truncated()`, which reports the new offset.
- An ACK follows the `Append` it covers: the slave acknowledges only bytes it has appended.
- Epoch entries from TRANSFER headers only move forward: an epoch below the last local one, or
  a start offset before the last local start, closes the connection. Java's label of a cut
  batch (the next epoch, §7.3) and true labelling are both accepted.
- confirm_offset never goes backwards and never passes the local end.
- `current_received_epoch` is reset on every connection (§5.1's recommendation; compatible).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ha.errors import HAProtocolError, NoConsistentPointError
from ha.frames import MasterFrame, MasterHandshake, SlaveHandshake, TransferFrame, encode_slave_ack
from ha.states import HAConnectionState
from store.epoch_cache import (
    EpochCache,
    EpochEntry,
    NoTruncation,
    find_consistent_point,
    with_end_offset,
)


@dataclass(frozen=True, slots=True)
class Send:
    data: bytes


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Cut the local store at `phy_offset` (a no-op for the commitlog at or past its end), drop
    epoch entries starting at or after it, then call `truncated()`. `below_confirm` means the
    cut removes bytes this slave had seen confirmed: committed data was lost (log it loudly)."""

    phy_offset: int
    below_confirm: bool


@dataclass(frozen=True, slots=True)
class AppendEpoch:
    """Persist the epoch entry `(epoch, start_offset)` (before the data it labels)."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class Append:
    """Copy `body` (valid until the next feed) into the commitlog at `phy_offset` (its end)."""

    phy_offset: int
    body: memoryview


@dataclass(frozen=True, slots=True)
class AppendRun:
    """Copy `bodies` (consecutive byte ranges, each within one commitlog file; views valid until
    the decoder's next feed) into the commitlog from `phy_offset` (its end), in order: the
    bodies of consecutive TRANSFER frames of one read (`SlaveProtocol.receive_transfers`)."""

    phy_offset: int
    bodies: tuple[memoryview, ...]


@dataclass(frozen=True, slots=True)
class SetConfirmOffset:
    confirm_offset: int


SlaveEffect = Send | TruncateTo | AppendEpoch | Append | AppendRun | SetConfirmOffset


class SlaveProtocol:
    """The slave's HA state machine for one master (one `SlaveProtocol` per connection)."""

    __slots__ = (
        "_confirm_offset",
        "_epochs",
        "_handshake",
        "current_received_epoch",
        "current_reported_offset",
        "local_max_phy_offset",
        "master_confirm_offset",
        "peer",
        "state",
    )

    def __init__(
        self,
        peer: str,
        *,
        slave_broker_id: int,
        is_sync_from_last_file: bool = False,
        is_async_learner: bool = False,
    ) -> None:
        self.peer = peer
        self._handshake = SlaveHandshake(is_sync_from_last_file, is_async_learner,
                                         slave_broker_id)
        self.state = HAConnectionState.READY
        self.current_received_epoch: int | None = None
        self.current_reported_offset = 0
        self.local_max_phy_offset = 0
        self._confirm_offset = 0
        # The confirmOffset of the master's last TRANSFER header, not clamped to the local log:
        # while this slave is out of the SyncStateSet, where the master's log ends.
        self.master_confirm_offset = 0
        self._epochs = EpochCache()

    def connected(
        self, *, local_max_phy_offset: int, local_epochs: EpochCache, confirm_offset: int
    ) -> list[SlaveEffect]:
        """The TCP connection is up: send the handshake."""
        self.state = HAConnectionState.HANDSHAKE
        self.local_max_phy_offset = local_max_phy_offset
        self.current_reported_offset = local_max_phy_offset
        self.current_received_epoch = None
        self._epochs = local_epochs
        self._confirm_offset = confirm_offset
        self.master_confirm_offset = 0
        return [Send(self._handshake.encode())]

    def receive(self, frame: MasterFrame) -> list[SlaveEffect]:
        """Apply one master frame. Raises `HAProtocolError` (close, reconnect) or
        `NoConsistentPointError` (close, retry later; nothing truncated)."""
        if isinstance(frame, MasterHandshake):
            if self.state is not HAConnectionState.HANDSHAKE:
                raise HAProtocolError(
                    f"HANDSHAKE reply from {self.peer} in state {self.state.name}"
                )
            return self._handshake_reply(frame)
        if self.state is not HAConnectionState.TRANSFER:
            raise HAProtocolError(f"TRANSFER from {self.peer} in state {self.state.name}")
        return self._transfer(frame)

    def _handshake_reply(self, frame: MasterHandshake) -> list[SlaveEffect]:
        local = with_end_offset(self._epochs.entries, self.local_max_phy_offset)
        master = with_end_offset(
            tuple(EpochEntry(epoch, start) for epoch, start in frame.entries), frame.offset
        )
        point = find_consistent_point(local, master)
        if point is None:
            raise NoConsistentPointError(
                f"master {self.peer}: no common epoch (local {self._epochs}, master "
                f"{list(frame.entries)} up to {frame.offset}); nothing truncated"
            )
        if point is NoTruncation.LOCAL_EPOCH_CACHE_EMPTY:
            # Java's rule (§6 step 1): keep what we have and resume at our own end.
            return self.truncated(self.local_max_phy_offset)
        return [TruncateTo(point, below_confirm=point < self._confirm_offset)]

    def truncated(self, phy_offset: int) -> list[SlaveEffect]:
        """The store is cut at `phy_offset` (durably, epoch file included): start TRANSFER and
        report `min(phy_offset, local end)` at once (an early ACK, compatible, §5.3; never more
        than we hold, §6 step 7)."""
        self.local_max_phy_offset = min(phy_offset, self.local_max_phy_offset)
        self._epochs = self._epochs.truncate_suffix_by_offset(phy_offset)
        self._confirm_offset = min(self._confirm_offset, self.local_max_phy_offset)
        self.state = HAConnectionState.TRANSFER
        self.current_reported_offset = self.local_max_phy_offset
        return [Send(encode_slave_ack(self.local_max_phy_offset))]

    def _transfer(self, frame: TransferFrame) -> list[SlaveEffect]:
        header = frame.header
        local = self.local_max_phy_offset
        if local != 0 and local != header.offset:
            raise HAProtocolError(
                f"TRANSFER from {self.peer}: offset={header.offset} but the local commitlog "
                f"ends at {local}"
            )
        effects: list[SlaveEffect] = []
        if header.epoch != self.current_received_epoch:
            effects.extend(self._epoch_label(header.epoch, header.epoch_start_offset))
            self.current_received_epoch = header.epoch
        if header.body_size:
            if header.offset < 0:
                raise HAProtocolError(f"TRANSFER from {self.peer}: data at offset -1")
            effects.append(Append(header.offset, frame.body))
            self.local_max_phy_offset = header.offset + header.body_size
        self.master_confirm_offset = header.confirm_offset
        confirm = min(header.confirm_offset, self.local_max_phy_offset)
        if confirm > self._confirm_offset:
            self._confirm_offset = confirm
            effects.append(SetConfirmOffset(confirm))
        if self.local_max_phy_offset > self.current_reported_offset:
            self.current_reported_offset = self.local_max_phy_offset
            effects.append(Send(encode_slave_ack(self.local_max_phy_offset)))
        return effects

    def receive_transfers(self, frames: Sequence[TransferFrame]) -> list[SlaveEffect]:
        """`receive` for TRANSFER frames in order (those of one read), with what the shell
        would otherwise carry out frame by frame gathered: the bodies of consecutive frames in
        one `AppendRun` (an epoch label between them splits it, its `AppendEpoch` first), then
        at most one `SetConfirmOffset` and one ACK `Send`, for the last values (those of the
        last frame: both only grow). Raises as `receive` does; effects of the frames before a
        bad one are then not returned (nothing of them was carried out, nothing acked)."""
        if self.state is not HAConnectionState.TRANSFER:
            raise HAProtocolError(f"TRANSFER from {self.peer} in state {self.state.name}")
        effects: list[SlaveEffect] = []
        bodies: list[memoryview] = []
        run_start = 0
        local = self.local_max_phy_offset
        confirm = self._confirm_offset
        for frame in frames:
            header = frame.header
            if local != 0 and local != header.offset:
                raise HAProtocolError(
                    f"TRANSFER from {self.peer}: offset={header.offset} but the local commitlog "
                    f"ends at {local}"
                )
            if header.epoch != self.current_received_epoch:
                labels = self._epoch_label(header.epoch, header.epoch_start_offset)
                if labels and bodies:
                    effects.append(AppendRun(run_start, tuple(bodies)))
                    bodies = []
                effects.extend(labels)
                self.current_received_epoch = header.epoch
            if header.body_size:
                if header.offset < 0:
                    raise HAProtocolError(f"TRANSFER from {self.peer}: data at offset -1")
                if not bodies:
                    run_start = header.offset
                bodies.append(frame.body)
                local = header.offset + header.body_size
            confirm = max(confirm, min(header.confirm_offset, local))
        if bodies:
            effects.append(AppendRun(run_start, tuple(bodies)))
        self.local_max_phy_offset = local
        if frames:
            self.master_confirm_offset = frames[-1].header.confirm_offset
        if confirm > self._confirm_offset:
            self._confirm_offset = confirm
            effects.append(SetConfirmOffset(confirm))
        if local > self.current_reported_offset:
            self.current_reported_offset = local
            effects.append(Send(encode_slave_ack(local)))
        return effects

    def _epoch_label(self, epoch: int, start_offset: int) -> list[SlaveEffect]:
        last = self._epochs.last_entry()
        if last is not None:
            if epoch < last.epoch:
                raise HAProtocolError(
                    f"TRANSFER from {self.peer}: epoch={epoch} goes back from the local last "
                    f"epoch {last.epoch}"
                )
            if epoch == last.epoch:
                return []  # announced again after a reconnect
            if start_offset < last.start_offset:
                raise HAProtocolError(
                    f"TRANSFER from {self.peer}: epoch {epoch} starts at {start_offset}, before "
                    f"the local last epoch {last.epoch}'s start {last.start_offset}"
                )
        self._epochs = self._epochs.append(epoch, start_offset)
        return [AppendEpoch(epoch, start_offset)]

    def keepalive(self) -> Send:
        """The ACK to send when nothing was written for `haSendHeartbeatInterval`."""
        return Send(encode_slave_ack(self.current_reported_offset))
