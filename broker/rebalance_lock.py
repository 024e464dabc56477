"""Which client of a consumer group may consume each queue orderly: Java's RebalanceLockManager.

An orderly consumer (MessageListenerOrderly) locks the queues its rebalance gave it with
LOCK_BATCH_MQ, renews the locks every 20 s, and consumes a queue only while it holds its lock;
it releases them with UNLOCK_BATCH_MQ when the rebalance takes a queue away or it shuts down.

Rules (`RebalanceLockManager.java`, 5.3.3):
- a lock entry is (client id, last update ms); it is expired when now - last update exceeds
  `lock_max_live_time_ms` (Java's `rocketmq.broker.rebalance.lockMaxLiveTime`, 60 000 ms);
- locking a queue succeeds when nobody holds it, when the caller holds it (renewed), or when the
  holder's entry expired (the caller takes it over); it fails while another client holds it;
- unlocking removes an entry only for its holder; other clients' unlocks are ignored;
- nothing is unlocked when a connection closes: the entry expires, as in Java.

A pure core: every call takes `now_ms`; the shell (broker/processors/rebalance.py) passes the
wall clock and logs what `LockOutcome` reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

REBALANCE_LOCK_MAX_LIVE_TIME_MS: Final = 60_000

_Q = TypeVar("_Q")


@dataclass(slots=True)
class _LockEntry:
    client_id: str
    last_update_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class LockOutcome(Generic[_Q]):
    """What `try_lock_batch` did: the queues the caller now holds, those it took over from an
    expired holder (queue, old client id), and those another client holds."""

    locked: frozenset[_Q]
    taken_over: tuple[tuple[_Q, str], ...] = ()
    held_by_others: tuple[tuple[_Q, str], ...] = ()


@dataclass(slots=True)
class RebalanceLockManager(Generic[_Q]):
    """The lock table: group -> queue -> entry. `_Q` is any hashable queue identity."""

    lock_max_live_time_ms: int = REBALANCE_LOCK_MAX_LIVE_TIME_MS
    _table: dict[str, dict[_Q, _LockEntry]] = field(default_factory=dict)

    def _expired(self, entry: _LockEntry, now_ms: int) -> bool:
        return now_ms - entry.last_update_timestamp_ms > self.lock_max_live_time_ms

    def try_lock_batch(
        self, group: str, mqs: Iterable[_Q], client_id: str, *, now_ms: int
    ) -> LockOutcome[_Q]:
        """Lock every queue of `mqs` that `client_id` may have; see the module rules."""
        entries = self._table.setdefault(group, {})
        locked: set[_Q] = set()
        taken_over: list[tuple[_Q, str]] = []
        held_by_others: list[tuple[_Q, str]] = []
        for mq in mqs:
            entry = entries.get(mq)
            if entry is None:
                entries[mq] = _LockEntry(client_id, now_ms)
                locked.add(mq)
            elif entry.client_id == client_id or self._expired(entry, now_ms):
                if entry.client_id != client_id:
                    taken_over.append((mq, entry.client_id))
                entry.client_id = client_id
                entry.last_update_timestamp_ms = now_ms
                locked.add(mq)
            else:
                held_by_others.append((mq, entry.client_id))
        return LockOutcome(frozenset(locked), tuple(taken_over), tuple(held_by_others))

    def unlock_batch(self, group: str, mqs: Iterable[_Q], client_id: str) -> frozenset[_Q]:
        """Release the queues of `mqs` that `client_id` holds; returns those released."""
        entries = self._table.get(group)
        if entries is None:
            return frozenset()
        released = {mq for mq in mqs if (e := entries.get(mq)) and e.client_id == client_id}
        for mq in released:
            del entries[mq]
        if not entries:
            del self._table[group]
        return frozenset(released)

    def holder(self, group: str, mq: _Q, *, now_ms: int) -> str | None:
        """The client that holds `mq` for `group` now, or None (never locked, or expired)."""
        entry = self._table.get(group, {}).get(mq)
        if entry is None or self._expired(entry, now_ms):
            return None
        return entry.client_id

    def is_lock_all_expired(self, group: str, *, now_ms: int) -> bool:
        """True when no queue of `group` is held now (Java's `isLockAllExpired`)."""
        return all(self._expired(e, now_ms) for e in self._table.get(group, {}).values())
