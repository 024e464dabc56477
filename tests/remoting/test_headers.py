"""Typed headers: wire keys as in the spec, round trips, and errors naming field and value."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from remoting.errors import HeaderFieldError
from remoting.fastjson import java_int
from remoting.headers import (
    BoundaryType,
    CommandHeader,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    GetAllTopicConfigRequestHeader,
    GetAllTopicConfigResponseHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetRouteInfoRequestHeader,
    HeartbeatRequestHeader,
    HeartbeatResponseHeader,
    NotifyConsumerIdsChangedRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnRegisterBrokerRequestHeader,
    UnregisterClientRequestHeader,
    UnregisterClientResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    UpdateConsumerOffsetResponseHeader,
    _Kind,
    _wire_fields,
)

# Wire keys per header, as docs/remoting-protocol.md §6-§7 lists them (required ones first).
WIRE_KEYS: dict[type[CommandHeader], Sequence[str]] = {
    SendMessageRequestHeader: [
        "producerGroup",
        "topic",
        "defaultTopic",
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
        "properties",
        "reconsumeTimes",
        "unitMode",
        "batch",
        "maxReconsumeTimes",
        "bname",
    ],
    SendMessageResponseHeader: [
        "msgId",
        "queueId",
        "queueOffset",
        "transactionId",
        "batchUniqId",
        "recallHandle",
        "MSG_REGION",
        "TRACE_ON",
    ],
    PullMessageRequestHeader: [
        "consumerGroup",
        "topic",
        "queueId",
        "queueOffset",
        "maxMsgNums",
        "sysFlag",
        "commitOffset",
        "suspendTimeoutMillis",
        "subVersion",
        "subscription",
        "expressionType",
        "maxMsgBytes",
        "requestSource",
        "proxyFrowardClientId",
        "bname",
        "liteTopic",  # 5.5.0
    ],
    PullMessageResponseHeader: [
        "suggestWhichBrokerId",
        "nextBeginOffset",
        "minOffset",
        "maxOffset",
        "offsetDelta",
        "topicSysFlag",
        "groupSysFlag",
        "forbiddenType",
    ],
    QueryConsumerOffsetRequestHeader: [
        "consumerGroup",
        "topic",
        "queueId",
        "setZeroIfNotFound",
        "bname",
    ],
    QueryConsumerOffsetResponseHeader: ("offset",),
    UpdateConsumerOffsetRequestHeader: [
        "consumerGroup",
        "topic",
        "queueId",
        "commitOffset",
        "bname",
    ],
    UpdateConsumerOffsetResponseHeader: (),
    GetMaxOffsetRequestHeader: ["topic", "queueId", "committed", "bname"],
    GetMaxOffsetResponseHeader: ("offset",),
    GetMinOffsetRequestHeader: ["topic", "queueId", "bname"],
    GetMinOffsetResponseHeader: ("offset",),
    SearchOffsetRequestHeader: [
        "topic", "queueId", "timestamp", "boundaryType", "bname", "liteTopic",  # 5.5.0
    ],
    SearchOffsetResponseHeader: ("offset",),
    HeartbeatRequestHeader: (),
    HeartbeatResponseHeader: ("IS_SUPPORT_HEART_BEAT_V2", "IS_SUB_CHANGE"),
    UnregisterClientRequestHeader: ("clientID", "producerGroup", "consumerGroup"),
    UnregisterClientResponseHeader: (),
    ConsumerSendMsgBackRequestHeader: [
        "offset",
        "group",
        "delayLevel",
        "originMsgId",
        "originTopic",
        "unitMode",
        "maxReconsumeTimes",
    ],
    GetConsumerListByGroupRequestHeader: ("consumerGroup",),
    NotifyConsumerIdsChangedRequestHeader: ("consumerGroup",),
    CreateTopicRequestHeader: [
        "topic",
        "defaultTopic",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "topicFilterType",
        "topicSysFlag",
        "order",
        "attributes",
        "force",
    ],
    GetAllTopicConfigRequestHeader: ("topicSeq", "dataVersion", "maxTopicNum"),
    GetAllTopicConfigResponseHeader: ("totalTopicNum",),
    RegisterBrokerRequestHeader: [
        "brokerName",
        "brokerAddr",
        "clusterName",
        "haServerAddr",
        "brokerId",
        "heartbeatTimeoutMillis",
        "enableActingMaster",
        "compressed",
        "bodyCrc32",
        "__ZONE_NAME",
    ],
    RegisterBrokerResponseHeader: ("haServerAddr", "masterAddr"),
    UnRegisterBrokerRequestHeader: ["brokerName", "brokerAddr", "clusterName", "brokerId"],
    GetRouteInfoRequestHeader: ("topic", "acceptStandardJsonOnly"),
}
HEADERS = list(WIRE_KEYS)


@pytest.mark.parametrize("header", HEADERS, ids=lambda header: header.__name__)
def test_wire_keys_are_the_java_field_names(header: type[CommandHeader]) -> None:
    assert tuple(wire.key for wire in _wire_fields(header)) == tuple(WIRE_KEYS[header])


VALUES = {
    _Kind.STRING: st.text(max_size=20),
    _Kind.INT32: st.integers(-(2**31), 2**31 - 1),
    _Kind.INT64: st.integers(-(2**63), 2**63 - 1),
    _Kind.BOOL: st.booleans(),
    _Kind.BOUNDARY_TYPE: st.sampled_from(BoundaryType),
}


def headers_of(header: type[CommandHeader]) -> st.SearchStrategy[CommandHeader]:
    """Any valid value of `header`: each field drawn by its wire kind, optional ones maybe None."""
    defaults = {field.name: field.default for field in dataclasses.fields(cast(Any, header))}
    fields = {}
    for wire in _wire_fields(header):
        values = VALUES[wire.kind]
        fields[wire.attr] = st.none() | values if defaults[wire.attr] is None else values
    return st.builds(header, **fields)


@pytest.mark.parametrize("header", HEADERS, ids=lambda header: header.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_ext_fields_round_trip(header: type[CommandHeader], data: st.DataObject) -> None:
    value = data.draw(headers_of(header))
    fields = value.to_ext_fields()
    assert all(isinstance(text, str) for text in fields.values())
    assert header.from_ext_fields(fields) == value


@given(value=headers_of(SendMessageRequestHeader))
def test_send_message_v2_keys_round_trip(value: CommandHeader) -> None:
    assert isinstance(value, SendMessageRequestHeader)
    fields = value.to_ext_fields_v2()
    assert set(fields) <= set("abcdefghijklmn")
    assert list(fields) == sorted(fields)
    assert SendMessageRequestHeader.from_ext_fields_v2(fields) == value
    assert SendMessageRequestHeader.from_ext_fields(value.to_ext_fields()) == value


def test_send_message_v2_ignores_long_keys_as_javas_fast_decoder_does() -> None:
    fields = dict(zip("abcdefgh", ["PG", "T", "TBW102", "4", "1", "0", "5", "0"], strict=True))
    header = SendMessageRequestHeader.from_ext_fields_v2({**fields, "bname": "b", "topic": "X"})
    assert (header.topic, header.broker_name) == ("T", None)


def required_cases() -> list[tuple[type[CommandHeader], str]]:
    return [
        (header, wire.key) for header in HEADERS for wire in _wire_fields(header) if wire.required
    ]


def typed_cases(*, refused: bool) -> list[tuple[type[CommandHeader], str]]:
    """Number fields whose unparsable text Java refuses (required, or a fast-codec header) or,
    with refused=False, ignores (optional fields of reflectively decoded headers)."""
    return [
        (header, wire.key)
        for header in HEADERS
        for wire in _wire_fields(header)
        if wire.kind in (_Kind.INT32, _Kind.INT64)
        and (wire.required or header._FAST_CODEC) is refused
    ]


def valid_fields(header: type[CommandHeader]) -> dict[str, str]:
    """Ext fields with every key present and valid."""
    text = {
        _Kind.STRING: "x",
        _Kind.INT32: "1",
        _Kind.INT64: "1",
        _Kind.BOOL: "true",
        _Kind.BOUNDARY_TYPE: "UPPER",
    }
    return {wire.key: text[wire.kind] for wire in _wire_fields(header)}


@pytest.mark.parametrize(("header", "key"), required_cases(), ids=str)
def test_missing_required_field_names_the_field(header: type[CommandHeader], key: str) -> None:
    fields = valid_fields(header)
    del fields[key]
    with pytest.raises(HeaderFieldError, match=f"required field {key} is missing") as caught:
        header.from_ext_fields(fields)
    assert (caught.value.header, caught.value.field, caught.value.value) == (
        header.__name__,
        key,
        None,
    )


@pytest.mark.parametrize(("header", "key"), typed_cases(refused=True), ids=str)
def test_unparsable_field_names_field_and_value(header: type[CommandHeader], key: str) -> None:
    with pytest.raises(HeaderFieldError) as caught:
        header.from_ext_fields({**valid_fields(header), key: "x1"})
    assert (caught.value.field, caught.value.value) == (key, "x1")
    assert f"field {key}='x1' is not" in str(caught.value)


@pytest.mark.parametrize(("header", "key"), typed_cases(refused=False), ids=str)
def test_unparsable_optional_number_keeps_its_default_as_java_does(
    header: type[CommandHeader], key: str
) -> None:
    fields = valid_fields(header)
    del fields[key]
    assert header.from_ext_fields({**fields, key: "x1"}) == header.from_ext_fields(fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param(
            {"topic": "T", "queueId": "2147483648"},
            "GetMaxOffsetRequestHeader: field queueId='2147483648' is not an int32 "
            "(-2147483648..2147483647)",
            id="int32-above-range",
        ),
        pytest.param(
            {"queueId": "1"},
            "GetMaxOffsetRequestHeader: required field topic is missing",
            id="missing-topic",
        ),
    ],
)
def test_error_message_states_field_value_and_limit(fields: dict[str, str], message: str) -> None:
    with pytest.raises(HeaderFieldError) as caught:
        GetMaxOffsetRequestHeader.from_ext_fields(fields)
    assert str(caught.value) == message


def test_defaults_follow_java() -> None:
    header = GetMaxOffsetRequestHeader.from_ext_fields({"topic": "T", "queueId": "0"})
    assert header.committed is True  # a Java primitive initialised to true
    assert header.to_ext_fields() == {"topic": "T", "queueId": "0", "committed": "true"}
    register = RegisterBrokerRequestHeader(
        broker_name="broker-a",
        broker_addr="192.168.0.10:10911",
        cluster_name="DefaultCluster",
        ha_server_addr="192.168.0.10:10912",
        broker_id=0,
        enable_acting_master=False,
        body_crc32=1735289491,
    )
    assert register.to_ext_fields() == {
        "brokerName": "broker-a",
        "brokerAddr": "192.168.0.10:10911",
        "clusterName": "DefaultCluster",
        "haServerAddr": "192.168.0.10:10912",
        "brokerId": "0",
        "enableActingMaster": "false",
        "compressed": "false",
        "bodyCrc32": "1735289491",
    }


def test_boundary_type_reads_like_java_and_writes_enum_names() -> None:
    def boundary(text: str) -> BoundaryType | None:
        fields = {"topic": "T", "queueId": "0", "timestamp": "1", "boundaryType": text}
        return SearchOffsetRequestHeader.from_ext_fields(fields).boundary_type

    assert boundary("UPPER") is boundary("upper") is BoundaryType.UPPER
    assert boundary("LOWER") is boundary("anything") is BoundaryType.LOWER
    header = SearchOffsetRequestHeader(
        topic="T", queue_id=0, timestamp=1, boundary_type=BoundaryType.UPPER
    )
    assert header.to_ext_fields()["boundaryType"] == "UPPER"


def test_unknown_keys_are_ignored() -> None:
    fields = {"consumerGroup": "CG", "AccessKey": "", "Signature": "", "OnsChannel": "ALIYUN"}
    header = NotifyConsumerIdsChangedRequestHeader.from_ext_fields(fields)
    assert header == NotifyConsumerIdsChangedRequestHeader(consumer_group="CG")


# Number texts near every rule of Java's parseInt / parseLong: plain digits of any length
# (the fast path reads those that always fit), signs, leading zeros, blanks, non-ASCII
# decimal digits (Java reads those of the BMP), a superscript and a supplementary-plane digit
# (Python's isdigit() says yes to both, Java to neither).
NUMBER_TEXTS = (
    st.text(st.sampled_from("0123456789"), max_size=21)
    | st.text(st.sampled_from("0123456789+-_ \u0661\uff10\u00b2\U0001d7ce"), max_size=21)
    | st.integers(-(2**64), 2**64).map(str)
)


@given(text=NUMBER_TEXTS)
@example(text="2147483648")  # one past int32: ten digits
@example(text="9223372036854775808")  # one past int64: nineteen digits
def test_a_number_field_reads_as_javas_parser_reads_it(text: str) -> None:
    for header, fields, key, attr, bits in (
        (GetMaxOffsetRequestHeader, {"topic": "T"}, "queueId", "queue_id", 32),
        (QueryConsumerOffsetResponseHeader, {}, "offset", "offset", 64),
    ):
        expected = java_int(text, bits=bits)
        if expected is None:
            with pytest.raises(HeaderFieldError):
                header.from_ext_fields({**fields, key: text})
        else:
            assert getattr(header.from_ext_fields({**fields, key: text}), attr) == expected
