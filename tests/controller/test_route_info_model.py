"""Random register / unregister / expiry / channel-close sequences against a plain model.

Six broker addresses, each always in the same broker set (three per set) and on its own channel,
register under random ids 0-2 with random stateVersions and topic sets. The model keeps only
what a client can see: each set's id -> address map, the live addresses, and which sets carry
which topic (a topic reaches a set through its master or, with no master, its lowest-id slave,
and leaves only with the set). After every step the tables must match the model exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from controller.errors import RegisterBrokerRefusedError
from controller.route_info import MASTER_ID, RegisterBrokerResult, RouteInfoManager
from tests.controller.support import CLUSTER, Registration

EXPIRY_MS = 100_000
ADDRESSES = tuple(f"10.0.0.{index}:10911" for index in range(6))
TOPICS = ("T1", "T2", "T3")


def broker_name_of(address: str) -> str:
    return "broker-a" if ADDRESSES.index(address) < 3 else "broker-b"


def channel_of(address: str) -> int:
    return ADDRESSES.index(address) + 1


def ha_of(address: str) -> str:
    return address.replace(":10911", ":10912")


@dataclass(slots=True)
class Live:
    last_update_ms: int
    state_version: int


class RouteInfoModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.manager = RouteInfoManager(broker_channel_expired_time_ms=EXPIRY_MS)
        self.now_ms = 0
        self.members: dict[str, dict[int, str]] = {}
        self.live: dict[str, Live] = {}
        self.topics: dict[str, set[str]] = {}

    # -- model rules -----------------------------------------------------------------------

    def _forget(self, address: str) -> None:
        """An address goes (unregister, expiry, channel close)."""
        self.live.pop(address, None)
        broker_name = broker_name_of(address)
        members = self.members.get(broker_name)
        if members is None:
            return
        for broker_id in [i for i, a in members.items() if a == address]:
            del members[broker_id]
        if not members:
            del self.members[broker_name]
            self.topics.pop(broker_name, None)

    # -- steps -----------------------------------------------------------------------------

    @rule(
        address=st.sampled_from(ADDRESSES),
        broker_id=st.integers(0, 2),
        topics=st.sets(st.sampled_from(TOPICS)),
        state_version=st.integers(0, 2),
        counter=st.integers(0, 2),
    )
    def register(
        self, address: str, broker_id: int, topics: set[str], state_version: int, counter: int
    ) -> None:
        broker_name = broker_name_of(address)
        registration = Registration(
            address=address,
            broker_name=broker_name,
            broker_id=broker_id,
            topics=[f"{topic}:4" for topic in sorted(topics)],
            counter=counter,
            state_version=state_version,
        )
        members = self.members.get(broker_name, {})
        if broker_id not in members and len(topics) == 1:
            try:
                self.manager.register_broker(
                    registration.header(),
                    registration.wrapper(),
                    channel=channel_of(address),
                    now_ms=self.now_ms,
                )
            except RegisterBrokerRefusedError:
                return
            raise AssertionError("a first registration with one topic was accepted")

        result = self.manager.register_broker(
            registration.header(),
            registration.wrapper(),
            channel=channel_of(address),
            now_ms=self.now_ms,
        )
        members = self.members.setdefault(broker_name, {})
        for other_id in [i for i, a in members.items() if a == address and i != broker_id]:
            del members[other_id]
        holder = members.get(broker_id)
        if (
            holder is not None
            and holder != address
            and holder in self.live
            and self.live[holder].state_version > state_version
        ):
            self.live.pop(address, None)
            assert result == RegisterBrokerResult(stale_state_version_of=holder)
            return
        members[broker_id] = address
        if broker_id in (MASTER_ID, min(members)):
            self.topics.setdefault(broker_name, set()).update(topics)
        new_broker = address not in self.live
        self.live[address] = Live(self.now_ms, state_version)
        master = members.get(MASTER_ID)
        if broker_id != MASTER_ID and master is not None and master in self.live:
            expected = RegisterBrokerResult(
                ha_server_addr=ha_of(master), master_addr=master, new_broker=new_broker
            )
        else:
            expected = RegisterBrokerResult(new_broker=new_broker)
        assert result == expected

    @rule(address=st.sampled_from(ADDRESSES), broker_id=st.integers(0, 2))
    def unregister(self, address: str, broker_id: int) -> None:
        self.manager.unregister_broker(
            cluster_name=CLUSTER,
            broker_addr=address,
            broker_name=broker_name_of(address),
            broker_id=broker_id,
        )
        self._forget(address)

    @rule(elapsed_ms=st.integers(0, 60_000))
    def scan_later(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        removed = self.manager.scan_not_active_broker(now_ms=self.now_ms)
        expired = [
            address
            for address, live in self.live.items()
            if live.last_update_ms + EXPIRY_MS < self.now_ms
        ]
        assert sorted(r.broker_addr_info.broker_addr for r in removed) == sorted(expired)
        for address in expired:
            self._forget(address)

    @rule(address=st.sampled_from(ADDRESSES))
    def channel_closes(self, address: str) -> None:
        removed = self.manager.on_channel_destroy(channel_of(address))
        assert [r.broker_addr_info.broker_addr for r in removed] == (
            [address] if address in self.live else []
        )
        if address in self.live:
            self._forget(address)

    # -- what clients see ------------------------------------------------------------------

    @invariant()
    def tables_match_the_model(self) -> None:
        info = self.manager.get_all_cluster_info()
        drawn = {name: dict(data.broker_addrs) for name, data in info.broker_addr_table.items()}
        assert drawn == self.members
        expected_clusters = {CLUSTER: set(self.members)} if self.members else {}
        assert {c: set(names) for c, names in info.cluster_addr_table.items()} == expected_clusters
        assert {key.broker_addr for key in self.manager.broker_live_table} == set(self.live)
        for topic in TOPICS:
            carriers = {name for name, topics in self.topics.items() if topic in topics}
            route = self.manager.pickup_topic_route_data(topic)
            if not carriers:
                assert route is None
                continue
            assert route is not None
            assert {queue.broker_name for queue in route.queue_datas} == carriers
            assert {broker.broker_name for broker in route.broker_datas} == carriers
            for broker in route.broker_datas:
                assert broker.broker_addrs == self.members[broker.broker_name]


TestRouteInfoModel = RouteInfoModel.TestCase
