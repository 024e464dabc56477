"""The route tables (`RouteInfoManager`), step by step, against RocketMQ's rules."""

from __future__ import annotations

import pytest

from controller.errors import RegisterBrokerRefusedError
from controller.route_info import BrokerAddrInfo, RegisterBrokerResult, RemovedBroker
from remoting.bodies import BrokerData, QueueData, TopicRouteData
from tests.controller.support import addr, apply, run_steps, tables

A, B, C = addr("1"), addr("2"), addr("3")


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param(
            "reg 1 broker-a#0 T:4 X:8",
            "broker-a{0:1} | T[broker-a=4rw] X[broker-a=8rw]",
            id="master",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:8; reg 2 broker-a#1 T:16 X:16",
            "broker-a{0:1 1:2} | T[broker-a=4rw] X[broker-a=8rw]",
            id="slave-does-not-change-the-master-topics",
        ),
        pytest.param(
            "reg 2 broker-a#1 T:16 X:16",
            "broker-a{1:2} | T[broker-a=16rw] X[broker-a=16rw]",
            id="no-master-prime-slave-gives-topics",
        ),
        pytest.param(
            "reg 2 broker-a#1 T:16 X:16 acting",
            "broker-a{1:2} | T[broker-a=16r-] X[broker-a=16r-]",
            id="acting-master-prime-slave-is-read-only",
        ),
        pytest.param(
            "reg 2 broker-a#1 T:16 X:16 old",
            "broker-a{1:2} |",
            id="pre-5.0-slave-gives-no-topics",
        ),
        pytest.param(
            "reg 2 broker-a#2 T:16 X:16; reg 3 broker-a#1 T:4 X:4 dv=1",
            "broker-a{1:3 2:2} | T[broker-a=4rw] X[broker-a=4rw]",
            id="lower-slave-id-becomes-prime",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:8; reg 3 broker-b#0 T:2 Y:2",
            "broker-a{0:1} broker-b{0:3} | T[broker-a=4rw broker-b=2rw] X[broker-a=8rw] "
            "Y[broker-b=2rw]",
            id="topic-on-two-broker-sets",
        ),
        pytest.param(
            "reg 2 broker-a#1 T:4 X:4; reg 2 broker-a#0 T:4 X:4 dv=1 sv=1",
            "broker-a{0:2} | T[broker-a=4rw] X[broker-a=4rw]",
            id="slave-becomes-master-moves-to-id-0",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 sv=1; reg 2 broker-a#1 T:4 X:4 sv=1; "
            "reg 2 broker-a#0 T:4 X:4 sv=2",
            "broker-a{0:2} | T[broker-a=4rw] X[broker-a=4rw]",
            id="new-master-with-higher-state-version-takes-id-0",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 sv=2; reg 2 broker-a#0 T:4 X:4 sv=1",
            "broker-a{0:1} | T[broker-a=4rw] X[broker-a=4rw]",
            id="stale-master-with-lower-state-version-is-ignored",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 sv=2; reg 2 broker-a#1 T:4 X:4 sv=1; "
            "reg 2 broker-a#0 T:4 X:4 sv=1",
            "broker-a{0:1} | T[broker-a=4rw] X[broker-a=4rw]",
            id="ignored-registration-also-drops-the-old-id",
        ),
        pytest.param("reg 1 broker-a#0", "broker-a{0:1} |", id="empty-topic-table-registers"),
    ],
)
def test_register_broker_tables(steps: str, expected: str) -> None:
    assert tables(run_steps(steps)) == expected


@pytest.mark.parametrize(
    ("second", "expected_queues"),
    [
        pytest.param("reg 1 broker-a#0 T:8 X:4 dv=1", 4, id="same-data-version-keeps-route"),
        pytest.param("reg 1 broker-a#0 T:8 X:4 dv=2", 8, id="new-counter-updates-route"),
        pytest.param("reg 1 broker-a#0 T:8 X:4 dv=1 sv=1", 8, id="new-state-version-updates"),
    ],
)
def test_data_version_decides_whether_topic_configs_are_read(
    second: str, expected_queues: int
) -> None:
    manager = run_steps(f"reg 1 broker-a#0 T:4 X:4 dv=1; {second}")
    route = manager.pickup_topic_route_data("T")
    assert route is not None
    assert [queue.read_queue_nums for queue in route.queue_datas] == [expected_queues]


