"""The ReplicasManager's role decisions, without I/O (docs/replicas-manager.md §4.5, §6, §7.3).

Everything the controller tells a broker about its set (the answer to REGISTER_BROKER,
ELECT_MASTER, GET_REPLICA_INFO, or a NOTIFY_BROKER_ROLE_CHANGED push) is a `ControllerView`;
`decide(role, view, source)` says what the broker does with it. The shell
(`broker/replicas_manager.py`) carries the actions out and then `apply`s them to its `RoleState`.

Invariants:
- A role change is decided only for a master epoch strictly greater than the local one (§6).
- A broker never makes itself master: `BecomeMaster` only when the controller names this
  broker's own id.
- A SyncStateSet is adopted only with a strictly greater SyncStateSet epoch, and only by the
  master of the current epoch (§7.3).
- The master lease (docs/reliability.md M17) is valid only within `lease_ms` of the send time of a
  heartbeat that the controller was then seen to count (time from the monotonic clock, M15).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Final

INITIAL_MASTER_EPOCH: Final = 0
SCAN_INACTIVE_MASTER_INTERVAL_MS: Final = 5_000
"""The Java controller's `scanInactiveMasterInterval` / `scanNotActiveBrokerInterval` (§9.5)."""


class Source(enum.Enum):
    """Where a `ControllerView` came from."""

    REGISTER = "register"  # CONTROLLER_REGISTER_BROKER's answer
    ELECT = "elect"  # CONTROLLER_ELECT_MASTER's answer (0 or 2011)
    POLL = "poll"  # CONTROLLER_GET_REPLICA_INFO's answer
    PUSH = "push"  # NOTIFY_BROKER_ROLE_CHANGED (1008)


@dataclass(frozen=True, slots=True)
class ControllerView:
    """What the controller says of the broker set; None where the answer has no such field."""

    master_broker_id: int | None
    master_address: str | None
    master_epoch: int | None
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int | None = None

    @property
    def has_master(self) -> bool:
        return self.master_broker_id is not None and bool(self.master_address)


@dataclass(frozen=True, slots=True)
class RoleState:
    """The broker's role as the ReplicasManager knows it. `broker_id` is the controller id."""

    broker_id: int
    master_epoch: int = INITIAL_MASTER_EPOCH
    master_broker_id: int | None = None
    master_address: str | None = None
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    @property
    def is_master(self) -> bool:
        return self.master_broker_id == self.broker_id

    @property
    def has_role(self) -> bool:
        return self.master_broker_id is not None

    @property
    def name_server_broker_id(self) -> int:
        """The id registered with name servers: 0 while master, else the controller id (§1)."""
        return 0 if self.is_master else self.broker_id


@dataclass(frozen=True, slots=True)
class Ignore:
    reason: str


@dataclass(frozen=True, slots=True)
class BecomeMaster:
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True, slots=True)
class BecomeSlave:
    master_address: str
    master_epoch: int
    master_broker_id: int
    # The master (id and address) did not change: only the epoch is recorded (§6.2 step 2;
    # Java compares the id alone and keeps a stale address if the master moved).
    same_master: bool


@dataclass(frozen=True, slots=True)
class Elect:
    """Ask the controller to elect (CONTROLLER_ELECT_MASTER, §4.5)."""


@dataclass(frozen=True, slots=True)
class ApplySyncStateSet:
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


Action = Ignore | BecomeMaster | BecomeSlave | Elect | ApplySyncStateSet


