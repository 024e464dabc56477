"""Who becomes master: RocketMQ's `DefaultElectPolicy` as one pure function
(docs/replicas-manager.md §9.3 step 3).

For the SyncStateSet, then (only with unclean election on) for every registered replica:
1. keep only the alive candidates;
2. if the old master is alive among them and no other broker is preferred, keep it;
3. if a broker is preferred (an admin's designated election), choose it if it is alive and a
   candidate, else nothing from this list;
4. else the best by: higher reported epoch, then higher maxOffset, then lower electionPriority,
   then (pyrmq's tie-break) the lower broker id.

Differences from Java, on purpose: Java compares maxOffset through an int cast of the long
difference and priorities through an int subtraction, both of which can overflow and order
wrongly (docs/replicas-manager.md §9.3); pyrmq compares the numbers. Java collapses candidates equal
on all three keys into one TreeSet entry (the first inserted, i.e. the lowest id of a small
HashSet); the id tie-break gives the same choice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controller.broker_heartbeat import BrokerLiveInfo


def _choose(
    candidates: Iterable[int],
    *,
    alive: Mapping[int, BrokerLiveInfo],
    old_master: int | None,
    preferred_broker_id: int | None,
) -> int | None:
    live = sorted(broker_id for broker_id in candidates if broker_id in alive)
    if not live:
        return None
    if old_master in live and preferred_broker_id in (None, old_master):
        return old_master
    if preferred_broker_id is not None:
        return preferred_broker_id if preferred_broker_id in live else None
    return min(
        live,
        key=lambda broker_id: (
            -alive[broker_id].epoch,
            -alive[broker_id].max_offset,
            alive[broker_id].election_priority,
            broker_id,
        ),
    )


def elect(
    *,
    sync_state_set: frozenset[int],
    all_replicas: frozenset[int] | None,
    old_master: int | None,
    preferred_broker_id: int | None,
    alive: Mapping[int, BrokerLiveInfo],
) -> int | None:
    """The broker id to be master, or None when no candidate qualifies.

    `alive` holds the live heartbeat records of the set by broker id; `all_replicas` is every
    registered id when unclean election is enabled, else None (never look outside the set).
    """
    chosen = _choose(
        sync_state_set,
        alive=alive,
        old_master=old_master,
        preferred_broker_id=preferred_broker_id,
    )
    if chosen is None and all_replicas is not None:
        chosen = _choose(
            all_replicas,
            alive=alive,
            old_master=old_master,
            preferred_broker_id=preferred_broker_id,
        )
    return chosen
