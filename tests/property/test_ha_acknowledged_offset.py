"""`acknowledged_offset` (computed once per ack) says what `is_acknowledged` (the rule, per
send) says, for every end offset."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ha.sync_state_set import acknowledged_offset, is_acknowledged

MASTER = 1


@given(members=st.frozensets(st.integers(1, 6)),
       acks=st.dictionaries(st.integers(2, 6), st.integers(0, 50)),
       all_ack=st.booleans(), in_sync_replicas=st.integers(0, 7),
       ends=st.lists(st.integers(0, 60), max_size=20))
def test_acknowledged_offset_is_is_acknowledged_for_every_end_offset(
    members: frozenset[int], acks: dict[int, int], all_ack: bool, in_sync_replicas: int,
    ends: list[int],
) -> None:
    sync_state_set = members | {MASTER}
    bound = acknowledged_offset(sync_state_set=sync_state_set, master_broker_id=MASTER,
                                ack_by_slave=acks, all_ack_in_sync_state_set=all_ack,
                                in_sync_replicas=in_sync_replicas)
    for end in [*ends, *acks.values(), *(ack + 1 for ack in acks.values())]:
        assert is_acknowledged(end, sync_state_set=sync_state_set, master_broker_id=MASTER,
                               ack_by_slave=acks, all_ack_in_sync_state_set=all_ack,
                               in_sync_replicas=in_sync_replicas) == \
            (bound is None or end <= bound)
