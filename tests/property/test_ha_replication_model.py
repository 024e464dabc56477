"""docs/reliability.md §11: a model of replication and election over the production pure rules.

Three brokers, one controller. Each broker's log is a list of `(epoch, key)`, one entry per
offset; its epoch entries are a real `EpochCache`. The rules the model calls are production code:
`find_consistent_point` (handshake), `compute_confirm_offset`, `shrink_sync_state_set`,
`can_expand`, `is_acknowledged` and `SyncStateSet` (pending changes counted as a union). The
election is the model's own (DefaultElectPolicy without unclean election: the best alive member
of the controller's SyncStateSet by (last epoch, max offset)); pyrmq's controller is not built yet.

Configuration under test: allAckInSyncStateSet=true, minInSyncReplicas=1.

Invariants, after every step:
- I1: every acknowledged key is in the log of every member of the controller's SyncStateSet,
  except keys that member lost in a power loss (`excused`), and keys lost for good because such a
  member was elected ("last replica standing", docs/reliability.md M9: `allowed_lost`).
- I2: one master per epoch; the controller's epochs strictly increase.
- I3: right after a handshake, the slave's log is a prefix of its master's (checked in the rule).
- I4: a master's confirm offset is at most its max offset and at most the ack of every connected
  member of its SyncStateSet view (members that came back below it are being shrunk out, M4).
- I5: no confirmed truncation: every (offset, key) ever visible to consumers on any broker is
  still at that offset in the controller's master's log (unless allowed lost), so a new epoch
  never starts below a confirmed offset.
- I6: consumer-visible (dispatched) <= confirm on every broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from ha.sync_state_set import (
    SyncStateSet,
    can_expand,
    compute_confirm_offset,
    is_acknowledged,
    shrink_sync_state_set,
)
from store.epoch_cache import EpochCache, NoTruncation, find_consistent_point, with_end_offset

BROKERS = (1, 2, 3)
MAX_LAG_MS = 100
brokers = st.sampled_from(BROKERS)


@dataclass
class Broker:
    broker_id: int
    log: list[tuple[int, int]] = field(default_factory=list)
    epochs: EpochCache = field(default_factory=EpochCache)
    flushed: int = 0
    confirm: int = 0
    visible: int = 0
    alive: bool = True
    # Role as this broker believes it (a zombie master keeps believing).
    master_epoch: int | None = None  # epoch it is master of, if it thinks it is master
    follows: int | None = None  # the master it replicates from, if slave
    in_transfer: bool = False  # handshake done with `follows`
    excused: set[int] = field(default_factory=set)
    # Master-side state (meaningful while master_epoch is not None).
    sss: SyncStateSet | None = None
    acks: dict[int, int] = field(default_factory=dict)  # connected slaves' acks
    last_max_sent: dict[int, int] = field(default_factory=dict)
    waiting: list[tuple[int, int]] = field(default_factory=list)  # (key, end offset)

    @property
    def end(self) -> int:
        return len(self.log)

    def keys(self) -> set[int]:
        return {key for _, key in self.log}


class ReplicationModel(RuleBasedStateMachine):
    # Negative controls flip these to Java's unsafe default or to the #5663 bug.
    all_ack_in_sync_state_set = True
    count_pending_union = True

    def __init__(self) -> None:
        super().__init__()
        self.b = {i: Broker(i) for i in BROKERS}
        self.now_ms = 0
        self.next_key = 0
        self.acked: set[int] = set()
        self.allowed_lost: set[int] = set()
        self.seen: dict[int, int] = {}  # offset -> key ever visible to a consumer
        self.cut: set[frozenset[int]] = set()  # broker pairs that cannot talk
        self.cut_from_controller: set[int] = set()
        self.controller_master: int | None = None
        self.controller_epoch = 0
        self.controller_sss: frozenset[int] = frozenset()
        self.controller_sss_epoch = 0
        self.masters_by_epoch: dict[int, int] = {}
        self._elect()

    # ------------------------------------------------------------------ helpers

    def _linked(self, a: int, b: int) -> bool:
        return self.b[a].alive and self.b[b].alive and frozenset((a, b)) not in self.cut

    def _controller_sees(self, i: int) -> bool:
        return self.b[i].alive and i not in self.cut_from_controller

    def _disconnect(self, master: Broker, slave_id: int) -> None:
        if slave_id in master.acks:
            del master.acks[slave_id]
            assert master.sss is not None
            if slave_id in master.sss.local:
                self._propose(master, master.sss.local - {slave_id})

    def _propose(self, master: Broker, proposal: frozenset[int]) -> None:
        assert master.sss is not None
        master.sss.propose(proposal)

    def _recompute(self, master: Broker) -> None:
        assert master.sss is not None
        view = master.sss.view() if self.count_pending_union else master.sss.local
        master.confirm = compute_confirm_offset(
            max_phy_offset=master.end, sync_state_set=view,
            master_broker_id=master.broker_id, ack_by_slave=master.acks,
            previous_confirm_offset=master.confirm,
        )
        self._dispatch(master)
        still = []
        for key, end in master.waiting:
            if is_acknowledged(end, sync_state_set=view,
                               master_broker_id=master.broker_id, ack_by_slave=master.acks,
                               all_ack_in_sync_state_set=self.all_ack_in_sync_state_set,
                               in_sync_replicas=1):
                self.acked.add(key)
            else:
                still.append((key, end))
        master.waiting = still

    def _dispatch(self, broker: Broker) -> None:
        broker.visible = broker.confirm
        for offset in range(broker.visible):
            self.seen.setdefault(offset, broker.log[offset][1])

    def _become_slave(self, broker: Broker, master_id: int) -> None:
        broker.master_epoch = None
        broker.sss = None
        broker.acks.clear()
        broker.waiting.clear()  # indeterminate: never acknowledged
        broker.follows = master_id
        broker.in_transfer = False

    def _elect(self) -> None:
        """The controller elects when its master is gone (or at start)."""
        current = self.controller_master
        if current is not None and self._controller_sees(current):
            return
        pool = self.controller_sss if self.controller_sss else frozenset(BROKERS)
        candidates = [i for i in pool if self._controller_sees(i)]
        if not candidates:
            return
        new = max(candidates, key=lambda i: (self.b[i].epochs.last_epoch() or 0, self.b[i].end))
        self.controller_epoch += 1
        epoch = self.controller_epoch
        self.controller_master = new
        self.controller_sss = frozenset({new})
        self.controller_sss_epoch += 1
        assert epoch not in self.masters_by_epoch  # I2
        self.masters_by_epoch[epoch] = new
        master = self.b[new]
        # Keys the new master lacks are gone for good; only a power loss may excuse that.
        missing = (self.acked - self.allowed_lost) - master.keys()
        assert missing <= master.excused, f"elected {new} lacks acknowledged keys {missing}"
        held = master.keys()
        self.allowed_lost |= missing | {k for k in master.excused if k not in held}
        master.follows = None
        master.in_transfer = False
        master.master_epoch = epoch
        master.epochs = master.epochs.truncate_suffix_by_epoch(epoch).append(epoch, master.end)
        master.sss = SyncStateSet(master_broker_id=new, local=frozenset({new}),
                                  sync_state_set_epoch=self.controller_sss_epoch)
        master.acks.clear()
        master.waiting.clear()
        self._recompute(master)
        for other in BROKERS:
            if other != new and self._controller_sees(other):
                self._become_slave(self.b[other], new)
                for b in self.b.values():
                    if b.master_epoch is not None and b.broker_id != new:
                        self._disconnect(b, other)

    # ------------------------------------------------------------------ rules

    @rule(who=brokers)
    def send(self, who: int) -> None:
        master = self.b[who]
        if not master.alive or master.master_epoch is None or master.sss is None:
            return
        if master.sss.in_sync_replicas_nums() < 1:  # minInSyncReplicas = 1
            return
        key = self.next_key
        self.next_key += 1
        master.log.append((master.master_epoch, key))
        master.waiting.append((key, master.end))
        self._recompute(master)

    @rule(who=brokers, n=st.integers(1, 4))
    def replicate(self, who: int, n: int) -> None:
        slave = self.b[who]
        if slave.follows is None or not slave.in_transfer or \
                not self._linked(who, slave.follows):
            return
        master = self.b[slave.follows]
        if master.master_epoch is None:
            return
        for offset in range(slave.end, min(master.end, slave.end + n)):
            epoch, key = master.log[offset]
            if slave.epochs.last_epoch() != epoch:
                entry = master.epochs.entry_for_epoch(epoch)
                assert entry is not None
                slave.epochs = slave.epochs.append(epoch, entry.start_offset)
            slave.log.append((epoch, key))
        master.last_max_sent[who] = master.end
        slave.confirm = max(slave.confirm, min(master.confirm, slave.end))
        self._dispatch(slave)

    @rule(who=brokers)
    def ack(self, who: int) -> None:
        slave = self.b[who]
        if slave.follows is None or not slave.in_transfer or \
                not self._linked(who, slave.follows):
            return
        master = self.b[slave.follows]
        if master.master_epoch is None or master.sss is None:
            return
        ack = slave.end
        master.acks[who] = ack
        sss = master.sss
        if ack == master.end:
            sss.caught_up(who, self.now_ms)
        last = master.epochs.last_entry()
        assert last is not None
        if who not in sss.local and can_expand(
            slave_ack_offset=ack, confirm_offset=master.confirm,
            current_epoch_start_offset=last.start_offset,
            last_master_max_offset=master.last_max_sent.get(who, master.end),
            is_async_learner=False,
        ):
            self._propose(master, sss.local | {who})
        if who in sss.view() and ack < master.confirm:
            self._propose(master, sss.local - {who})  # came back short: shrink it out (M4)
        self._recompute(master)

    @rule(who=brokers, reply_lost=st.booleans())
    def controller_answers(self, who: int, reply_lost: bool) -> None:
        master = self.b[who]
        if master.sss is None or master.sss.pending is None or not self._controller_sees(who):
            return
        if self.controller_master != who or self.controller_epoch != master.master_epoch:
            return  # a zombie's proposal is refused
        self.controller_sss = master.sss.pending
        self.controller_sss_epoch += 1
        if not reply_lost:
            master.sss.apply(self.controller_sss, self.controller_sss_epoch)
            self._recompute(master)

    @rule(ms=st.integers(1, 150))
    def shrink(self, ms: int) -> None:
        self.now_ms += ms
        for master in self.b.values():
            if master.sss is None or not master.alive:
                continue
            shrunk = shrink_sync_state_set(
                master.sss.local, master_broker_id=master.broker_id, now_ms=self.now_ms,
                last_caught_up_ms_by_slave=master.sss.last_caught_up_ms_by_slave,
                connected=master.acks.keys(), ha_max_time_slave_not_catchup_ms=MAX_LAG_MS,
            )
            if shrunk != master.sss.local:
                self._propose(master, shrunk)

    @rule(who=brokers)
    def timeout_waiting_sends(self, who: int) -> None:
        self.b[who].waiting.clear()  # FLUSH_SLAVE_TIMEOUT: indeterminate, never acked

    @rule(who=brokers)
    def flush(self, who: int) -> None:
        self.b[who].flushed = self.b[who].end

    @rule(who=brokers, power_loss=st.booleans())
    def kill(self, who: int, power_loss: bool) -> None:
        broker = self.b[who]
        if not broker.alive:
            return
        broker.alive = False
        for master in self.b.values():
            if master.master_epoch is not None:
                self._disconnect(master, who)
        if power_loss:
            lost = {key for _, key in broker.log[broker.flushed:]}
            broker.excused |= lost
            # Keys no other SyncStateSet member holds are gone with this power loss (the allowed
            # loss of docs/reliability.md §11: every member lost power under async flush).
            others = set().union(*(self.b[m].keys() for m in self.controller_sss
                                   if m != who))
            self.allowed_lost |= lost - others
            del broker.log[broker.flushed:]
            broker.epochs = broker.epochs.drop_beyond(broker.end)
            broker.confirm = min(broker.confirm, broker.end)
            broker.visible = min(broker.visible, broker.confirm)
        self._elect()

    @rule(who=brokers)
    def restart(self, who: int) -> None:
        broker = self.b[who]
        if broker.alive:
            return
        broker.alive = True
        broker.flushed = broker.end
        broker.visible = min(broker.visible, broker.confirm)
        # A restarted broker waits for the controller's role; until then it takes no writes.
        broker.master_epoch = None
        broker.sss = None
        broker.acks.clear()
        broker.waiting.clear()
        broker.follows = None
        broker.in_transfer = False
        self._elect()
        if self.controller_master not in (None, who) and self._controller_sees(who):
            self._become_slave(broker, self.controller_master)
        elif self.controller_master == who and self._controller_sees(who):
            # Re-elected while it was down: the controller's epoch stands, a new one is needed.
            self.controller_master = None
            self._elect()

    @rule(a=brokers, b=brokers)
    def partition(self, a: int, b: int) -> None:
        if a == b:
            self.cut_from_controller.add(a)
            self._elect()
            return
        self.cut.add(frozenset((a, b)))
        for x, y in ((a, b), (b, a)):
            if self.b[x].master_epoch is not None:
                self._disconnect(self.b[x], y)
                if self.b[y].follows == x:
                    self.b[y].in_transfer = False

    @rule()
    def heal(self) -> None:
        self.cut.clear()
        self.cut_from_controller.clear()
        master = self.controller_master
        for i in BROKERS:
            broker = self.b[i]
            if broker.alive and master is not None and i != master and \
                    (broker.follows != master or broker.master_epoch is not None):
                self._become_slave(broker, master)

    @rule(who=brokers)
    def handshake(self, who: int) -> None:
        slave = self.b[who]
        if slave.follows is None or slave.in_transfer or not self._linked(who, slave.follows):
            return
        master = self.b[slave.follows]
        if master.master_epoch is None:
            return
        point = find_consistent_point(
            with_end_offset(slave.epochs.entries, slave.end),
            with_end_offset(master.epochs.entries, master.end),
        )
        if point is None:
            return
        if point is NoTruncation.LOCAL_EPOCH_CACHE_EMPTY:
            assert slave.end == 0, "a slave with data always has epoch entries"
            point = 0
        point = min(point, slave.end)
        del slave.log[point:]
        slave.epochs = slave.epochs.truncate_suffix_by_offset(point)
        slave.confirm = min(slave.confirm, point)
        slave.visible = min(slave.visible, slave.confirm)
        slave.in_transfer = True
        # I3: after a handshake the slave's log is a prefix of its master's.
        assert slave.log == master.log[: slave.end], "I3: slave log is not a master prefix"

    # ------------------------------------------------------------------ invariants

    @invariant()
    def i1_acknowledged_keys_are_on_every_sss_member(self) -> None:
        needed = self.acked - self.allowed_lost
        for member in self.controller_sss:
            broker = self.b[member]
            missing = needed - broker.keys() - broker.excused
            assert not missing, f"I1: SSS member {member} lacks acknowledged keys {missing}"

    @invariant()
    def i2_epochs_increase(self) -> None:
        assert sorted(self.masters_by_epoch) == list(range(1, self.controller_epoch + 1))
        for broker in self.b.values():
            epochs = [e.epoch for e in broker.epochs]
            assert epochs == sorted(set(epochs))

    @invariant()
    def i4_confirm_within_acks(self) -> None:
        for master in self.b.values():
            if master.sss is None:
                continue
            assert master.confirm <= master.end
            for member in master.sss.view():
                ack = master.acks.get(member)
                shrinking = master.sss.pending is not None and member not in master.sss.pending
                if ack is not None and not shrinking:
                    assert master.confirm <= ack, f"I4: confirm {master.confirm} > ack {ack}"

    @invariant()
    def i5_nothing_confirmed_is_truncated(self) -> None:
        master_id = self.controller_master
        if master_id is None:
            return
        log = self.b[master_id].log
        for offset, key in self.seen.items():
            if key in self.allowed_lost:
                continue
            assert offset < len(log), f"I5: visible key {key} at {offset} was truncated"
            assert log[offset][1] == key, f"I5: visible key {key} at {offset} was replaced"

    @invariant()
    def i6_visible_within_confirm(self) -> None:
        for broker in self.b.values():
            assert broker.visible <= broker.confirm <= broker.end


ReplicationModel.TestCase.settings = settings(max_examples=300, stateful_step_count=50,
                                              deadline=None)
test_replication_model = ReplicationModel.TestCase


class WithoutAllAck(ReplicationModel):
    all_ack_in_sync_state_set = False  # Java's default: the master alone acknowledges


class WithoutPendingUnion(ReplicationModel):
    count_pending_union = False  # RocketMQ #5663: only the controller-confirmed set counts


@pytest.mark.parametrize("model", [WithoutAllAck, WithoutPendingUnion],
                         ids=["allAck-off", "no-union-5663"])
def test_the_model_catches_unsafe_rules(model: type[ReplicationModel]) -> None:
    """Negative controls: the invariants must fail when a safety rule is switched off."""
    with pytest.raises(AssertionError, match=r"I1|I4|I5|lacks acknowledged"):
        run_state_machine_as_test(
            model, settings=settings(max_examples=3000, stateful_step_count=50, deadline=None,
                                     database=None, derandomize=True,
                                     phases=[Phase.generate]),  # the first failure is enough
        )
