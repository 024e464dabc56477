"""The name server's route tables (RocketMQ's `RouteInfoManager`), as a pure state machine.

Four tables, named as in RocketMQ:
- `cluster_addr_table`: clusterName -> the brokerNames registered in it;
- `broker_addr_table`: brokerName -> its broker set (`BrokerData`): cluster and brokerAddrs
  (name-server brokerId -> `ip:port`; id 0 is the master, slaves keep their controller id);
- `topic_queue_table`: topic -> brokerName -> `QueueData` (queue counts, perm, sysflag), taken
  from the topic configs of the set's master (or, with no master, of its lowest-id slave);
- `broker_live_table`: (clusterName, brokerAddr) -> `BrokerLiveInfo`: last registration time,
  heartbeat timeout, the registered topic-config `DataVersion`, the connection it came on and its
  HA address (which a slave's REGISTER_BROKER response carries, docs/ha-protocol.md §4).

Time comes in as `now_ms` (any monotonic millisecond clock); the channel a registration came on
as an opaque `ChannelId` the shell chose. Nothing here does I/O or logs: each call returns what
happened, and the shell logs it and closes the channels it is told to.

Invariants:
- An address appears under at most one brokerId of a broker set (re-registering under a new id,
  e.g. slave -> master, removes the old id first).
- A broker set with no address left is removed, and so are its name in `cluster_addr_table`
  (an empty cluster too) and its `QueueData` (a topic left without any too).
- Topic configs are (re)read from a registration only if the broker set is new, the address's
  `DataVersion` differs from its previous registration, or the topic has no `QueueData` for this
  broker set yet: an unchanged `DataVersion` keeps the route as it is.
- Queries return copies; nothing returned aliases a table.

Deliberate differences from Java (docs/remoting-protocol.md §7.1, RouteInfoManager.java):
- A refused registration (first registration of an id with exactly one topic) changes nothing;
  Java has already added the broker name to its cluster and created an empty broker set.
- A live record that expires or whose channel closes is always removed, even if its address is in
  no broker set any more (Java then keeps the record and scans it again every 5 s forever).
- A closed channel removes every broker registered on it (Java: the first one found).
- Not modelled: filter servers, static-topic mapping tables, the acting-master route rewrite
  (`supportActingMaster`, off by default), min-broker-id-change notifications (off by default),
  `deleteTopicWithBrokerRegistration` (off by default).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, TypeAlias

from controller.errors import RegisterBrokerRefusedError
from controller.java_hash_order import (
    copied_map_capacity,
    copied_set_capacity,
    grown_capacity,
    long_key_order,
    string_key_order,
)
from remoting.bodies import (
    PERM_WRITE,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicRouteData,
)
from remoting.headers import RegisterBrokerRequestHeader

ChannelId: TypeAlias = int
"""The shell's name for one connection; the core only compares it."""

MASTER_ID: Final = 0
"""`MixAll.MASTER_ID`: the name-server brokerId of a broker set's master."""
BROKER_CHANNEL_EXPIRED_TIME_MS_DEFAULT: Final = 120_000
"""`DEFAULT_BROKER_CHANNEL_EXPIRED_TIME`: a broker that has not re-registered for this long is
removed, unless it registered with its own `heartbeatTimeoutMillis`."""

# Java's table sizes: `new ConcurrentHashMap<>(128)` and `(32)` have 256 and 64 buckets.
_BROKER_ADDR_TABLE_CAPACITY: Final = 256
_CLUSTER_ADDR_TABLE_CAPACITY: Final = 64


@dataclass(frozen=True, slots=True)
class BrokerAddrInfo:
    """Key of the live table: brokers are alive per (cluster, address)."""

    cluster_name: str
    broker_addr: str


@dataclass(frozen=True, slots=True)
class BrokerLiveInfo:
    """One registered address: when it last registered, how long that lasts, what it sent."""

    last_update_timestamp_ms: int
    heartbeat_timeout_ms: int
    data_version: DataVersion
    channel: ChannelId
    ha_server_addr: str


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """What a REGISTER_BROKER did.

    `ha_server_addr` and `master_addr` are set only for a slave (brokerId != 0) whose broker set
    has a live master: that master's HA and remoting addresses, the response header.
    `new_broker` is true for the first live record of this (cluster, address).
    `stale_state_version_of` is set when the registration was ignored because another address
    holds this brokerId with a higher `stateVersion` (its value: that address); the response
    is still SUCCESS with an empty header, as Java's.
    """

    ha_server_addr: str | None = None
    master_addr: str | None = None
    new_broker: bool = False
    stale_state_version_of: str | None = None


