"""SyncStateSet rules: confirmOffset (#6662, M4), shrink, expand, acks (#5663, §11)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ha.sync_state_set import (
    SyncStateSet,
    can_expand,
    compute_confirm_offset,
    is_acknowledged,
    shrink_sync_state_set,
)

MASTER = 1


def naive_confirm(max_phy: int, sss: set[int], acks: dict[int, int], previous: int) -> int:
    """Three lines of reference: frozen if a member is gone, else min ack, never backwards."""
    if any(m != MASTER and m not in acks for m in sss):
        return previous
    return max(previous, min([max_phy] + [acks[m] for m in sss if m != MASTER]))


@given(
    max_phy=st.integers(0, 1000),
    sss=st.sets(st.integers(1, 5)),
    acks=st.dictionaries(st.integers(2, 6), st.integers(0, 1000)),
    previous=st.integers(0, 1000),
)
def test_compute_confirm_offset_matches_the_naive_twin(
    max_phy: int, sss: set[int], acks: dict[int, int], previous: int
) -> None:
    sss |= {MASTER}
    assert compute_confirm_offset(
        max_phy_offset=max_phy, sync_state_set=frozenset(sss), master_broker_id=MASTER,
        ack_by_slave=acks, previous_confirm_offset=previous,
    ) == naive_confirm(max_phy, sss, acks, previous)


@pytest.mark.parametrize(
    ("sss", "acks", "previous", "expected"),
    [
        pytest.param({1}, {}, 0, 500, id="master-alone-is-max"),
        pytest.param({1, 2, 3}, {2: 300, 3: 400}, 0, 300, id="min-of-members"),
        pytest.param({1, 2, 3}, {2: 300}, 100, 100, id="frozen-while-3-disconnected-6662"),
        pytest.param({1, 2}, {2: 50, 3: 10}, 100, 100, id="never-backwards-M4"),
        pytest.param({1, 2}, {2: 400, 3: 10}, 100, 400, id="non-members-do-not-count"),
    ],
)
def test_compute_confirm_offset(
    sss: set[int], acks: dict[int, int], previous: int, expected: int
) -> None:
    assert compute_confirm_offset(
        max_phy_offset=500, sync_state_set=frozenset(sss), master_broker_id=MASTER,
        ack_by_slave=acks, previous_confirm_offset=previous,
    ) == expected


@pytest.mark.parametrize(
    ("caught_up", "connected", "expected"),
    [
        pytest.param({2: 9_000, 3: 9_000}, {2, 3}, {1, 2, 3}, id="all-fresh"),
        pytest.param({2: 9_000, 3: 4_000}, {2, 3}, {1, 2}, id="3-lags-over-5s"),
        pytest.param({2: 9_000, 3: 5_000}, {2, 3}, {1, 2, 3}, id="exactly-at-limit-stays"),
        pytest.param({2: 9_000}, {2, 3}, {1, 2}, id="3-never-caught-up"),
        pytest.param({2: 9_000, 3: 9_000}, {2}, {1, 2}, id="3-disconnected"),
    ],
)
def test_shrink(caught_up: dict[int, int], connected: set[int], expected: set[int]) -> None:
    assert shrink_sync_state_set(
        frozenset({1, 2, 3}), master_broker_id=MASTER, now_ms=10_000,
        last_caught_up_ms_by_slave=caught_up, connected=connected,
        ha_max_time_slave_not_catchup_ms=5_000,
    ) == frozenset(expected)


@pytest.mark.parametrize(
    ("ack", "learner", "expected"),
    [
        pytest.param(1000, False, True, id="caught-up"),
        pytest.param(999, False, False, id="below-confirm"),
        pytest.param(1000, True, False, id="async-learner-never"),
    ],
)
def test_can_expand(ack: int, learner: bool, expected: bool) -> None:
    assert can_expand(slave_ack_offset=ack, confirm_offset=1000, current_epoch_start_offset=800,
                      last_master_max_offset=1000, is_async_learner=learner) is expected


def test_can_expand_needs_the_current_epoch_start() -> None:
    assert not can_expand(slave_ack_offset=700, confirm_offset=600, current_epoch_start_offset=800,
                          last_master_max_offset=600, is_async_learner=False)


def test_pending_change_counts_the_union_5663() -> None:
    sss = SyncStateSet(master_broker_id=MASTER, local=frozenset({1, 2}), sync_state_set_epoch=3)
    assert sss.propose(frozenset({1})) == frozenset({1})  # shrink proposed, not yet committed
    assert sss.view() == frozenset({1, 2})
    assert sss.in_sync_replicas_nums() == 2
    assert not is_acknowledged(100, sync_state_set=sss.view(), master_broker_id=MASTER,
                               ack_by_slave={}, all_ack_in_sync_state_set=True,
                               in_sync_replicas=1)
    assert sss.apply(frozenset({1}), 4)
    assert sss.view() == frozenset({1})
    assert is_acknowledged(100, sync_state_set=sss.view(), master_broker_id=MASTER,
                           ack_by_slave={}, all_ack_in_sync_state_set=True, in_sync_replicas=1)


def test_expand_pending_counts_the_new_member_at_once() -> None:
    sss = SyncStateSet(master_broker_id=MASTER, local=frozenset({1}), sync_state_set_epoch=1)
    sss.propose(frozenset({1, 2}))
    assert not is_acknowledged(100, sync_state_set=sss.view(), master_broker_id=MASTER,
                               ack_by_slave={2: 99}, all_ack_in_sync_state_set=True,
                               in_sync_replicas=1)
    assert is_acknowledged(100, sync_state_set=sss.view(), master_broker_id=MASTER,
                           ack_by_slave={2: 100}, all_ack_in_sync_state_set=True,
                           in_sync_replicas=1)


def test_apply_ignores_an_older_epoch_and_keeps_the_master() -> None:
    sss = SyncStateSet(master_broker_id=MASTER, local=frozenset({2}), sync_state_set_epoch=5)
    assert sss.local == frozenset({1, 2})
    assert not sss.apply(frozenset({1, 2, 3}), 5)
    assert sss.apply(frozenset({2, 3}), 6)
    assert sss.local == frozenset({1, 2, 3})


def test_propose_the_set_in_effect_sends_nothing() -> None:
    sss = SyncStateSet(master_broker_id=MASTER, local=frozenset({1, 2}))
    assert sss.propose(frozenset({2})) is None


def test_caught_up_keeps_the_latest_time() -> None:
    sss = SyncStateSet(master_broker_id=MASTER, local=frozenset({1}))
    sss.caught_up(2, 500)
    sss.caught_up(2, 300)
    assert sss.last_caught_up_ms_by_slave == {2: 500}


@pytest.mark.parametrize(
    ("acks", "in_sync_replicas", "expected"),
    [
        pytest.param({}, 1, True, id="one-replica-needs-nobody"),
        pytest.param({2: 100}, 2, True, id="any-slave-counts"),
        pytest.param({2: 99, 3: 100}, 3, False, id="two-slaves-needed"),
    ],
)
def test_in_sync_replicas_counting(
    acks: dict[int, int], in_sync_replicas: int, expected: bool
) -> None:
    assert is_acknowledged(100, sync_state_set=frozenset({1}), master_broker_id=MASTER,
                           ack_by_slave=acks, all_ack_in_sync_state_set=False,
                           in_sync_replicas=in_sync_replicas) is expected