def decide(role: RoleState, view: ControllerView, source: Source) -> Action:
    """What to do with `view` (§4.4 step 5, §4.5, §6.3, §6.4)."""
    epoch = view.master_epoch
    if view.has_master and epoch is not None and epoch > role.master_epoch:
        assert view.master_broker_id is not None
        assert view.master_address is not None
        if view.master_broker_id == role.broker_id:
            sss_epoch = view.sync_state_set_epoch
            return BecomeMaster(epoch, view.sync_state_set | {role.broker_id},
                                role.sync_state_set_epoch if sss_epoch is None else sss_epoch)
        return BecomeSlave(view.master_address, epoch, view.master_broker_id,
                           same_master=view.master_broker_id == role.master_broker_id
                           and view.master_address == role.master_address
                           and not role.is_master)
    if not view.has_master:
        if source is Source.POLL and epoch is not None and epoch > role.master_epoch:
            return Elect()  # the controller's election failed: ask again (§6.3)
        if source is Source.REGISTER and not role.has_role:
            return Elect()  # no alive master known at registration (§4.3 step 3)
        return Ignore("no master in the answer")
    if epoch is not None and epoch < role.master_epoch:
        return Ignore(f"stale master epoch {epoch} < {role.master_epoch}")
    if epoch == role.master_epoch and role.is_master and view.master_broker_id == role.broker_id:
        sss_epoch = view.sync_state_set_epoch
        if source is Source.POLL and sss_epoch is None:
            return Ignore("no SyncStateSet epoch")
        if sss_epoch is not None and sss_epoch > role.sync_state_set_epoch:
            return ApplySyncStateSet(view.sync_state_set | {role.broker_id}, sss_epoch)
        return Ignore("SyncStateSet unchanged")
    return Ignore(f"master epoch {epoch} is not above {role.master_epoch}")


def apply(role: RoleState, action: Action) -> RoleState:
    """The role once `action` has been carried out."""
    if isinstance(action, BecomeMaster):
        return replace(role, master_epoch=action.master_epoch, master_broker_id=role.broker_id,
                       master_address=None, sync_state_set=action.sync_state_set,
                       sync_state_set_epoch=action.sync_state_set_epoch)
    if isinstance(action, BecomeSlave):
        if action.same_master:
            return replace(role, master_epoch=action.master_epoch)
        return replace(role, master_epoch=action.master_epoch,
                       master_broker_id=action.master_broker_id,
                       master_address=action.master_address)
    if isinstance(action, ApplySyncStateSet):
        if action.sync_state_set_epoch <= role.sync_state_set_epoch:
            return role
        return replace(role, sync_state_set=action.sync_state_set,
                       sync_state_set_epoch=action.sync_state_set_epoch)
    return role


def lost_committed_hold_ms(controller_heart_beat_timeout_ms: int) -> int:
    """How long a broker that lost committed data stays away from the controller before it
    registers (docs/reliability.md M9): past its heartbeat timeout and two inactive-master scans, so
    the controller has elected another alive SyncStateSet member if there is one."""
    return controller_heart_beat_timeout_ms + 2 * SCAN_INACTIVE_MASTER_INTERVAL_MS


def default_lease_ms(controller_heart_beat_timeout_ms: int) -> int:
    """The master lease (M17): half the heartbeat timeout the controller applies to us."""
    return max(1, controller_heart_beat_timeout_ms // 2)


def lease_renews(*, named_master: bool | None, answered: int, controllers: int,
                 lapsed: bool) -> bool:
    """M17: does a master's heartbeat round renew its lease? `named_master` is what the leader's
    replica info said (True: this broker at its epoch; False: another master or epoch, i.e.
    deposed; None: no answer). The leader naming it renews; a majority of controllers answering
    renews only when the leader did not name another master and the lease had not `lapsed` by
    the round's send time (it keeps the lease through a controller leader failover, never past
    a deposition). A lapsed lease is renewed by the leader alone: a controller that reads a
    heartbeat cannot time this broker out before that heartbeat's timeout, but once the
    broker's contact had lapsed (a pause, say) it may have done so already."""
    if named_master is not None:
        return named_master
    return not lapsed and answered > controllers // 2


@dataclass(slots=True)
class MasterLease:
    """M17. `renew(sent_at_ms)` with the send time of a heartbeat the controller counted (the
    controller cannot declare this broker dead before sent_at + its heartbeat timeout);
    `valid(now_ms)` while now < sent_at + lease_ms. Renewals never move the lease back."""

    lease_ms: int
    renewed_at_ms: int | None = field(default=None)

    def renew(self, sent_at_ms: int) -> None:
        if self.renewed_at_ms is None or sent_at_ms > self.renewed_at_ms:
            self.renewed_at_ms = sent_at_ms

    def revoke(self) -> None:
        self.renewed_at_ms = None

    def valid(self, now_ms: int) -> bool:
        return self.renewed_at_ms is not None and now_ms < self.renewed_at_ms + self.lease_ms
