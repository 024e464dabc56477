"""The ReplicasManager's pure role decisions (broker/replicas_state.py): tables and hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.replicas_state import (
    ApplySyncStateSet,
    BecomeMaster,
    BecomeSlave,
    ControllerView,
    Elect,
    Ignore,
    MasterLease,
    RoleState,
    Source,
    apply,
    decide,
    default_lease_ms,
    lease_renews,
    lost_committed_hold_ms,
)

SELF = 2
FRESH = RoleState(SELF)
SLAVE_OF_1 = RoleState(SELF, master_epoch=3, master_broker_id=1, master_address="h:1")
MASTER = RoleState(SELF, master_epoch=3, master_broker_id=SELF, sync_state_set=frozenset({2}),
                   sync_state_set_epoch=4)


def view(master: int | None, epoch: int | None, *, address: str | None = "h:9",
         sss: frozenset[int] = frozenset(), sss_epoch: int | None = None) -> ControllerView:
    return ControllerView(master, address if master is not None else None, epoch, sss, sss_epoch)


@pytest.mark.parametrize(("role", "seen", "source", "expected"), [
    # fresh broker
    (FRESH, view(SELF, 1, sss=frozenset({2}), sss_epoch=1), Source.ELECT,
     BecomeMaster(1, frozenset({2}), 1)),
    (FRESH, view(1, 1), Source.REGISTER, BecomeSlave("h:9", 1, 1, same_master=False)),
    (FRESH, view(None, None), Source.REGISTER, Elect()),
    (FRESH, view(None, None), Source.PUSH, Ignore("no master in the answer")),
    (FRESH, view(1, 0), Source.POLL, Ignore("master epoch 0 is not above 0")),
    # a slave
    (SLAVE_OF_1, view(1, 3, address="h:1"), Source.POLL, Ignore("master epoch 3 is not above 3")),
    (SLAVE_OF_1, view(1, 2, address="h:1"), Source.PUSH, Ignore("stale master epoch 2 < 3")),
    (SLAVE_OF_1, view(1, 4, address="h:1"), Source.POLL,
     BecomeSlave("h:1", 4, 1, same_master=True)),
    (SLAVE_OF_1, view(1, 4, address="h:7"), Source.POLL,
     BecomeSlave("h:7", 4, 1, same_master=False)),
    (SLAVE_OF_1, view(3, 4), Source.PUSH, BecomeSlave("h:9", 4, 3, same_master=False)),
    (SLAVE_OF_1, view(SELF, 4, sss=frozenset({2, 3}), sss_epoch=9), Source.PUSH,
     BecomeMaster(4, frozenset({2, 3}), 9)),
    (SLAVE_OF_1, view(None, 5), Source.POLL, Elect()),  # a failed election raised the epoch
    (SLAVE_OF_1, view(None, 5), Source.PUSH, Ignore("no master in the answer")),
    (SLAVE_OF_1, view(None, 3), Source.POLL, Ignore("no master in the answer")),
    (SLAVE_OF_1, view(None, None), Source.REGISTER, Ignore("no master in the answer")),
    # a master
    (MASTER, view(SELF, 3, sss=frozenset({1, 2}), sss_epoch=5), Source.POLL,
     ApplySyncStateSet(frozenset({1, 2}), 5)),
    (MASTER, view(SELF, 3, sss=frozenset({1, 2}), sss_epoch=4), Source.POLL,
     Ignore("SyncStateSet unchanged")),
    (MASTER, view(SELF, 3, sss=frozenset({1}), sss_epoch=None), Source.POLL,
     Ignore("no SyncStateSet epoch")),
    (MASTER, view(1, 4), Source.PUSH, BecomeSlave("h:9", 4, 1, same_master=False)),
    (MASTER, view(1, 3), Source.PUSH, Ignore("master epoch 3 is not above 3")),
    (MASTER, view(SELF, 5, sss=frozenset({1}), sss_epoch=6), Source.POLL,
     BecomeMaster(5, frozenset({1, 2}), 6)),
    (MASTER, view(SELF, 5), Source.ELECT, BecomeMaster(5, frozenset({2}), 4)),
])
def test_decide(role: RoleState, seen: ControllerView, source: Source, expected: object) -> None:
    assert decide(role, seen, source) == expected


def test_apply_tracks_the_role_and_keeps_the_controller_id() -> None:
    master = apply(FRESH, BecomeMaster(1, frozenset({2}), 1))
    assert (master.is_master, master.name_server_broker_id, master.master_epoch) == (True, 0, 1)
    slave = apply(master, BecomeSlave("h:1", 2, 1, same_master=False))
    assert (slave.is_master, slave.name_server_broker_id, slave.master_address) == \
        (False, SELF, "h:1")
    assert apply(slave, BecomeSlave("h:x", 3, 1, same_master=True)).master_address == "h:1"
    newer = apply(master, ApplySyncStateSet(frozenset({1, 2}), 2))
    assert newer.sync_state_set == {1, 2}
    assert apply(newer, ApplySyncStateSet(frozenset({2}), 2)) == newer  # not newer: kept


roles = st.builds(
    RoleState, broker_id=st.integers(1, 4), master_epoch=st.integers(0, 6),
    master_broker_id=st.none() | st.integers(1, 4), master_address=st.none() | st.sampled_from(
        ["h:1", "h:2"]), sync_state_set=st.frozensets(st.integers(1, 4)),
    sync_state_set_epoch=st.integers(0, 6))
views = st.builds(
    ControllerView, master_broker_id=st.none() | st.integers(1, 4),
    master_address=st.none() | st.sampled_from(["", "h:1", "h:2"]),
    master_epoch=st.none() | st.integers(0, 8), sync_state_set=st.frozensets(st.integers(1, 4)),
    sync_state_set_epoch=st.none() | st.integers(0, 8))


@given(roles, views, st.sampled_from(Source))
def test_role_changes_only_forward_and_only_as_the_controller_says(
    role: RoleState, seen: ControllerView, source: Source,
) -> None:
    action = decide(role, seen, source)
    after = apply(role, action)
    assert after.master_epoch >= role.master_epoch
    if not isinstance(action, BecomeMaster):  # a new master takes the controller's set as is
        assert after.sync_state_set_epoch >= role.sync_state_set_epoch
    assert after.broker_id == role.broker_id
    if isinstance(action, BecomeMaster | BecomeSlave):
        assert seen.master_epoch is not None
        assert seen.master_epoch > role.master_epoch
        assert action.master_epoch == seen.master_epoch
    if isinstance(action, BecomeMaster):
        assert seen.master_broker_id == role.broker_id  # never self-appointed
        assert role.broker_id in action.sync_state_set
    if isinstance(action, BecomeSlave):
        assert seen.master_broker_id == action.master_broker_id != role.broker_id
    if isinstance(action, ApplySyncStateSet):
        assert role.is_master
        assert seen.master_epoch == role.master_epoch
        assert action.sync_state_set_epoch > role.sync_state_set_epoch
    if isinstance(action, Elect):
        assert not seen.has_master
    # Deciding again on the same answer changes nothing more (idempotent).
    assert apply(after, decide(after, seen, source)) == after or \
        isinstance(decide(after, seen, source), Elect)


@given(st.lists(st.integers(0, 10_000), min_size=1), st.integers(1, 5_000),
       st.integers(0, 20_000))
def test_the_lease_runs_from_the_latest_renewal(renewals: list[int], lease_ms: int,
                                                now: int) -> None:
    lease = MasterLease(lease_ms)
    assert not lease.valid(now)
    for at in renewals:
        lease.renew(at)
    assert lease.valid(now) == (now < max(renewals) + lease_ms)
    lease.revoke()
    assert not lease.valid(now)


@pytest.mark.parametrize("timeout_ms", [1_500, 10_000])
def test_lease_and_hold_bracket_the_controllers_heartbeat_timeout(timeout_ms: int) -> None:
    assert default_lease_ms(timeout_ms) < timeout_ms  # M17: expires before the controller acts
    assert lost_committed_hold_ms(timeout_ms) > timeout_ms  # M9: past the timeout and scans


# (what the leader's replica info said of this master, controllers answering, controllers,
#  the lease had lapsed at the round's send time, renews)
LEASE_RENEWALS = [
    (True, 1, 3, False, True),    # the leader names it master at its epoch
    (True, 0, 1, False, True),
    (True, 0, 1, True, True),     # lapsed: the leader's word alone renews it
    (None, 2, 3, False, True),    # no leader answer: a majority keeps it (leader failover)
    (None, 1, 3, False, False),   # no majority
    (None, 1, 1, False, True),
    (None, 3, 3, True, False),    # lapsed: it may have been deposed meanwhile
    (None, 1, 1, True, False),
    (False, 3, 3, False, False),  # deposed: another master or epoch; a majority must not renew it
    (False, 1, 1, False, False),
]


@pytest.mark.parametrize(("named_master", "answered", "controllers", "lapsed", "renews"),
                         LEASE_RENEWALS)
def test_a_heartbeat_round_renews_the_lease_only_while_not_deposed(
        named_master: bool | None, answered: int, controllers: int, lapsed: bool,
        renews: bool) -> None:
    assert lease_renews(named_master=named_master, answered=answered, controllers=controllers,
                        lapsed=lapsed) is renews