def test_unchanged_data_version_still_adds_a_new_topic() -> None:
    manager = run_steps("reg 1 broker-a#0 T:4 X:4 dv=1; reg 1 broker-a#0 T:8 X:4 Y:2 dv=1")
    assert tables(manager) == "broker-a{0:1} | T[broker-a=4rw] X[broker-a=4rw] Y[broker-a=2rw]"


def test_read_and_write_queue_counts_and_sysflag_come_from_the_topic_config() -> None:
    manager = run_steps("reg 1 broker-a#0 T:8/2 X:4")
    assert manager.pickup_topic_route_data("T") == TopicRouteData(
        queue_datas=(QueueData("broker-a", read_queue_nums=8, write_queue_nums=2, perm=6),),
        broker_datas=(BrokerData("DefaultCluster", "broker-a", {0: A}),),
    )


@pytest.mark.parametrize(
    ("steps", "result"),
    [
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4", RegisterBrokerResult(new_broker=True), id="master"
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4; reg 1 broker-a#0 T:4 X:4",
            RegisterBrokerResult(),
            id="master-again",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 ha=1:20912; reg 2 broker-a#1 T:4 X:4",
            RegisterBrokerResult(ha_server_addr="1:20912", master_addr=A, new_broker=True),
            id="slave-learns-master-ha-address",
        ),
        pytest.param(
            "reg 2 broker-a#1 T:4 X:4",
            RegisterBrokerResult(new_broker=True),
            id="slave-without-master",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 cluster=Other; reg 2 broker-a#1 T:4 X:4",
            RegisterBrokerResult(new_broker=True),
            id="master-alive-in-another-cluster-only",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 sv=3; reg 2 broker-a#0 T:4 X:4 sv=2",
            RegisterBrokerResult(stale_state_version_of=A),
            id="stale-state-version",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 sv=3; reg 2 broker-a#0 T:4 X:4 sv=3",
            RegisterBrokerResult(new_broker=True),
            id="equal-state-version-takes-over",
        ),
    ],
)
def test_register_broker_result(steps: str, result: RegisterBrokerResult) -> None:
    *before, last = steps.split(";")
    manager = run_steps(";".join(before))
    assert apply(manager, last.strip()) == result


def test_slave_learns_nothing_once_the_master_expired() -> None:
    manager = run_steps("reg 1 broker-a#0 T:4 X:4 at=0; reg 2 broker-a#1 T:4 X:4 at=100000")
    apply(manager, "scan at=120001")
    assert apply(manager, "reg 2 broker-a#1 T:4 X:4 at=120002") == RegisterBrokerResult()


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param("reg 1 broker-a#0 T:4", id="new-broker-set"),
        pytest.param("reg 1 broker-a#0 T:4 X:4; reg 2 broker-a#1 T:4", id="new-id-in-known-set"),
    ],
)
def test_first_registration_with_exactly_one_topic_is_refused_and_changes_nothing(
    steps: str,
) -> None:
    *before, last = steps.split(";")
    manager = run_steps(";".join(before))
    drawn = tables(manager)
    with pytest.raises(RegisterBrokerRefusedError, match="exactly one topic"):
        apply(manager, last.strip())
    assert tables(manager) == drawn
    assert BrokerAddrInfo("DefaultCluster", B) not in manager.broker_live_table