@dataclass(frozen=True, slots=True)
class RemovedBroker:
    """One address taken out of the tables (unregistered, expired, or its channel closed).

    `broker_name` / `broker_id` are None when the address was in no broker set (only its live
    record went); `broker_set_removed` is true when the set had no address left, so it is gone
    with its queues. `live_info` is the live record removed, None if there was none.
    """

    broker_addr_info: BrokerAddrInfo
    broker_name: str | None
    broker_id: int | None
    broker_set_removed: bool
    live_info: BrokerLiveInfo | None


@dataclass(slots=True)
class _BrokerSet:
    """A mutable `BrokerData`: `broker_addrs` in insertion order (Java's HashMap reorders)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]
    zone_name: str | None = None
    enable_acting_master: bool = False


class RouteInfoManager:
    """The route tables; see the module docstring for the rules."""

    def __init__(
        self, *, broker_channel_expired_time_ms: int = BROKER_CHANNEL_EXPIRED_TIME_MS_DEFAULT
    ) -> None:
        if broker_channel_expired_time_ms <= 0:
            raise ValueError(
                f"broker_channel_expired_time_ms={broker_channel_expired_time_ms} must be positive"
            )
        self._broker_channel_expired_time_ms = broker_channel_expired_time_ms
        # Dicts as insertion-ordered sets and maps: queries turn them into Java's order.
        self._cluster_addr_table: dict[str, dict[str, None]] = {}
        self._broker_addr_table: dict[str, _BrokerSet] = {}
        self._topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self._broker_live_table: dict[BrokerAddrInfo, BrokerLiveInfo] = {}

    # -- queries ---------------------------------------------------------------------------

    @property
    def broker_live_table(self) -> dict[BrokerAddrInfo, BrokerLiveInfo]:
        """A copy of the live table."""
        return dict(self._broker_live_table)

    def topics(self) -> list[str]:
        """Every topic with queues on some broker set, in registration order."""
        return list(self._topic_queue_table)

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC's answer: the topic's queues on each broker set and those sets'
        addresses. None means TOPIC_NOT_EXIST: no broker set has the topic.

        Lists and maps come in the order Java's `pickupTopicRouteData` produces them (queues in
        the topic's HashMap order, broker sets in a HashSet copy's order, each set's addresses
        in a HashMap copy's order); `filter_server_table` is always empty.
        """
        queue_data_map = self._topic_queue_table.get(topic)
        if not queue_data_map:
            return None
        names = string_key_order(queue_data_map, capacity=grown_capacity(len(queue_data_map)))
        broker_datas = tuple(
            _route_broker_data(broker_set)
            for name in string_key_order(names, capacity=copied_set_capacity(len(names)))
            if (broker_set := self._broker_addr_table.get(name)) is not None
        )
        if not broker_datas:
            return None
        return TopicRouteData(
            queue_datas=tuple(queue_data_map[name] for name in names), broker_datas=broker_datas
        )

    def get_all_cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO's answer: every broker set and every cluster's broker names,
        in the iteration order of Java's tables."""
        broker_names = string_key_order(
            self._broker_addr_table,
            capacity=grown_capacity(
                len(self._broker_addr_table), initial=_BROKER_ADDR_TABLE_CAPACITY
            ),
        )
        clusters = string_key_order(
            self._cluster_addr_table,
            capacity=grown_capacity(
                len(self._cluster_addr_table), initial=_CLUSTER_ADDR_TABLE_CAPACITY
            ),
        )
        return ClusterInfo(
            broker_addr_table={
                name: _broker_data(
                    self._broker_addr_table[name],
                    _live_order(self._broker_addr_table[name].broker_addrs),
                )
                for name in broker_names
            },
            cluster_addr_table={
                cluster: tuple(
                    string_key_order(
                        self._cluster_addr_table[cluster],
                        capacity=grown_capacity(len(self._cluster_addr_table[cluster])),
                    )
                )
                for cluster in clusters
            },
        )

    # -- changes ---------------------------------------------------------------------------

    def register_broker(
        self,
        header: RegisterBrokerRequestHeader,
        topic_config_wrapper: TopicConfigAndMappingSerializeWrapper,
        *,
        channel: ChannelId,
        now_ms: int,
    ) -> RegisterBrokerResult:
        """Apply one REGISTER_BROKER (RocketMQ's `registerBroker`), received at `now_ms`.

        Raises RegisterBrokerRefusedError, changing nothing, for the first registration of a
        brokerId whose topic table holds exactly one topic.
        """
        cluster_name = header.cluster_name
        broker_addr = header.broker_addr
        broker_name = header.broker_name
        broker_id = header.broker_id
        broker_set = self._broker_addr_table.get(broker_name)
        if (broker_set is None or broker_id not in broker_set.broker_addrs) and len(
            topic_config_wrapper.topic_config_table
        ) == 1:
            raise RegisterBrokerRefusedError(
                f"register broker {broker_name}[{broker_id}]={broker_addr}: a first registration "
                f"with exactly one topic ({next(iter(topic_config_wrapper.topic_config_table))})"
            )

        self._cluster_addr_table.setdefault(cluster_name, {})[broker_name] = None
        register_first = broker_set is None
        if broker_set is None:
            broker_set = _BrokerSet(cluster=cluster_name, broker_name=broker_name, broker_addrs={})
            self._broker_addr_table[broker_name] = broker_set
        # A broker that does not send enableActingMaster predates 5.0 (no prime-slave rule).
        is_old_version_broker = header.enable_acting_master is None
        broker_set.enable_acting_master = bool(header.enable_acting_master)
        broker_set.zone_name = header.zone_name
        broker_addrs = broker_set.broker_addrs

        # One address, one id: a slave that became master moves from its id to 0.
        for other_id in [i for i, a in broker_addrs.items() if a == broker_addr and i != broker_id]:
            del broker_addrs[other_id]

        address_info = BrokerAddrInfo(cluster_name, broker_addr)
        data_version = topic_config_wrapper.data_version
        old_addr = broker_addrs.get(broker_id)
        if old_addr is not None and old_addr != broker_addr:
            holder = self._broker_live_table.get(BrokerAddrInfo(cluster_name, old_addr))
            # stateVersion is the master epoch: a stale old master must not win the id back.
            holder_state_version = None if holder is None else holder.data_version.state_version
            if (
                holder_state_version is not None
                and holder_state_version > data_version.state_version
            ):
                self._broker_live_table.pop(address_info, None)
                return RegisterBrokerResult(stale_state_version_of=old_addr)

        broker_addrs[broker_id] = broker_addr
        register_first = register_first or not old_addr
        previous = self._broker_live_table.get(address_info)
        is_master = broker_id == MASTER_ID
        is_prime_slave = (
            not is_old_version_broker and not is_master and broker_id == min(broker_addrs)
        )
        if is_master or is_prime_slave:
            data_version_changed = previous is None or previous.data_version != data_version
            for topic_config in topic_config_wrapper.topic_config_table.values():
                if (
                    register_first
                    or data_version_changed
                    or broker_name not in self._topic_queue_table.get(topic_config.topic_name, {})
                ):
                    perm = topic_config.perm
                    if is_prime_slave and broker_set.enable_acting_master:
                        perm &= ~PERM_WRITE  # an acting master is read-only
                    self._create_and_update_queue_data(broker_name, topic_config, perm)

        heartbeat_timeout_ms = header.heartbeat_timeout_millis
        self._broker_live_table[address_info] = BrokerLiveInfo(
            last_update_timestamp_ms=now_ms,
            heartbeat_timeout_ms=(
                self._broker_channel_expired_time_ms
                if heartbeat_timeout_ms is None
                else heartbeat_timeout_ms
            ),
            data_version=data_version,
            channel=channel,
            ha_server_addr=header.ha_server_addr,
        )

        if not is_master:
            master_addr = broker_addrs.get(MASTER_ID)
            if master_addr is not None:
                master_live = self._broker_live_table.get(BrokerAddrInfo(cluster_name, master_addr))
                if master_live is not None:
                    return RegisterBrokerResult(
                        ha_server_addr=master_live.ha_server_addr,
                        master_addr=master_addr,
                        new_broker=previous is None,
                    )
        return RegisterBrokerResult(new_broker=previous is None)

    def unregister_broker(
        self, *, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> RemovedBroker:
        """Apply one UNREGISTER_BROKER: the address leaves its live record and every id it holds
        in broker set `broker_name` (Java matches by address; `broker_id` is only reported)."""
        return self._unregister(
            BrokerAddrInfo(cluster_name, broker_addr), broker_name=broker_name, broker_id=broker_id
        )

    def scan_not_active_broker(self, *, now_ms: int) -> list[RemovedBroker]:
        """Remove every address whose last registration is more than its heartbeat timeout
        before `now_ms` (RocketMQ's `scanNotActiveBroker`, run every 5 s). The shell closes each
        returned `live_info.channel`, as Java does."""
        expired = [
            address_info
            for address_info, live_info in self._broker_live_table.items()
            if live_info.last_update_timestamp_ms + live_info.heartbeat_timeout_ms < now_ms
        ]
        return [self._on_address_gone(address_info) for address_info in expired]

    def on_channel_destroy(self, channel: ChannelId) -> list[RemovedBroker]:
        """Remove every address registered on `channel`, which closed (RocketMQ's
        `BrokerHousekeepingService`: close, exception and idle all land here). A broker that has
        re-registered on a newer connection meanwhile is not affected."""
        gone = [
            address_info
            for address_info, live_info in self._broker_live_table.items()
            if live_info.channel == channel
        ]
        return [self._on_address_gone(address_info) for address_info in gone]

    # -- internals -------------------------------------------------------------------------

    def _on_address_gone(self, address_info: BrokerAddrInfo) -> RemovedBroker:
        """Unregister an address found in the live table (`onChannelDestroy`): its broker set
        is the first in the cluster that lists it."""
        for broker_set in self._broker_addr_table.values():
            if broker_set.cluster != address_info.cluster_name:
                continue
            for broker_id, addr in broker_set.broker_addrs.items():
                if addr == address_info.broker_addr:
                    return self._unregister(
                        address_info, broker_name=broker_set.broker_name, broker_id=broker_id
                    )
        return RemovedBroker(
            broker_addr_info=address_info,
            broker_name=None,
            broker_id=None,
            broker_set_removed=False,
            live_info=self._broker_live_table.pop(address_info, None),
        )

    def _unregister(
        self, address_info: BrokerAddrInfo, *, broker_name: str, broker_id: int
    ) -> RemovedBroker:
        live_info = self._broker_live_table.pop(address_info, None)
        broker_set = self._broker_addr_table.get(broker_name)
        broker_set_removed = False
        if broker_set is not None:
            broker_addrs = broker_set.broker_addrs
            for gone_id in [i for i, a in broker_addrs.items() if a == address_info.broker_addr]:
                del broker_addrs[gone_id]
            if not broker_addrs:
                broker_set_removed = True
                del self._broker_addr_table[broker_name]
                names = self._cluster_addr_table.get(address_info.cluster_name)
                if names is not None:
                    names.pop(broker_name, None)
                    if not names:
                        del self._cluster_addr_table[address_info.cluster_name]
                self._remove_queue_datas(broker_name)
            elif broker_set.enable_acting_master and min(broker_addrs) > MASTER_ID:
                self._wipe_write_perm(broker_name)  # the master left: no writes until it is back
        return RemovedBroker(
            broker_addr_info=address_info,
            broker_name=broker_name if broker_set is not None else None,
            broker_id=broker_id if broker_set is not None else None,
            broker_set_removed=broker_set_removed,
            live_info=live_info,
        )

    def _create_and_update_queue_data(
        self, broker_name: str, topic_config: TopicConfig, perm: int
    ) -> None:
        self._topic_queue_table.setdefault(topic_config.topic_name, {})[broker_name] = QueueData(
            broker_name=broker_name,
            read_queue_nums=topic_config.read_queue_nums,
            write_queue_nums=topic_config.write_queue_nums,
            perm=perm,
            topic_sys_flag=topic_config.topic_sys_flag,
        )

    def _remove_queue_datas(self, broker_name: str) -> None:
        for topic in list(self._topic_queue_table):
            queue_data_map = self._topic_queue_table[topic]
            queue_data_map.pop(broker_name, None)
            if not queue_data_map:
                del self._topic_queue_table[topic]

    def _wipe_write_perm(self, broker_name: str) -> None:
        for queue_data_map in self._topic_queue_table.values():
            queue_data = queue_data_map.get(broker_name)
            if queue_data is not None:
                perm = queue_data.perm & ~PERM_WRITE
                queue_data_map[broker_name] = replace(queue_data, perm=perm)


def _live_order(broker_addrs: dict[int, str]) -> list[int]:
    """A broker set's ids in its Java HashMap's order (`new HashMap<>()`, grown by puts)."""
    return long_key_order(broker_addrs, capacity=grown_capacity(len(broker_addrs)))


def _broker_data(broker_set: _BrokerSet, ids: list[int]) -> BrokerData:
    return BrokerData(
        cluster=broker_set.cluster,
        broker_name=broker_set.broker_name,
        broker_addrs={broker_id: broker_set.broker_addrs[broker_id] for broker_id in ids},
        zone_name=broker_set.zone_name,
        enable_acting_master=broker_set.enable_acting_master,
    )


def _route_broker_data(broker_set: _BrokerSet) -> BrokerData:
    """The copy a route carries: `new BrokerData(brokerData)` copies the address map, which
    iterates in a `new HashMap<>(map)`'s order."""
    live_order = _live_order(broker_set.broker_addrs)
    return _broker_data(
        broker_set, long_key_order(live_order, capacity=copied_map_capacity(len(live_order)))
    )
