"""Pure cores of the broker: tag filters, parked pulls, status mapping, ids, response headers."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import cast

import pytest

from broker.client_manager import ClientManager
from broker.processors.pull import pull_response_code, pull_response_fields
from broker.processors.send import message_limits_error, send_response_fields
from broker.pull_hold import ParkedPull, ParkedPulls
from broker.runtime_stats import TpsWindows
from remoting.bodies import MessageModel, SubscriptionData
from remoting.codec import encode
from remoting.codes import JAVA_VERSION_5_3_3, LanguageCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.headers import PullMessageResponseHeader
from store.message_properties import java_string_hash
from store.message_store import GetStatus
from store.tag_filter import (
    MATCH_ALL,
    UnsupportedExpressionError,
    build_tag_filter,
    filter_of_subscription,
)
from store.uniq_id import UniqIdGenerator
from tests.remoting.support import compact_json

TAG_A = java_string_hash("TagA")
TAG_B = java_string_hash("TagB")


@pytest.mark.parametrize(
    ("expression", "codes"),
    [
        pytest.param(None, None, id="none"),
        pytest.param("", None, id="empty"),
        pytest.param("*", None, id="star"),
        pytest.param(" * ", None, id="star-spaces"),
        pytest.param("TagA", {TAG_A}, id="one"),
        pytest.param("TagA || TagB", {TAG_A, TAG_B}, id="two"),
        pytest.param(" TagA||  ||TagB ", {TAG_A, TAG_B}, id="empty-parts-dropped"),
        pytest.param("||", set(), id="only-separators-matches-nothing"),
    ],
)
def test_tag_filter_of_an_expression(expression: str | None, codes: set[int] | None) -> None:
    tag_filter = build_tag_filter(expression, "TAG")
    assert tag_filter.codes == (None if codes is None else frozenset(codes))


def test_tag_filter_matches_hashes_and_unknown_tags() -> None:
    tag_filter = build_tag_filter("TagA")
    assert tag_filter.matches(TAG_A)
    assert not tag_filter.matches(TAG_B)
    assert tag_filter.matches(None)  # unknown tags (e.g. a batch arrival): re-check later
    assert MATCH_ALL.matches(TAG_B)


def test_sql92_is_refused() -> None:
    with pytest.raises(UnsupportedExpressionError, match="SQL92"):
        build_tag_filter("a > 1", "SQL92")


def test_heartbeat_subscription_uses_its_own_code_set() -> None:
    subscription = SubscriptionData(topic="T", sub_string="TagA", tags_set=("TagA",),
                                    code_set=(123,))
    assert filter_of_subscription(subscription.sub_string, subscription.expression_type,
                                  subscription.code_set).codes == frozenset({123})
    star = SubscriptionData(topic="T", sub_string="*")
    assert filter_of_subscription(star.sub_string, star.expression_type,
                                  star.code_set) is MATCH_ALL


def parked(offset: int, expression: str = "*", queue_id: int = 0) -> ParkedPull:
    return ParkedPull("T", queue_id, offset, build_tag_filter(expression))


def test_an_arrival_wakes_pulls_behind_it_that_match() -> None:
    pulls = ParkedPulls()
    at_5, at_6, tag_a, other_queue = parked(5), parked(6), parked(5, "TagA"), parked(5, "*", 1)
    for pull in (at_5, at_6, tag_a, other_queue):
        pulls.add(pull)
    assert pulls.arrivals("T", 0, 6, TAG_B) == [at_5]
    assert at_5.woken
    assert len(pulls) == 3
    assert pulls.arrivals("T", 0, 6, TAG_A) == [tag_a]
    assert pulls.arrivals("T", 0, 7, None) == [at_6]
    assert pulls.arrivals("T", 0, 100, None) == []
    assert pulls.queues() == [("T", 1)]
    pulls.remove(other_queue)
    pulls.remove(other_queue)  # twice is fine
    assert len(pulls) == 0
    assert pulls.queues() == []


@pytest.mark.parametrize(
    ("status", "request_offset", "code"),
    [
        (GetStatus.FOUND, 3, ResponseCode.SUCCESS),
        (GetStatus.NO_MATCHED_MESSAGE, 3, ResponseCode.PULL_RETRY_IMMEDIATELY),
        (GetStatus.NO_MESSAGE_IN_QUEUE, 0, ResponseCode.PULL_NOT_FOUND),
        (GetStatus.NO_MESSAGE_IN_QUEUE, 3, ResponseCode.PULL_OFFSET_MOVED),
        (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, ResponseCode.PULL_NOT_FOUND),
        (GetStatus.NO_MATCHED_LOGIC_QUEUE, 3, ResponseCode.PULL_OFFSET_MOVED),
        (GetStatus.OFFSET_OVERFLOW_ONE, 3, ResponseCode.PULL_NOT_FOUND),
        (GetStatus.OFFSET_OVERFLOW_BADLY, 3, ResponseCode.PULL_OFFSET_MOVED),
        (GetStatus.OFFSET_TOO_SMALL, 3, ResponseCode.PULL_OFFSET_MOVED),
    ],
)
def test_pull_status_to_response_code(status: GetStatus, request_offset: int, code: int) -> None:
    assert pull_response_code(status, request_offset=request_offset) == code


def header_json(frame: bytes) -> bytes:
    header_length = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
    return frame[8 : 8 + header_length]


def test_send_response_header_is_byte_identical_to_java() -> None:
    """docs/remoting-protocol.md §15.2."""
    fields = send_response_fields(
        queue_id=1, transaction_id="C0A8000100002A9F0000000000000001",
        msg_id="C0A8000A00002A9F0000000000000F3C", trace_on=True, region_id="DefaultRegion",
        queue_offset=17,
    )
    response = RemotingCommand(code=0, opaque=42).make_response(0, ext_fields=fields)
    # The spec's bytes are Java 5.3.3's: pyrmq (PYRMQ_VERSION, 5.5.0) differs only in `version`.
    response = dataclasses.replace(response, version=JAVA_VERSION_5_3_3)
    assert header_json(encode(response)) == compact_json(
        '{"code":0,"extFields":{"queueId":"1","transactionId":"C0A8000100002A9F0000000000000001",'
        '"msgId":"C0A8000A00002A9F0000000000000F3C","TRACE_ON":"true","MSG_REGION":'
        '"DefaultRegion","queueOffset":"17"},"flag":1,"language":"JAVA","opaque":42,'
        '"serializeTypeCurrentRPC":"JSON","version":479}'
    )


def test_pull_response_header_is_byte_identical_to_java() -> None:
    """docs/remoting-protocol.md §15.3."""
    fields = pull_response_fields(PullMessageResponseHeader(
        suggest_which_broker_id=0, next_begin_offset=18, min_offset=0, max_offset=18,
        topic_sys_flag=0, group_sys_flag=0,
    ))
    response = RemotingCommand(code=11, opaque=43).make_response(
        0, remark="FOUND", ext_fields=fields
    )
    response = dataclasses.replace(response, version=JAVA_VERSION_5_3_3)
    expected = (
        '{"code":0,"extFields":{"suggestWhichBrokerId":"0","groupSysFlag":"0",'
        '"nextBeginOffset":"18","maxOffset":"18","minOffset":"0","topicSysFlag":"0"},"flag":1,'
        '"language":"JAVA","opaque":43,"remark":"FOUND","serializeTypeCurrentRPC":"JSON",'
        '"version":479}'
    )
    assert header_json(encode(response)) == expected.encode()
    assert len(expected) == 0xF8


@pytest.mark.parametrize(
    ("topic", "body", "properties", "problem"),
    [
        pytest.param("T", 1024, b"a\x01b\x02", None, id="ok"),
        pytest.param("T", 1025, b"", "body_size=1025", id="body"),
        pytest.param("T", 0, b"k\x01" + b"v" * (32767 - 20 - 3) + b"\x02", None,
                     id="properties-at-limit"),
        pytest.param("T", 0, b"k\x01" + b"v" * (32767 - 20 - 2), "properties_size",
                     id="unterminated-properties-over"),
        pytest.param("T", 0, b"k\x01" + b"v" * (32767 - 20 - 2) + b"\x02", "properties_size",
                     id="properties-over"),
        pytest.param("%DLQ%" + "g" * 130, 0, b"", "exceeds the limit of 127", id="dlq-topic"),
        pytest.param("%RETRY%" + "g" * 130, 0, b"", None, id="retry-topic-long-ok"),
    ],
)
def test_message_limits(topic: str, body: int, properties: bytes, problem: str | None) -> None:
    error = message_limits_error(topic, body_bytes=body, properties=properties,
                                 max_message_size=1024, append_prop_crc=True)
    assert (error is None) if problem is None else (error is not None and problem in error)


def test_uniq_ids_look_like_javas_and_differ() -> None:
    generator = UniqIdGenerator(bytes([192, 168, 0, 1]), pid=0x2A9F, salt=b"\0\0\0\0")
    first = generator.next_id(now_ms=1_700_000_000_000)
    second = generator.next_id(now_ms=1_700_000_000_000)
    assert re.fullmatch(r"C0A800012A9F00000000[0-9A-F]{12}", first)
    assert first != second
    assert int(second[-4:], 16) == int(first[-4:], 16) + 1


class FakeConnection:
    """What ClientManager uses of a connection."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.is_closing = False
        self.close_callbacks: list[Callable[[RemotingConnection], None]] = []

    def add_close_callback(self, callback: Callable[[RemotingConnection], None]) -> None:
        self.close_callbacks.append(callback)

    def close(self) -> None:
        self.is_closing = True
        for callback in self.close_callbacks:
            callback(cast(RemotingConnection, self))


