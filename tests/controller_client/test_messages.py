"""Controller messages: golden ext fields and JSON from docs/remoting-protocol.md §8-§9, round
trips, typed errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller_client import errors
from controller_client.messages import (
    INT32_MAX,
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
)
from remoting.codes import ResponseCode
from remoting.errors import BodyDecodeError, HeaderFieldError
from remoting.headers import CommandHeader

GOLDEN: list[tuple[CommandHeader, dict[str, str]]] = [
    (
        GetNextBrokerIdRequestHeader("DefaultCluster", "broker-a"),
        {"clusterName": "DefaultCluster", "brokerName": "broker-a"},
    ),
    (
        GetNextBrokerIdResponseHeader("DefaultCluster", "broker-a", 1),
        {"clusterName": "DefaultCluster", "brokerName": "broker-a", "nextBrokerId": "1"},
    ),
    (
        ApplyBrokerIdRequestHeader("c", "broker-a", 2, "127.0.0.1:10911;1700000000000"),
        {
            "clusterName": "c",
            "brokerName": "broker-a",
            "appliedBrokerId": "2",
            "registerCheckCode": "127.0.0.1:10911;1700000000000",
        },
    ),
    (
        RegisterBrokerToControllerRequestHeader("c", "b", 1, "127.0.0.1:10911", 1700000000000),
        {
            "clusterName": "c",
            "brokerName": "b",
            "brokerId": "1",
            "brokerAddress": "127.0.0.1:10911",
            "invokeTime": "1700000000000",
        },
    ),
    (
        RegisterBrokerToControllerResponseHeader("c", "b", 1, "127.0.0.1:10911", 2, 3),
        {
            "clusterName": "c",
            "brokerName": "b",
            "masterBrokerId": "1",
            "masterAddress": "127.0.0.1:10911",
            "masterEpoch": "2",
            "syncStateSetEpoch": "3",
        },
    ),
    (
        BrokerHeartbeatRequestHeader("c", "127.0.0.1:10911", "b", 1, -1, 0, 0, 10000, INT32_MAX),
        {
            "clusterName": "c",
            "brokerAddr": "127.0.0.1:10911",
            "brokerName": "b",
            "brokerId": "1",
            "epoch": "-1",
            "maxOffset": "0",
            "confirmOffset": "0",
            "heartbeatTimeoutMills": "10000",
            "electionPriority": "2147483647",
        },
    ),
    (GetReplicaInfoRequestHeader("broker-a"), {"brokerName": "broker-a"}),
    (GetReplicaInfoResponseHeader(), {}),
    (
        GetReplicaInfoResponseHeader(1, "127.0.0.1:10911", 4),
        {"masterBrokerId": "1", "masterAddress": "127.0.0.1:10911", "masterEpoch": "4"},
    ),
    (
        AlterSyncStateSetRequestHeader("b", 1, 2, 5),
        {"brokerName": "b", "masterBrokerId": "1", "masterEpoch": "2", "invokeTime": "5"},
    ),
    (AlterSyncStateSetResponseHeader(4), {"newSyncStateSetEpoch": "4"}),
    (
        NotifyBrokerRoleChangedRequestHeader("127.0.0.1:1", 3, 4, 2),
        {
            "masterAddress": "127.0.0.1:1",
            "masterEpoch": "3",
            "syncStateSetEpoch": "4",
            "masterBrokerId": "2",
        },
    ),
    (
        GetMetaDataResponseHeader("g", "n0", "127.0.0.1:9878", True, "n0:127.0.0.1:9880;"),
        {
            "group": "g",
            "controllerLeaderId": "n0",
            "controllerLeaderAddress": "127.0.0.1:9878",
            "isLeader": "true",
            "peers": "n0:127.0.0.1:9880;",
        },
    ),
]


@pytest.mark.parametrize(("header", "fields"), GOLDEN, ids=lambda v: type(v).__name__)
def test_header_golden_ext_fields(header: CommandHeader, fields: dict[str, str]) -> None:
    assert header.to_ext_fields() == fields
    assert type(header).from_ext_fields(fields) == header


def test_missing_required_field_is_typed() -> None:
    with pytest.raises(HeaderFieldError, match="appliedBrokerId"):
        ApplyBrokerIdRequestHeader.from_ext_fields(
            {"clusterName": "c", "brokerName": "b", "registerCheckCode": "x;1"}
        )


def test_out_of_range_epoch_is_typed_when_required_and_defaulted_when_optional() -> None:
    """Java's reflective header decoder: a bad number in a required field fails the request; in
    an optional one it leaves the default (tests/remoting/test_java_leniency.py)."""
    with pytest.raises(HeaderFieldError, match="masterEpoch"):
        AlterSyncStateSetRequestHeader.from_ext_fields({
            "brokerName": "b", "masterBrokerId": "1", "masterEpoch": str(2**31),
            "invokeTime": "0"})
    header = GetReplicaInfoResponseHeader.from_ext_fields({"masterEpoch": str(2**31)})
    assert header.master_epoch is None


def test_sync_state_set_golden_json() -> None:
    body = SyncStateSet(frozenset({2, 1}), 3)
    assert body.encode() == b'{"syncStateSet":[1,2],"syncStateSetEpoch":3}'
    assert SyncStateSet.decode(b'{"syncStateSet":[1,2],"syncStateSetEpoch":3}') == body


@pytest.mark.parametrize(
    "data",
    [b'{"syncStateSet":["x"],"syncStateSetEpoch":1}', b'{"syncStateSetEpoch":4294967296}', b"[1]"],
)
def test_sync_state_set_bad_json_is_typed(data: bytes) -> None:
    with pytest.raises(BodyDecodeError):
        SyncStateSet.decode(data)


@given(
    st.frozensets(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=8),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
)
def test_sync_state_set_round_trip(ids: frozenset[int], epoch: int) -> None:
    body = SyncStateSet(ids, epoch)
    assert SyncStateSet.decode(body.encode()) == body


@given(
    st.text(min_size=1),
    st.text(min_size=1),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_heartbeat_round_trip(name: str, addr: str, broker_id: int, epoch: int, off: int) -> None:
    header = BrokerHeartbeatRequestHeader(name, addr, name, broker_id, epoch, off, off, 10000, 1)
    assert BrokerHeartbeatRequestHeader.from_ext_fields(header.to_ext_fields()) == header


CONTROLLER_CODES = [code for code in ResponseCode if 2000 <= code <= 2016]


@pytest.mark.parametrize("code", CONTROLLER_CODES, ids=lambda c: c.name)
def test_every_controller_code_has_its_own_error(code: ResponseCode) -> None:
    error = errors.response_error("CONTROLLER_REGISTER_BROKER", code, "why")
    assert type(error) is not errors.ControllerResponseError
    assert error.code_expected == code
    assert error.code == code
    assert code.name in str(error)
    assert "why" in str(error)


def test_unknown_code_is_a_plain_response_error() -> None:
    error = errors.response_error("X", 1, None)
    assert type(error) is errors.ControllerResponseError
    assert "SYSTEM_ERROR" in str(error)


def test_elect_master_body_from_spec() -> None:
    data = (
        b'{"brokerMemberGroup":{"brokerAddrs":{1:"127.0.0.1:1",2:"127.0.0.1:2"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster"},"syncStateSet":[1]}'
    )
    body = ElectMasterResponseBody.decode(data)
    assert body.sync_state_set == {1}
    assert isinstance(body.broker_member_group, dict)
    assert ElectMasterResponseBody.decode(b'{"syncStateSet":[2]}').encode() == (
        b'{"syncStateSet":[2]}'
    )


def test_elect_master_request_defaults() -> None:
    header = ElectMasterRequestHeader("broker-a", 1, 5)
    assert header.to_ext_fields() == {
        "brokerName": "broker-a",
        "brokerId": "1",
        "invokeTime": "5",
        "clusterName": "",
        "designateElect": "false",
    }