def test_known_broker_may_register_a_single_topic_update() -> None:
    manager = run_steps("reg 1 broker-a#0 T:4 X:4 dv=1; reg 1 broker-a#0 Y:2 dv=2")
    assert tables(manager) == "broker-a{0:1} | T[broker-a=4rw] X[broker-a=4rw] Y[broker-a=2rw]"


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4; reg 2 broker-a#1 T:4 X:4; unreg 2 broker-a#1",
            "broker-a{0:1} | T[broker-a=4rw] X[broker-a=4rw]",
            id="slave-leaves",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4; reg 3 broker-b#0 T:2 Y:2; unreg 1 broker-a#0",
            "broker-b{0:3} | T[broker-b=2rw] Y[broker-b=2rw]",
            id="last-address-removes-set-and-its-queues",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4; reg 2 broker-a#1 T:4 X:4; unreg 1 broker-a#0",
            "broker-a{1:2} | T[broker-a=4rw] X[broker-a=4rw]",
            id="master-leaves-queues-stay",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 acting; reg 2 broker-a#1 T:4 X:4 acting; unreg 1 broker-a#0",
            "broker-a{1:2} | T[broker-a=4r-] X[broker-a=4r-]",
            id="acting-master-mode-master-leaves-write-perm-wiped",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4; unreg 1 broker-a#7",
            "|",
            id="matched-by-address-not-by-id",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4; unreg 2 broker-a#0; unreg 1 broker-b#0",
            "broker-a{0:1} | T[broker-a=4rw] X[broker-a=4rw]",
            id="unknown-address-or-set-changes-nothing",
        ),
    ],
)
def test_unregister_broker(steps: str, expected: str) -> None:
    assert tables(run_steps(steps)) == expected


def test_unregister_reports_what_went() -> None:
    manager = run_steps("reg 1 broker-a#0 T:4 X:4 at=5")
    removed = apply(manager, "unreg 1 broker-a#0")
    assert isinstance(removed, RemovedBroker)
    assert (removed.broker_name, removed.broker_id, removed.broker_set_removed) == (
        "broker-a",
        0,
        True,
    )
    assert removed.live_info is not None
    assert removed.live_info.last_update_timestamp_ms == 5
    assert manager.get_all_cluster_info().cluster_addr_table == {}


@pytest.mark.parametrize(
    ("steps", "scan_at", "expected"),
    [
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 at=1000",
            121_000,
            "broker-a{0:1} | T[broker-a=4rw] X[broker-a=4rw]",
            id="at-limit",
        ),
        pytest.param("reg 1 broker-a#0 T:4 X:4 at=1000", 121_001, "|", id="past-limit"),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 at=1000; reg 1 broker-a#0 T:4 X:4 at=60000",
            121_001,
            "broker-a{0:1} | T[broker-a=4rw] X[broker-a=4rw]",
            id="re-registration-renews",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 at=0 timeout=500", 501, "|", id="broker-own-timeout"
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 at=0; reg 2 broker-a#1 T:4 X:4 at=100000",
            120_001,
            "broker-a{1:2} | T[broker-a=4rw] X[broker-a=4rw]",
            id="master-expires-slave-stays",
        ),
    ],
)
def test_scan_not_active_broker(steps: str, scan_at: int, expected: str) -> None:
    manager = run_steps(steps)
    apply(manager, f"scan at={scan_at}")
    assert tables(manager) == expected


def test_scan_returns_the_channels_to_close() -> None:
    manager = run_steps("reg 1 broker-a#0 T:4 X:4 at=0 ch=7; reg 2 broker-a#1 T:4 X:4 at=10 ch=8")
    removed = manager.scan_not_active_broker(now_ms=120_005)
    assert [(r.broker_addr_info.broker_addr, r.broker_id) for r in removed] == [(A, 0)]
    assert removed[0].live_info is not None
    assert removed[0].live_info.channel == 7


def test_configured_expiry_applies_to_brokers_without_their_own_timeout() -> None:
    manager = run_steps("reg 1 broker-a#0 T:4 X:4 at=0", broker_channel_expired_time_ms=300)
    assert manager.scan_not_active_broker(now_ms=300) == []
    assert len(manager.scan_not_active_broker(now_ms=301)) == 1