def test_client_manager_membership_changes_and_expiry() -> None:
    now = [0]
    changed: list[str] = []
    manager = ClientManager(channel_expired_timeout_ms=120_000, on_group_changed=changed.append,
                            clock_ms=lambda: now[0])
    first, second = FakeConnection("10.0.0.1:1"), FakeConnection("10.0.0.2:2")
    sub = SubscriptionData(topic="T", sub_string="*")

    def heartbeat(connection: FakeConnection, client_id: str,
                  subscriptions: tuple[SubscriptionData, ...] | None = (sub,)) -> bool:
        info = manager.channel_info(cast(RemotingConnection, connection), client_id,
                                    LanguageCode.JAVA, 479)
        return manager.register_consumer(
            "CG", info, consume_type=None, message_model=MessageModel.CLUSTERING,
            consume_from_where=None, subscriptions=subscriptions, notify_enabled=True,
        )

    assert heartbeat(first, "c1")
    assert not heartbeat(first, "c1")  # a repeated heartbeat changes nothing
    assert heartbeat(second, "c2")
    assert changed == ["CG", "CG"]
    group = manager.consumer_group("CG")
    assert group is not None
    assert sorted(group.client_ids()) == ["c1", "c2"]
    assert not heartbeat(first, "c1", subscriptions=None)  # withoutSub keeps subscriptions
    assert manager.find_subscription("CG", "T") == sub
    second.close()
    assert changed == ["CG", "CG", "CG"]
    group = manager.consumer_group("CG")
    assert group is not None
    assert group.client_ids() == ["c1"]
    now[0] = 120_001
    manager.scan_expired()
    assert manager.consumer_group("CG") is None
    assert changed == ["CG", "CG", "CG", "CG"]


def test_tps_windows_print_javas_three_rates() -> None:
    windows = TpsWindows()
    for second in range(12):
        windows.sample(float(second), second * 50)
    assert windows.tps(10) == "50.0"
    assert windows.tps(60) == ""  # not enough samples yet, as Java prints it
    assert windows.text() == "50.0  "
