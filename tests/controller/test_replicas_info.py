"""The controller's pure cores: replica state from events, request decisions, the election policy.

A broker set is drawn as `ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3`; liveness as
`alive=1:e2/o100/p5,3` (broker 1 alive with epoch 2, maxOffset 100, priority 5; broker 3 alive
with defaults).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from controller.broker_heartbeat import (
    BrokerHeartbeatManager,
    BrokerLiveInfo,
    Heartbeat,
)
from controller.elect_policy import elect
from controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
    decode_event,
    encode_event,
)
from controller.messages import BrokerReplicasInfo
from controller.replicas_info import CONTROLLER_TRIGGERED, ControllerResult, ReplicasInfoManager
from controller_client.messages import (
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
)
from remoting.codes import ResponseCode as R

CLUSTER, BROKER = "DefaultCluster", "broker-a"


def addr(broker_id: int) -> str:
    return f"127.0.0.1:{10900 + broker_id}"


def alive(spec: str) -> dict[int, BrokerLiveInfo]:
    """`1:e2/o100/p5,3` -> live records by id."""
    result: dict[int, BrokerLiveInfo] = {}
    for part in filter(None, spec.split(",")):
        broker_id, _, rest = part.partition(":")
        values = {item[0]: int(item[1:]) for item in filter(None, rest.split("/"))}
        result[int(broker_id)] = BrokerLiveInfo(
            addr(int(broker_id)),
            channel=int(broker_id),
            heartbeat_timeout_ms=10_000,
            last_update_ms=0,
            epoch=values.get("e", -1),
            max_offset=values.get("o", -1),
            election_priority=values.get("p", 2**31 - 1),
        )
    return result


def manager(spec: str) -> ReplicasInfoManager:
    """`ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3`, built through events."""
    fields = dict(item.split("=") for item in spec.split())
    ids = [int(i) for i in fields["ids"].split(",")]
    info = ReplicasInfoManager()
    for broker_id in ids:
        info.apply(ApplyBrokerIdEvent(CLUSTER, BROKER, broker_id, f"{addr(broker_id)};1"))
    epoch = int(fields.get("epoch", "0"))
    master = fields.get("master")
    for _ in range(epoch - 1):
        info.apply(ElectMasterEvent(BROKER, None))
    if epoch:
        info.apply(ElectMasterEvent(BROKER, None if master is None else int(master)))
    sss = frozenset(int(i) for i in fields.get("sss", "").split(",") if i)
    broker_set = info.broker_set(BROKER)
    assert broker_set is not None
    target_epoch = int(fields.get("sss_epoch", str(broker_set.sync_state_set_epoch)))
    while broker_set.sync_state_set_epoch < target_epoch - 1:
        info.apply(AlterSyncStateSetEvent(BROKER, broker_set.sync_state_set))
        broker_set = info.broker_set(BROKER)
        assert broker_set is not None
    if (sss and sss != broker_set.sync_state_set) or broker_set.sync_state_set_epoch < target_epoch:
        info.apply(AlterSyncStateSetEvent(BROKER, sss or broker_set.sync_state_set))
    return info


def drawn(info: ReplicasInfoManager) -> str:
    broker_set = info.broker_set(BROKER)
    if broker_set is None:
        return "none"
    return (
        f"ids={','.join(map(str, sorted(broker_set.brokers)))} "
        f"next={broker_set.next_assign_broker_id} master={broker_set.master_broker_id} "
        f"epoch={broker_set.master_epoch} "
        f"sss={','.join(map(str, sorted(broker_set.sync_state_set)))} "
        f"sss_epoch={broker_set.sync_state_set_epoch}"
    )


def test_the_drawing_helpers_draw_what_they_build() -> None:
    info = manager("ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3")
    assert drawn(info) == "ids=1,2,3 next=4 master=1 epoch=2 sss=1,2 sss_epoch=3"


# -- election policy ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sss", "unclean_all", "old_master", "preferred", "live", "expected"),
    [
        pytest.param("1,2,3", None, 1, None, "1,2,3", 1, id="keep-live-old-master"),
        pytest.param("1,2,3", None, 1, None, "2:e2/o50,3:e2/o90", 3, id="higher-offset"),
        pytest.param("1,2,3", None, 1, None, "2:e3/o10,3:e2/o90", 2, id="epoch-before-offset"),
        pytest.param("1,2,3", None, 1, None, "2:e2/o9/p5,3:e2/o9/p3", 3, id="lower-priority"),
        pytest.param("1,2,3", None, 1, None, "2:e2/o9,3:e2/o9", 2, id="tie-lowest-id"),
        pytest.param("1,2", None, 1, None, "3:e9/o999", None, id="outside-set-never-clean"),
        pytest.param("1,2", "1,2,3", 1, None, "3:e9/o999", 3, id="unclean-falls-back"),
        pytest.param("1,2", "1,2,3", 1, None, "2", 2, id="unclean-prefers-set"),
        pytest.param("1,2,3", None, 1, 2, "1,2,3", 2, id="preferred-over-old-master"),
        pytest.param("1,2,3", None, 1, 1, "1,2", 1, id="preferred-is-old-master"),
        pytest.param("1,2,3", None, 1, 3, "1,2", None, id="preferred-dead"),
        pytest.param("1,2", None, 1, 3, "1,2,3", None, id="preferred-not-in-set"),
        pytest.param("1,2", None, None, None, "", None, id="nobody-alive"),
        pytest.param(
            "1,2", None, None, None, "1:e1/o4294967296,2:e1/o1", 1, id="offsets-past-int32"
        ),
        pytest.param("1,2", None, None, None, "1:e1/o1/p-5,2:e1/o1", 1, id="negative-priority"),
    ],
)
def test_elect_policy(
    sss: str,
    unclean_all: str | None,
    old_master: int | None,
    preferred: int | None,
    live: str,
    expected: int | None,
) -> None:
    ids = frozenset(int(i) for i in sss.split(","))
    everyone = None if unclean_all is None else frozenset(int(i) for i in unclean_all.split(","))
    assert (
        elect(
            sync_state_set=ids,
            all_replicas=everyone,
            old_master=old_master,
            preferred_broker_id=preferred,
            alive=alive(live),
        )
        == expected
    )


live_records = st.dictionaries(
    st.integers(1, 6),
    st.builds(
        BrokerLiveInfo,
        broker_addr=st.just("a:1"),
        channel=st.just(1),
        heartbeat_timeout_ms=st.just(1),
        last_update_ms=st.just(0),
        epoch=st.integers(-1, 5),
        max_offset=st.integers(-1, 2**40),
        election_priority=st.integers(-(2**31), 2**31 - 1),
    ),
)


@given(
    sss=st.frozensets(st.integers(1, 6), min_size=1),
    live=live_records,
    old_master=st.none() | st.integers(1, 6),
)
def test_elect_chooses_a_live_member_and_the_best_one(
    sss: frozenset[int], live: dict[int, BrokerLiveInfo], old_master: int | None
) -> None:
    chosen = elect(
        sync_state_set=sss,
        all_replicas=None,
        old_master=old_master,
        preferred_broker_id=None,
        alive=live,
    )
    candidates = sss & live.keys()
    if not candidates:
        assert chosen is None
        return
    assert chosen in candidates
    if old_master in candidates:
        assert chosen == old_master
        return

    # Naive twin: nobody beats the chosen one on (epoch, maxOffset, -priority, -id).
    def rank(i: int) -> tuple[int, int, int, int]:
        return (live[i].epoch, live[i].max_offset, -live[i].election_priority, -i)

    assert all(rank(chosen) >= rank(other) for other in candidates)


# -- requests ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "broker_id", "check_code", "code", "logged", "after"),
    [
        pytest.param(None, 1, "a;1", R.SUCCESS, True, "ids=1 next=2", id="first-id-creates-set"),
        pytest.param(
            None, 2, "a;1", R.CONTROLLER_BROKER_ID_INVALID, False, "none", id="first-not-1"
        ),
        pytest.param("ids=1", 2, "a;1", R.SUCCESS, True, "ids=1,2 next=3", id="new-id"),
        pytest.param("ids=1", 5, "a;1", R.SUCCESS, True, "ids=1,5 next=3", id="counter-increments"),
        pytest.param(
            "ids=1,2",
            2,
            f"{addr(2)};1",
            R.SUCCESS,
            False,
            "ids=1,2 next=3",
            id="same-code-retry-changes-nothing",
        ),
        pytest.param(
            "ids=1,2",
            2,
            "other;9",
            R.CONTROLLER_BROKER_ID_INVALID,
            False,
            "ids=1,2 next=3",
            id="taken",
        ),
    ],
)
def test_apply_broker_id(
    state: str | None, broker_id: int, check_code: str, code: int, logged: bool, after: str
) -> None:
    info = ReplicasInfoManager() if state is None else manager(state)
    result = info.apply_broker_id(CLUSTER, BROKER, broker_id, check_code)
    assert result.code == code
    assert bool(result.events) == logged
    for event in result.events:
        info.apply(event)
    assert drawn(info).startswith(after)


def test_get_next_broker_id() -> None:
    assert ReplicasInfoManager().get_next_broker_id(CLUSTER, BROKER).header is not None
    info = manager("ids=1,2")
    header = info.get_next_broker_id(CLUSTER, BROKER).header
    assert header is not None
    assert header.to_ext_fields()["nextBrokerId"] == "3"


@pytest.mark.parametrize(
    ("state", "broker_id", "address", "live", "code", "master", "address_event"),
    [
        pytest.param(
            "ids=1,2",
            3,
            addr(3),
            "",
            R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            None,
            False,
            id="unknown-id",
        ),
        pytest.param("ids=1,2", 2, addr(2), "", R.SUCCESS, None, False, id="no-master-yet"),
        pytest.param(
            "ids=1,2 master=1 epoch=1",
            2,
            addr(2),
            "1",
            R.SUCCESS,
            1,
            False,
            id="live-master-reported",
        ),
        pytest.param(
            "ids=1,2 master=1 epoch=1",
            2,
            addr(2),
            "2",
            R.SUCCESS,
            None,
            False,
            id="dead-master-not-reported",
        ),
        pytest.param("ids=1,2", 2, "10.0.0.9:1", "", R.SUCCESS, None, True, id="new-address"),
    ],
)
def test_register_broker(
    state: str,
    broker_id: int,
    address: str,
    live: str,
    code: int,
    master: int | None,
    address_event: bool,
) -> None:
    info = manager(state)
    result = info.register_broker(CLUSTER, BROKER, broker_id, address, alive=alive(live))
    assert result.code == code
    assert result.events == (
        (UpdateBrokerAddressEvent(CLUSTER, BROKER, broker_id, address),) if address_event else ()
    )
    if code == R.SUCCESS:
        assert isinstance(result.header, RegisterBrokerToControllerResponseHeader)
        assert result.header.master_broker_id == master
        assert SyncStateSet.decode(result.body) is not None


@pytest.mark.parametrize(
    ("master", "epoch", "proposed", "proposed_epoch", "live", "code"),
    [
        pytest.param(1, 2, "1,2,3", 3, "1,2,3", R.SUCCESS, id="expand"),
        pytest.param(1, 2, "1", 3, "1", R.SUCCESS, id="shrink"),
        pytest.param(
            1, 2, "1,2", 3, "1,2,3", R.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, id="unchanged"
        ),
        pytest.param(2, 2, "1,2,3", 3, "1,2,3", R.CONTROLLER_INVALID_MASTER, id="not-master"),
        pytest.param(
            1, 1, "1,2,3", 3, "1,2,3", R.CONTROLLER_FENCED_MASTER_EPOCH, id="stale-master-epoch"
        ),
        pytest.param(
            1,
            2,
            "1,2,3",
            2,
            "1,2,3",
            R.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            id="stale-sss-epoch",
        ),
        pytest.param(1, 2, "1,2,4", 3, "1,2,4", R.CONTROLLER_INVALID_REPLICAS, id="unknown-id"),
        pytest.param(1, 2, "1,2,3", 3, "1,2", R.CONTROLLER_BROKER_NOT_ALIVE, id="dead-member"),
        pytest.param(
            1, 2, "2,3", 3, "1,2,3", R.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, id="master-missing"
        ),
    ],
)
def test_alter_sync_state_set(
    master: int, epoch: int, proposed: str, proposed_epoch: int, live: str, code: int
) -> None:
    info = manager("ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3")
    before = drawn(info)
    ids = frozenset(int(i) for i in proposed.split(","))
    result = info.alter_sync_state_set(
        BROKER, master, epoch, SyncStateSet(ids, proposed_epoch), alive=alive(live)
    )
    assert result.code == code
    for event in result.events:
        info.apply(event)
    if code == R.SUCCESS:
        assert result.events == (AlterSyncStateSetEvent(BROKER, ids),)
        assert SyncStateSet.decode(result.body) == SyncStateSet(ids, 4)
        assert drawn(info) == before.replace("sss=1,2 sss_epoch=3", f"sss={proposed} sss_epoch=4")
    else:
        assert result.events == ()
        assert drawn(info) == before  # a refused request changes nothing


@pytest.mark.parametrize(
    ("state", "broker_id", "designate", "live", "unclean", "code", "after"),
    [
        pytest.param(
            "ids=1,2",
            2,
            False,
            "",
            False,
            R.SUCCESS,
            "master=2 epoch=1 sss=2 sss_epoch=1",
            id="first-election-asker-wins",
        ),
        pytest.param(
            "ids=1,2",
            3,
            False,
            "3",
            False,
            R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            "master=None epoch=0 sss= sss_epoch=0",
            id="first-election-unknown-id-refused",
        ),
        pytest.param(
            "ids=1,2",
            CONTROLLER_TRIGGERED,
            False,
            "1",
            False,
            R.CONTROLLER_MASTER_NOT_AVAILABLE,
            "master=None epoch=1 sss= sss_epoch=0",
            id="first-by-controller-no-sss",
        ),
        pytest.param(
            "ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3",
            2,
            False,
            "1,2",
            False,
            R.CONTROLLER_MASTER_STILL_EXIST,
            "master=1 epoch=2 sss=1,2 sss_epoch=3",
            id="live-master-stays",
        ),
        pytest.param(
            "ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3",
            CONTROLLER_TRIGGERED,
            False,
            "2,3",
            False,
            R.SUCCESS,
            "master=2 epoch=3 sss=2 sss_epoch=4",
            id="dead-master-replaced-from-sss",
        ),
        pytest.param(
            "ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3",
            CONTROLLER_TRIGGERED,
            False,
            "3",
            False,
            R.CONTROLLER_MASTER_NOT_AVAILABLE,
            "master=None epoch=3 sss=1,2 sss_epoch=3",
            id="controller-fails-clears",
        ),
        pytest.param(
            "ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3",
            3,
            False,
            "3",
            False,
            R.CONTROLLER_ELECT_MASTER_FAILED,
            "master=1 epoch=2 sss=1,2 sss_epoch=3",
            id="broker-fails-changes-nothing",
        ),
        pytest.param(
            "ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3",
            3,
            False,
            "3",
            True,
            R.SUCCESS,
            "master=3 epoch=3 sss=3 sss_epoch=4",
            id="unclean",
        ),
        pytest.param(
            "ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3",
            2,
            True,
            "1,2",
            False,
            R.SUCCESS,
            "master=2 epoch=3 sss=2 sss_epoch=4",
            id="designated",
        ),
    ],
)
def test_elect_master(
    state: str, broker_id: int, designate: bool, live: str, unclean: bool, code: int, after: str
) -> None:
    info = manager(state)
    result = info.elect_master(
        BROKER,
        broker_id,
        designate_elect=designate,
        alive=alive(live),
        enable_elect_unclean_master=unclean,
    )
    assert result.code == code, result.remark
    for event in result.events:
        info.apply(event)
    assert drawn(info).split(" ", 2)[2] == after
    if code == R.SUCCESS:
        assert isinstance(result.header, ElectMasterResponseHeader)
        broker_set = info.broker_set(BROKER)
        assert broker_set is not None
        assert result.header.master_epoch == broker_set.master_epoch
        assert result.header.master_address == broker_set.master_address
        body = ElectMasterResponseBody.decode(result.body)
        assert body.sync_state_set == {broker_set.master_broker_id}
        assert body.broker_member_group is not None
        assert result.elected is not None


def test_unknown_set_answers() -> None:
    info = ReplicasInfoManager()
    assert info.get_replica_info(BROKER).code == R.CONTROLLER_BROKER_METADATA_NOT_EXIST
    assert (
        info.elect_master(
            BROKER, 1, designate_elect=False, alive={}, enable_elect_unclean_master=False
        ).code
        == R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    )
    assert (
        info.clean_broker_data(BROKER, None, clean_living_broker=False, alive={}).code
        == R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    )


@pytest.mark.parametrize(
    ("ids", "living", "live", "code", "after"),
    [
        pytest.param(None, False, "", R.SUCCESS, "none", id="whole-set"),
        pytest.param(
            None,
            False,
            "2",
            R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
            "ids=1,2,3",
            id="living-refused",
        ),
        pytest.param(None, True, "2", R.SUCCESS, "none", id="living-allowed"),
        pytest.param(
            "3", False, "1", R.SUCCESS, "ids=1,2 next=4 master=1 epoch=2 sss=1,2", id="one-id"
        ),
        pytest.param(
            "4", False, "", R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, "ids=1,2,3", id="unknown-id"
        ),
        pytest.param(
            "1", False, "", R.SUCCESS, "ids=2,3 next=4 master=None epoch=3 sss=2 ",
            id="master-cleared-epoch-up",
        ),
        pytest.param(
            "2", False, "", R.SUCCESS, "ids=1,3 next=4 master=1 epoch=2 sss=1 ", id="leaves-sss"
        ),
    ],
)
def test_clean_broker_data(ids: str | None, living: bool, live: str, code: int, after: str) -> None:
    info = manager("ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3")
    targets = None if ids is None else frozenset(int(i) for i in ids.split(";"))
    result = info.clean_broker_data(BROKER, targets, clean_living_broker=living, alive=alive(live))
    assert result.code == code
    for event in result.events:
        info.apply(event)
    assert drawn(info).startswith(after)


def test_get_sync_state_data_describes_members() -> None:
    info = manager("ids=1,2,3 master=1 epoch=2 sss=1,2 sss_epoch=3")
    result = info.get_sync_state_data([BROKER, "no-such"], alive_by_set={BROKER: alive("1,3")})
    table = BrokerReplicasInfo.decode(result.body).replicas_info_table
    assert list(table) == [BROKER]
    replicas = table[BROKER]
    assert (replicas.master_broker_id, replicas.master_address) == (1, addr(1))
    assert (replicas.master_epoch, replicas.sync_state_set_epoch) == (2, 3)
    assert [(m.broker_id, m.alive) for m in replicas.in_sync_replicas] == [(1, True), (2, False)]
    assert [(m.broker_id, m.alive) for m in replicas.not_in_sync_replicas] == [(3, True)]


# -- heartbeats --------------------------------------------------------------------------


def test_heartbeat_keeps_only_increasing_epoch_and_offset() -> None:
    table = BrokerHeartbeatManager()
    beat = Heartbeat(CLUSTER, BROKER, 1, addr(1), epoch=2, max_offset=100, heartbeat_timeout_ms=50)
    assert table.on_broker_heartbeat(beat, channel=7, now_ms=0)
    assert not table.on_broker_heartbeat(
        replace(beat, epoch=2, max_offset=40, broker_addr="x:1"), channel=8, now_ms=10
    )
    info = table.get((CLUSTER, BROKER, 1))
    assert info is not None
    assert (info.epoch, info.max_offset, info.broker_addr, info.channel) == (2, 100, addr(1), 7)
    table.on_broker_heartbeat(replace(beat, epoch=3, max_offset=5), channel=8, now_ms=20)
    info = table.get((CLUSTER, BROKER, 1))
    assert info is not None
    assert (info.epoch, info.max_offset) == (3, 5)
    assert table.is_alive((CLUSTER, BROKER, 1), now_ms=70)
    assert not table.is_alive((CLUSTER, BROKER, 1), now_ms=71)
    assert [key for key, _ in table.scan_not_active(now_ms=71)] == [(CLUSTER, BROKER, 1)]
    table.on_broker_heartbeat(beat, channel=9, now_ms=100)
    assert [key for key, _ in table.on_channel_close(9)] == [(CLUSTER, BROKER, 1)]
    assert table.get((CLUSTER, BROKER, 1)) is None


@given(beats=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 1000), st.integers(1, 500)),
                    min_size=1, max_size=20))
def test_next_expiry_is_when_the_first_record_stops_being_alive(
    beats: list[tuple[int, int, int]],
) -> None:
    """(broker id, received at, timeout) in time order: nothing expires before
    `next_expiry_ms()` and something does one millisecond after it."""
    table = BrokerHeartbeatManager()
    assert table.next_expiry_ms() is None
    now = 0
    for broker_id, gap, timeout in beats:
        now += gap
        table.on_broker_heartbeat(
            Heartbeat(CLUSTER, BROKER, broker_id, addr(broker_id), epoch=1, max_offset=0,
                      heartbeat_timeout_ms=timeout), channel=broker_id, now_ms=now)
    expiry = table.next_expiry_ms()
    assert expiry is not None
    assert table.scan_not_active(now_ms=expiry) == []
    assert table.scan_not_active(now_ms=expiry + 1) != []


# -- events: replay equals memory ----------------------------------------------------------

events_strategy: st.SearchStrategy[Event] = st.one_of(
    st.builds(
        ApplyBrokerIdEvent,
        st.just(CLUSTER),
        st.sampled_from([BROKER, "broker-b"]),
        st.integers(1, 5),
        st.sampled_from(["a:1;1", "b:2;2", "é:3;3"]),
    ),
    st.builds(
        UpdateBrokerAddressEvent,
        st.just(CLUSTER),
        st.sampled_from([BROKER, "broker-b"]),
        st.integers(1, 5),
        st.sampled_from(["c:1", "d:2"]),
    ),
    st.builds(
        ElectMasterEvent, st.sampled_from([BROKER, "broker-b"]), st.none() | st.integers(1, 5)
    ),
    st.builds(
        AlterSyncStateSetEvent,
        st.sampled_from([BROKER, "broker-b"]),
        st.frozensets(st.integers(1, 5), min_size=1),
    ),
    st.builds(
        CleanBrokerDataEvent,
        st.sampled_from([BROKER, "broker-b"]),
        st.none() | st.frozensets(st.integers(1, 5), min_size=1),
    ),
)


@settings(max_examples=200)
@given(events=st.lists(events_strategy, max_size=30))
def test_replaying_encoded_events_rebuilds_the_same_state(events: list[Event]) -> None:
    live = ReplicasInfoManager()
    for event in events:
        assert decode_event(encode_event(event)) == event
        before = {name: live.broker_set(name) for name in live.broker_names}
        live.apply(event)
        for name in live.broker_names:
            now = live.broker_set(name)
            old = before.get(name)
            assert now is not None
            if old is not None:  # epochs never go backwards, ids are never reused
                assert now.master_epoch >= old.master_epoch
                assert now.sync_state_set_epoch >= old.sync_state_set_epoch
                assert now.next_assign_broker_id >= old.next_assign_broker_id
    replayed = ReplicasInfoManager()
    for event in events:
        replayed.apply(decode_event(encode_event(event)))
    assert replayed.broker_names == live.broker_names
    for name in live.broker_names:
        assert replayed.broker_set(name) == live.broker_set(name)


# -- stateful: any sequence of requests keeps the invariants ------------------------------


class ControllerRequests(RuleBasedStateMachine):
    """Random requests against one broker set, with brokers going up and down. After every
    step: a refused request changed nothing; epochs never decrease; the master is a member of
    the SyncStateSet and every member has an applied id."""

    def __init__(self) -> None:
        super().__init__()
        self.info = ReplicasInfoManager()
        self.live: dict[int, BrokerLiveInfo] = {}

    def decide(self, result: ControllerResult) -> None:
        before = drawn(self.info)
        old = self.info.broker_set(BROKER)
        if result.code not in (R.SUCCESS, R.CONTROLLER_MASTER_NOT_AVAILABLE):
            assert result.events == ()
        for event in result.events:
            self.info.apply(event)
        if not result.events:
            assert drawn(self.info) == before
        new = self.info.broker_set(BROKER)
        if old is not None and new is not None:
            assert new.master_epoch >= old.master_epoch
            assert new.sync_state_set_epoch >= old.sync_state_set_epoch
            assert new.next_assign_broker_id >= old.next_assign_broker_id

    @rule(broker_id=st.integers(1, 5), code=st.sampled_from(["same", "other"]))
    def apply_id(self, broker_id: int, code: str) -> None:
        check = f"{addr(broker_id)};1" if code == "same" else "10.0.0.9:1;9"
        self.decide(self.info.apply_broker_id(CLUSTER, BROKER, broker_id, check))

    @rule(broker_id=st.integers(1, 5), epoch=st.integers(-1, 6), offset=st.integers(-1, 300))
    def heartbeat(self, broker_id: int, epoch: int, offset: int) -> None:
        self.live[broker_id] = alive(f"{broker_id}:e{epoch}/o{offset}")[broker_id]

    @rule(broker_id=st.integers(1, 5))
    def broker_dies(self, broker_id: int) -> None:
        self.live.pop(broker_id, None)

    @rule(broker_id=st.sampled_from([CONTROLLER_TRIGGERED, 1, 2, 3]), designate=st.booleans())
    def elect(self, broker_id: int, designate: bool) -> None:
        self.decide(
            self.info.elect_master(
                BROKER,
                broker_id,
                designate_elect=designate and broker_id != CONTROLLER_TRIGGERED,
                alive=dict(self.live),
                enable_elect_unclean_master=False,
            )
        )

    @rule(
        members=st.frozensets(st.integers(1, 5), min_size=1),
        master_delta=st.integers(-1, 0),
        sss_delta=st.integers(-1, 0),
        as_master=st.booleans(),
    )
    def alter(
        self, members: frozenset[int], master_delta: int, sss_delta: int, as_master: bool
    ) -> None:
        broker_set = self.info.broker_set(BROKER)
        if broker_set is None:
            return
        master = broker_set.master_broker_id if as_master else 4
        self.decide(
            self.info.alter_sync_state_set(
                BROKER,
                -1 if master is None else master,
                broker_set.master_epoch + master_delta,
                SyncStateSet(members, broker_set.sync_state_set_epoch + sss_delta),
                alive=dict(self.live),
            )
        )

    @rule(broker_id=st.integers(1, 5), living=st.booleans())
    def clean(self, broker_id: int, living: bool) -> None:
        self.decide(
            self.info.clean_broker_data(
                BROKER, frozenset({broker_id}), clean_living_broker=living, alive=dict(self.live)
            )
        )

    @invariant()
    def master_in_set_and_members_known(self) -> None:
        broker_set = self.info.broker_set(BROKER)
        if broker_set is None:
            return
        assert broker_set.sync_state_set <= set(broker_set.brokers)
        if broker_set.master_broker_id is not None and broker_set.master_broker_id in (
            broker_set.brokers
        ):
            assert broker_set.master_broker_id in broker_set.sync_state_set


TestControllerRequests = ControllerRequests.TestCase
TestControllerRequests.settings = settings(max_examples=100, stateful_step_count=30)