def test_expired_live_record_outside_any_broker_set_is_removed() -> None:
    # A lost the id to C (higher stateVersion): its live record stays until it expires.
    manager = run_steps("reg 1 broker-a#0 T:4 X:4 at=0 sv=1; reg 3 broker-a#0 T:4 X:4 at=50 sv=2")
    removed = manager.scan_not_active_broker(now_ms=120_001)
    assert [(r.broker_addr_info.broker_addr, r.broker_name) for r in removed] == [(A, None)]
    assert list(manager.broker_live_table) == [BrokerAddrInfo("DefaultCluster", C)]
    assert tables(manager) == "broker-a{0:3} | T[broker-a=4rw] X[broker-a=4rw]"


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 ch=1; reg 2 broker-a#1 T:4 X:4 ch=2; close ch=1",
            "broker-a{1:2} | T[broker-a=4rw] X[broker-a=4rw]",
            id="master-channel-closes",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 ch=1; reg 1 broker-a#0 T:4 X:4 ch=5; close ch=1",
            "broker-a{0:1} | T[broker-a=4rw] X[broker-a=4rw]",
            id="re-registered-on-new-channel-survives-old-close",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 ch=1; reg 3 broker-b#0 T:4 Y:4 ch=1; close ch=1",
            "|",
            id="every-broker-on-the-channel",
        ),
        pytest.param(
            "reg 1 broker-a#0 T:4 X:4 ch=1; close ch=9",
            "broker-a{0:1} | T[broker-a=4rw] X[broker-a=4rw]",
            id="unknown-channel",
        ),
    ],
)
def test_on_channel_destroy(steps: str, expected: str) -> None:
    assert tables(run_steps(steps)) == expected


def test_route_for_a_topic_on_two_broker_sets() -> None:
    manager = run_steps(
        "reg 1 broker-a#0 T:4 X:4; reg 2 broker-a#1 T:4 X:4; reg 3 broker-b#0 T:8 Y:2"
    )
    route = manager.pickup_topic_route_data("T")
    assert route is not None
    # Java's HashMap order for these two names puts broker-b first.
    assert route.queue_datas == (
        QueueData("broker-b", read_queue_nums=8, write_queue_nums=8, perm=6),
        QueueData("broker-a", read_queue_nums=4, write_queue_nums=4, perm=6),
    )
    assert route.broker_datas == (
        BrokerData("DefaultCluster", "broker-b", {0: C}),
        BrokerData("DefaultCluster", "broker-a", {0: A, 1: B}),
    )
    assert route.filter_server_table == {}
    assert manager.pickup_topic_route_data("Unknown") is None


def test_route_carries_zone_and_acting_master_flag_of_the_last_registration() -> None:
    manager = run_steps("reg 1 broker-a#0 T:4 X:4; reg 2 broker-a#1 T:4 X:4 acting zone=z1")
    route = manager.pickup_topic_route_data("X")
    assert route is not None
    assert route.broker_datas == (
        BrokerData(
            "DefaultCluster", "broker-a", {0: A, 1: B}, zone_name="z1", enable_acting_master=True
        ),
    )


def test_cluster_info() -> None:
    manager = run_steps(
        "reg 1 broker-a#0 T:4 X:4; reg 2 broker-a#1 T:4 X:4; reg 3 broker-b#0 T:4 X:4 cluster=Other"
    )
    info = manager.get_all_cluster_info()
    # In the order of Java's ConcurrentHashMaps (checked with Java 17), not of registration.
    assert list(info.broker_addr_table.items()) == [
        ("broker-b", BrokerData("Other", "broker-b", {0: C})),
        ("broker-a", BrokerData("DefaultCluster", "broker-a", {0: A, 1: B})),
    ]
    assert list(info.cluster_addr_table.items()) == [
        ("DefaultCluster", ("broker-a",)),
        ("Other", ("broker-b",)),
    ]


def test_queries_return_copies() -> None:
    manager = run_steps("reg 1 broker-a#0 T:4 X:4")
    info = manager.get_all_cluster_info()
    route = manager.pickup_topic_route_data("T")
    apply(manager, "reg 2 broker-a#1 T:4 X:4")
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: A}
    assert route is not None
    assert route.broker_datas[0].broker_addrs == {0: A}
