"""The controller's table of live brokers, fed by BROKER_HEARTBEAT (904): RocketMQ's
`DefaultBrokerHeartbeatManager` as a pure core (docs/replicas-manager.md §5, §9.2).

Records are keyed by (clusterName, brokerName, brokerId). The first heartbeat of a key creates
its record (address, channel, timeout, epoch, maxOffset, confirmOffset, priority); later ones
refresh the time, the timeout and the priority, and replace (epoch, maxOffset, confirmOffset)
only when (epoch, maxOffset) increased. A broker is alive iff `last_update_ms + timeout_ms >=
now_ms`. The table is not persisted: after a restart every broker is unknown (not alive) until
its next heartbeat, as in Java.

Invariants:
- A record's address and channel never change; a broker that reconnects keeps its first channel
  until that channel's close (or a timeout) drops the record, and its next heartbeat makes a new
  one.
- (epoch, max_offset) of a record never decreases.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

HEARTBEAT_TIMEOUT_MS_DEFAULT: Final = 10_000
ELECTION_PRIORITY_DEFAULT: Final = 2**31 - 1

BrokerKey = tuple[str, str, int]
"""(clusterName, brokerName, brokerId)."""
ChannelId = int


@dataclass(frozen=True, slots=True)
class BrokerLiveInfo:
    """What the last heartbeats of one broker said (Java's `BrokerLiveInfo`)."""

    broker_addr: str
    channel: ChannelId
    heartbeat_timeout_ms: int
    last_update_ms: int
    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    election_priority: int = ELECTION_PRIORITY_DEFAULT

    def alive(self, now_ms: int) -> bool:
        return self.last_update_ms + self.heartbeat_timeout_ms >= now_ms


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One BROKER_HEARTBEAT's values, absent numbers already given their defaults."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    heartbeat_timeout_ms: int = HEARTBEAT_TIMEOUT_MS_DEFAULT
    election_priority: int = ELECTION_PRIORITY_DEFAULT


class BrokerHeartbeatManager:
    """The live-broker table. Feed it heartbeats, scans and channel closes; ask who is alive."""

    def __init__(self) -> None:
        self._live: dict[BrokerKey, BrokerLiveInfo] = {}

    def on_broker_heartbeat(self, heartbeat: Heartbeat, *, channel: ChannelId, now_ms: int) -> bool:
        """Record `heartbeat`, received on `channel` at `now_ms`; True if the broker was not in
        the table before (a new live record)."""
        key = (heartbeat.cluster_name, heartbeat.broker_name, heartbeat.broker_id)
        old = self._live.get(key)
        if old is None:
            self._live[key] = BrokerLiveInfo(
                broker_addr=heartbeat.broker_addr,
                channel=channel,
                heartbeat_timeout_ms=heartbeat.heartbeat_timeout_ms,
                last_update_ms=now_ms,
                epoch=heartbeat.epoch,
                max_offset=heartbeat.max_offset,
                confirm_offset=heartbeat.confirm_offset,
                election_priority=heartbeat.election_priority,
            )
            return True
        updated = replace(
            old,
            last_update_ms=now_ms,
            heartbeat_timeout_ms=heartbeat.heartbeat_timeout_ms,
            election_priority=heartbeat.election_priority,
        )
        if (heartbeat.epoch, heartbeat.max_offset) > (old.epoch, old.max_offset):
            updated = replace(
                updated,
                epoch=heartbeat.epoch,
                max_offset=heartbeat.max_offset,
                confirm_offset=heartbeat.confirm_offset,
            )
        self._live[key] = updated
        return False

    def get(self, key: BrokerKey) -> BrokerLiveInfo | None:
        return self._live.get(key)

    def is_alive(self, key: BrokerKey, *, now_ms: int) -> bool:
        info = self._live.get(key)
        return info is not None and info.alive(now_ms)

    def alive_in(
        self, cluster_name: str, broker_name: str, *, now_ms: int
    ) -> dict[int, BrokerLiveInfo]:
        """The alive brokers of one broker set, by broker id."""
        return {
            key[2]: info
            for key, info in self._live.items()
            if key[0] == cluster_name and key[1] == broker_name and info.alive(now_ms)
        }

    def next_expiry_ms(self) -> int | None:
        """When the first live record expires (its last heartbeat plus its timeout), or None
        with no live record."""
        return min((info.last_update_ms + info.heartbeat_timeout_ms
                    for info in self._live.values()), default=None)

    def scan_not_active(self, *, now_ms: int) -> list[tuple[BrokerKey, BrokerLiveInfo]]:
        """Drop and return every record whose timeout has passed (the shell closes their
        channels and raises "inactive" for each)."""
        expired = [(key, info) for key, info in self._live.items() if not info.alive(now_ms)]
        for key, _ in expired:
            del self._live[key]
        return expired

    def on_channel_close(self, channel: ChannelId) -> list[tuple[BrokerKey, BrokerLiveInfo]]:
        """Drop and return every record that came in on `channel`."""
        closed = [(key, info) for key, info in self._live.items() if info.channel == channel]
        for key, _ in closed:
            del self._live[key]
        return closed

    def forget(
        self, cluster_name: str, broker_name: str, broker_ids: frozenset[int] | None
    ) -> None:
        """Drop the records of a cleaned broker set (`None`: every id of it)."""
        for key in [
            key
            for key in self._live
            if key[0] == cluster_name
            and key[1] == broker_name
            and (broker_ids is None or key[2] in broker_ids)
        ]:
            del self._live[key]
