"""SyncStateSet rules on the master: which slaves are in sync, and how far writes are confirmed.

A pure core (docs/ha-protocol.md §9-§11, docs/reliability.md M1, M3, M4). Broker ids are the
controller's (i64). Times are monotonic milliseconds given by the caller.

Invariants:
- The master is always a member of its own SyncStateSet.
- While a change is pending at the controller, every rule that protects data counts the union of
  the local (last confirmed) set and the proposed one (RocketMQ #5663): a shrink counts only once
  the controller has committed it.
- confirm_offset is monotone within an epoch, never above the minimum ack of the connected
  members, and frozen while a member of the (union) set has no connection (RocketMQ #6662).
- A slave joins only once it has acknowledged both confirm_offset and the current epoch's start,
  and it is not an async learner.
- A waiting send is acknowledged only when every member of the (union) set has acked its end
  offset (allAckInSyncStateSet), or `in_sync_replicas` replicas have (otherwise).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field


def compute_confirm_offset(
    *,
    max_phy_offset: int,
    sync_state_set: Collection[int],
    master_broker_id: int,
    ack_by_slave: Mapping[int, int],
    previous_confirm_offset: int,
) -> int:
    """The master's confirmOffset with allAckInSyncStateSet (§10.2, made monotone).

    `sync_state_set` is the union view; `ack_by_slave` holds the acked offset of every slave with
    a live connection (absent = not connected). A member without a connection freezes the value
    at `previous_confirm_offset`; otherwise it is the minimum of `max_phy_offset` and the members'
    acks, never below `previous_confirm_offset` (a member that lost a tail never lowers it, M4;
    the shell shrinks it out instead).
    """
    confirm = max_phy_offset
    for broker_id in sync_state_set:
        if broker_id == master_broker_id:
            continue
        ack = ack_by_slave.get(broker_id)
        if ack is None:
            return previous_confirm_offset
        confirm = min(confirm, ack)
    return max(confirm, previous_confirm_offset)


def shrink_sync_state_set(
    sync_state_set: frozenset[int],
    *,
    master_broker_id: int,
    now_ms: int,
    last_caught_up_ms_by_slave: Mapping[int, int],
    connected: Collection[int],
    ha_max_time_slave_not_catchup_ms: int,
) -> frozenset[int]:
    """The set without members that fell behind or are gone (§9.2, §9.4).

    A slave is dropped when it has not caught up for more than `ha_max_time_slave_not_catchup_ms`,
    when it never caught up since this process started, or when it has no connection. The master
    stays.
    """
    kept = {master_broker_id}
    for broker_id in sync_state_set:
        if broker_id == master_broker_id:
            continue
        caught_up = last_caught_up_ms_by_slave.get(broker_id)
        if caught_up is None or broker_id not in connected:
            continue
        if now_ms - caught_up > ha_max_time_slave_not_catchup_ms:
            continue
        kept.add(broker_id)
    return frozenset(kept)


def can_expand(
    *,
    slave_ack_offset: int,
    confirm_offset: int,
    current_epoch_start_offset: int,
    last_master_max_offset: int,
    is_async_learner: bool,
) -> bool:
    """Whether a slave's ack lets it join the SyncStateSet (§9.1)."""
    return (
        not is_async_learner
        and slave_ack_offset >= last_master_max_offset
        and slave_ack_offset >= confirm_offset
        and slave_ack_offset >= current_epoch_start_offset
    )


def is_acknowledged(
    end_offset: int,
    *,
    sync_state_set: Collection[int],
    master_broker_id: int,
    ack_by_slave: Mapping[int, int],
    all_ack_in_sync_state_set: bool,
    in_sync_replicas: int,
) -> bool:
    """Whether a send ending at `end_offset` has the replica acks it needs (§11 step 4).

    With `all_ack_in_sync_state_set`, every member of `sync_state_set` (the union view) other
    than the master must have acked `end_offset` on a live connection. Otherwise `in_sync_replicas`
    replicas, the master included, counting any connected slave (learners included, as Java does).
    """
    if all_ack_in_sync_state_set:
        for broker_id in sync_state_set:
            if broker_id == master_broker_id:
                continue
            if ack_by_slave.get(broker_id, -1) < end_offset:
                return False
        return True
    if in_sync_replicas <= 1:
        return True
    count = 1 + sum(1 for ack in ack_by_slave.values() if ack >= end_offset)
    return count >= in_sync_replicas


def acknowledged_offset(
    *,
    sync_state_set: Collection[int],
    master_broker_id: int,
    ack_by_slave: Mapping[int, int],
    all_ack_in_sync_state_set: bool,
    in_sync_replicas: int,
) -> int | None:
    """`is_acknowledged` for every end offset at once: a send ending at `end_offset >= 0` has its
    acks exactly when `end_offset <= acknowledged_offset(...)`; None: every send has them (no
    replica to wait for). The service computes it once per ack, not once per waiting send."""
    if all_ack_in_sync_state_set:
        bound: int | None = None
        for broker_id in sync_state_set:
            if broker_id == master_broker_id:
                continue
            ack = ack_by_slave.get(broker_id, -1)
            bound = ack if bound is None else min(bound, ack)
        return bound
    if in_sync_replicas <= 1:
        return None
    acks = sorted(ack_by_slave.values(), reverse=True)
    return acks[in_sync_replicas - 2] if len(acks) >= in_sync_replicas - 1 else -1


@dataclass(slots=True)
class SyncStateSet:
    """The master's SyncStateSet: the controller-confirmed local set and a pending proposal.

    `local` is what the controller last confirmed; `pending` the proposal sent and not yet
    answered (None when nothing is pending). All data-protecting views use `view()`.
    """

    master_broker_id: int
    local: frozenset[int]
    sync_state_set_epoch: int = 0
    pending: frozenset[int] | None = None
    last_caught_up_ms_by_slave: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.local = self.local | {self.master_broker_id}

    def view(self) -> frozenset[int]:
        """Java `getSyncStateSet()`: local, or local | pending while a change is pending."""
        return self.local if self.pending is None else self.local | self.pending

    def in_sync_replicas_nums(self) -> int:
        """Java `inSyncReplicasNums()`: max(|local|, |pending|) while pending, else |local|."""
        if self.pending is None:
            return len(self.local)
        return max(len(self.local), len(self.pending))

    def propose(self, proposal: frozenset[int]) -> frozenset[int] | None:
        """Record `proposal` (the master added) as pending; returns it, or None if it equals
        the set already in effect (nothing to send)."""
        proposal = proposal | {self.master_broker_id}
        if proposal == (self.pending if self.pending is not None else self.local):
            return None
        self.pending = proposal
        return proposal

    def apply(self, sync_state_set: frozenset[int], sync_state_set_epoch: int) -> bool:
        """The controller's answer (or a polled replica info): adopt the set if its epoch is
        newer. Returns whether it was adopted; the pending proposal ends either way then."""
        if sync_state_set_epoch <= self.sync_state_set_epoch and self.sync_state_set_epoch:
            return False
        self.local = sync_state_set | {self.master_broker_id}
        self.sync_state_set_epoch = sync_state_set_epoch
        self.pending = None
        return True

    def caught_up(self, broker_id: int, at_ms: int) -> None:
        """Java `updateConnectionLastCaughtUpTime`: keep the latest time (a running max)."""
        previous = self.last_caught_up_ms_by_slave.get(broker_id)
        if previous is None or at_ms > previous:
            self.last_caught_up_ms_by_slave[broker_id] = at_ms
