"""A real broker on loopback TCP with a real store under tmp_path, driven by pyrmq's client."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.node import BrokerNode
from pyrmq_client import BrokerClient, Message, Producer, PullConsumer, PullStatus
from pyrmq_client.errors import BrokerClientError
from remoting.bodies import ConsumeType
from remoting.codes import PYRMQ_VERSION_DESC, RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import SendMessageRequestHeader
from store.host_port import HostPort, offset_msg_id
from store.message_properties import encode_properties
from store.record_layout import MessageRecord
from tests.broker.support import broker_config, connected, running_broker, wait_until

pytestmark = pytest.mark.timeout(30)

TOPIC = "TopicTest"


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[BrokerNode]:
    async with running_broker(broker_config(tmp_path, max_message_size=64 * 1024)) as node:
        yield node


@pytest.fixture
async def client(broker: BrokerNode) -> AsyncIterator[BrokerClient]:
    async with connected(broker) as opened:
        yield opened


def store_of(node: BrokerNode) -> HostPort:
    return HostPort.from_str(f"{node.address[0]}:{node.address[1]}")


async def test_create_topic_send_single_v2_and_batch_then_pull(
    broker: BrokerNode, client: BrokerClient
) -> None:
    await client.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    table = (await client.topic_configs()).topic_config_table
    assert (table[TOPIC].read_queue_nums, table[TOPIC].write_queue_nums) == (2, 2)
    producer = Producer(client, "PG")
    v1 = await client.send(Message(TOPIC, b"one", tags="TagA", keys="k1"), producer_group="PG",
                           queue_id=0, v2=False)
    v2 = await producer.send(Message(TOPIC, b"two", tags="TagB"), queue_id=0)
    batch = await producer.send_batch(
        [Message(TOPIC, b"three"), Message(TOPIC, b"four", tags="TagA")], queue_id=0
    )
    assert (v1.queue_offset, v2.queue_offset, batch.queue_offset) == (0, 1, 2)
    assert (v1.code, v1.region_id, v1.trace_on) == (ResponseCode.SUCCESS, "DefaultRegion", True)
    assert v1.msg_id == offset_msg_id(store_of(broker), 0)
    assert len(batch.msg_id.split(",")) == 2
    assert await client.max_offset(TOPIC, 0) == 4
    assert await client.min_offset(TOPIC, 0) == 0

    pulled = await PullConsumer(client, "CG").pull(TOPIC, 0, 0)
    assert (pulled.status, pulled.remark) == (PullStatus.FOUND, "FOUND")
    assert (pulled.next_begin_offset, pulled.min_offset, pulled.max_offset) == (4, 0, 4)
    assert [m.body for m in pulled.messages] == [b"one", b"two", b"three", b"four"]
    assert [m.queue_offset for m in pulled.messages] == [0, 1, 2, 3]
    first = pulled.messages[0]
    props = first.properties_map()
    assert (props["TAGS"], props["KEYS"], props["CLUSTER"]) == ("TagA", "k1", "DefaultCluster")
    assert props["UNIQ_KEY"] == v1.uniq_msg_id
    assert first.store_host == store_of(broker)
    assert [m.phy_offset for m in pulled.messages[2:]] == [
        int(msg_id[-16:], 16) for msg_id in batch.msg_id.split(",")
    ]


async def test_pull_codes_at_and_beyond_the_end(client: BrokerClient) -> None:
    await Producer(client, "PG").send(Message(TOPIC, b"x"), queue_id=0)
    consumer = PullConsumer(client, "CG")
    at_end = await consumer.pull(TOPIC, 0, 1)
    assert (at_end.status, at_end.remark, at_end.next_begin_offset) == (
        PullStatus.NO_NEW_MSG, "OFFSET_OVERFLOW_ONE", 1)
    beyond = await consumer.pull(TOPIC, 0, 9)
    assert (beyond.status, beyond.remark, beyond.next_begin_offset) == (
        PullStatus.OFFSET_ILLEGAL, "OFFSET_OVERFLOW_BADLY", 1)
    empty_queue = await consumer.pull(TOPIC, 1, 0)
    assert empty_queue.status is PullStatus.NO_NEW_MSG
    moved = await consumer.pull(TOPIC, 1, 5)
    assert (moved.status, moved.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 0)
    with pytest.raises(BrokerClientError) as caught:
        await consumer.pull(TOPIC, 99, 0)
    assert caught.value.code == ResponseCode.INVALID_PARAMETER
    with pytest.raises(BrokerClientError) as caught:
        await consumer.pull("NoSuchTopic", 0, 0)
    assert caught.value.code == ResponseCode.TOPIC_NOT_EXIST


async def test_long_poll_wakes_when_a_message_arrives(
    broker: BrokerNode, client: BrokerClient
) -> None:
    producer = Producer(client, "PG")
    await producer.send(Message(TOPIC, b"first"), queue_id=0)
    started = time.monotonic()
    waiting = asyncio.create_task(
        PullConsumer(client, "CG").pull(TOPIC, 0, 1, suspend_timeout_ms=10_000)
    )
    assert broker.pull_hold is not None
    hold = broker.pull_hold
    await wait_until(lambda: len(hold) == 1, timeout_s=5, what="pull parked")
    await producer.send(Message(TOPIC, b"second"), queue_id=0)
    pulled = await waiting
    assert pulled.status is PullStatus.FOUND
    assert [m.body for m in pulled.messages] == [b"second"]
    assert time.monotonic() - started < 5
    assert len(hold) == 0


async def test_long_poll_answers_not_found_at_its_deadline(
    broker: BrokerNode, client: BrokerClient
) -> None:
    await Producer(client, "PG").send(Message(TOPIC, b"x"), queue_id=0)
    started = time.monotonic()
    pulled = await PullConsumer(client, "CG").pull(TOPIC, 0, 1, suspend_timeout_ms=300)
    elapsed = time.monotonic() - started
    assert pulled.status is PullStatus.NO_NEW_MSG
    assert 0.25 <= elapsed < 5
    assert broker.pull_hold is not None
    assert len(broker.pull_hold) == 0


async def test_long_poll_with_a_tag_filter_ignores_other_tags(
    broker: BrokerNode, client: BrokerClient
) -> None:
    producer = Producer(client, "PG")
    await producer.send(Message(TOPIC, b"x", tags="TagA"), queue_id=0)
    waiting = asyncio.create_task(PullConsumer(client, "CG").pull(
        TOPIC, 0, 1, subscription="TagA", suspend_timeout_ms=10_000))
    assert broker.pull_hold is not None
    hold = broker.pull_hold
    await wait_until(lambda: len(hold) == 1, timeout_s=5, what="pull parked")
    await producer.send(Message(TOPIC, b"b", tags="TagB"), queue_id=0)
    assert len(hold) == 1
    assert not waiting.done()
    await producer.send(Message(TOPIC, b"a", tags="TagA"), queue_id=0)
    pulled = await waiting
    assert [m.body for m in pulled.messages] == [b"a"]
    assert pulled.next_begin_offset == 3


async def test_tag_filtering_on_the_broker(client: BrokerClient) -> None:
    producer = Producer(client, "PG")
    for body, tags in ((b"1", "TagA"), (b"2", "TagB"), (b"3", "TagA"), (b"4", None)):
        await producer.send(Message(TOPIC, body, tags=tags), queue_id=0)
    consumer = PullConsumer(client, "CG")

    async def bodies(expression: str) -> list[bytes]:
        pulled = await consumer.pull(TOPIC, 0, 0, subscription=expression)
        return [m.body for m in pulled.messages]

    assert await bodies("TagA") == [b"1", b"3"]
    assert await bodies("TagB") == [b"2"]
    assert await bodies("TagA || TagB") == [b"1", b"2", b"3"]
    assert await bodies("*") == [b"1", b"2", b"3", b"4"]
    nothing = await consumer.pull(TOPIC, 0, 0, subscription="TagC")
    assert (nothing.status, nothing.remark) == (PullStatus.NO_MATCHED_MSG, "NO_MATCHED_MESSAGE")
    assert nothing.next_begin_offset == 4


async def test_offsets_and_topics_persist_across_a_restart(tmp_path: Path) -> None:
    config = broker_config(tmp_path)
    async with running_broker(config) as node, connected(node) as client:
        producer = Producer(client, "PG")
        for index in range(3):
            await producer.send(Message(TOPIC, b"m%d" % index), queue_id=1)
        consumer = PullConsumer(client, "CG")
        assert await consumer.committed(TOPIC, 1) is None
        await consumer.pull(TOPIC, 1, 0)  # creates the group
        await consumer.commit(TOPIC, 1, 2)
        assert await consumer.committed(TOPIC, 1) == 2
        await consumer.pull(TOPIC, 1, 2, commit_offset=3)  # COMMIT_OFFSET flag on a pull
        assert await consumer.committed(TOPIC, 1) == 3
    offsets_json = (tmp_path / "config" / "consumerOffset.json").read_text()
    assert f'"{TOPIC}@CG":{{1:3}}' in offsets_json
    topics = json.loads((tmp_path / "config" / "topics.json").read_text())
    assert TOPIC in topics["topicConfigTable"]
    groups = json.loads((tmp_path / "config" / "subscriptionGroup.json").read_text())
    assert "CG" in groups["subscriptionGroupTable"]
    async with running_broker(config) as node, connected(node) as client:
        consumer = PullConsumer(client, "CG")
        assert await consumer.committed(TOPIC, 1) == 3
        pulled = await consumer.pull(TOPIC, 1, 0)
        assert [m.body for m in pulled.messages] == [b"m0", b"m1", b"m2"]
        assert (await client.topic_configs()).topic_config_table[TOPIC].write_queue_nums == 4


async def test_heartbeat_consumer_list_and_notify_to_other_consumers(
    broker: BrokerNode, client: BrokerClient
) -> None:
    consumer = {"CG": {TOPIC: "*"}}
    await client.heartbeat(consumer_groups=consumer, producer_groups=["PG"],
                           consume_type=ConsumeType.CONSUME_PASSIVELY)
    assert await client.consumer_ids("CG") == [client.client_id]
    table = (await client.topic_configs()).topic_config_table
    assert "%RETRY%CG" in table  # the group's retry topic is created by the heartbeat
    async with connected(broker) as second:
        await second.heartbeat(consumer_groups=consumer)
        await wait_until(lambda: "CG" in client.notified_groups, timeout_s=5,
                         what="first consumer notified of the second")
        assert sorted(await client.consumer_ids("CG")) == sorted(
            [client.client_id, second.client_id])
        client.notified_groups.clear()
        await second.unregister(consumer_group="CG")
        await wait_until(lambda: "CG" in client.notified_groups, timeout_s=5,
                         what="notified of the unregistration")
        assert await client.consumer_ids("CG") == [client.client_id]
        first_seen, second_seen = len(client.notified_groups), len(second.notified_groups)
        await second.heartbeat(consumer_groups=consumer)
        await wait_until(
            lambda: len(client.notified_groups) > first_seen
            and len(second.notified_groups) > second_seen,
            timeout_s=5, what="both consumers notified of the second one's return",
        )
        client.notified_groups.clear()
    # The second connection closed: the broker drops it and tells the first consumer.
    await wait_until(lambda: "CG" in client.notified_groups, timeout_s=5,
                     what="notified of the closed connection")
    assert await client.consumer_ids("CG") == [client.client_id]
    with pytest.raises(BrokerClientError) as caught:
        await client.consumer_ids("NOBODY")
    assert caught.value.code == ResponseCode.SYSTEM_ERROR
    assert caught.value.remark == "no consumer for this group, NOBODY"


async def test_pull_with_the_heartbeat_subscription(client: BrokerClient) -> None:
    producer = Producer(client, "PG")
    await producer.send(Message(TOPIC, b"a", tags="TagA"), queue_id=0)
    await producer.send(Message(TOPIC, b"b", tags="TagB"), queue_id=0)
    header = {
        "consumerGroup": "CG", "topic": TOPIC, "queueId": "0", "queueOffset": "0",
        "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
        "subVersion": "0",
    }
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, header)
    response = await client.invoke(request)
    assert response.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    await client.heartbeat(consumer_groups={"CG": {TOPIC: "TagB"}})
    response = await client.invoke(RemotingCommand.request(RequestCode.PULL_MESSAGE, header))
    assert response.code == ResponseCode.SUCCESS
    assert response.ext_fields["nextBeginOffset"] == "2"
    newer = {**header, "subVersion": str(2**62)}
    response = await client.invoke(RemotingCommand.request(RequestCode.PULL_MESSAGE, newer))
    assert response.code == ResponseCode.SUBSCRIPTION_NOT_LATEST


async def test_send_back_goes_to_the_retry_topic_then_the_dlq(client: BrokerClient) -> None:
    sent = await Producer(client, "PG").send(Message(TOPIC, b"failing", tags="TagA"),
                                             queue_id=0)
    consumer = PullConsumer(client, "CG")
    original = (await consumer.pull(TOPIC, 0, 0)).messages[0]
    sent_back_ms = time.time_ns() // 1_000_000
    await client.send_back("CG", original, delay_level=1)
    # Level 1 (1 s): first in SCHEDULE_TOPIC_XXXX queue 0, then in the retry topic.
    scheduled = (await consumer.pull("SCHEDULE_TOPIC_XXXX", 0, 0)).messages
    assert [m.properties_map()["REAL_TOPIC"] for m in scheduled] == ["%RETRY%CG"]
    assert scheduled[0].properties_map()["DELAY"] == "1"
    retried: list[MessageRecord] = []

    async def pull_retry() -> bool:
        retried.extend((await consumer.pull("%RETRY%CG", 0, 0)).messages)
        return bool(retried)

    while not await pull_retry():
        assert time.time_ns() // 1_000_000 - sent_back_ms < 10_000, "retry not delivered"
        await asyncio.sleep(0.05)
    assert len(retried) == 1
    retry = retried[0]
    assert retry.store_timestamp - scheduled[0].store_timestamp >= 1000
    props = retry.properties_map()
    assert "DELAY" not in props
    assert retry.body == b"failing"
    assert retry.reconsume_times == 1
    assert props["RETRY_TOPIC"] == TOPIC
    assert props["ORIGIN_MESSAGE_ID"] == sent.msg_id
    assert props["UNIQ_KEY"] == sent.uniq_msg_id
    assert props["TAGS"] == "TagA"
    # reconsumeTimes (1) reached maxReconsumeTimes (1): the next failure goes to the DLQ.
    await client.send_back("CG", retry, max_reconsume_times=1)
    dead = (await consumer.pull("%DLQ%CG", 0, 0)).messages
    assert len(dead) == 1
    assert dead[0].reconsume_times == 2
    assert dead[0].properties_map()["ORIGIN_MESSAGE_ID"] == sent.msg_id
    assert dead[0].properties_map()["RETRY_TOPIC"] == TOPIC


async def test_send_back_of_an_unknown_offset_fails(client: BrokerClient) -> None:
    await Producer(client, "PG").send(Message(TOPIC, b"x"), queue_id=0)
    record = (await PullConsumer(client, "CG").pull(TOPIC, 0, 0)).messages[0]
    bogus = dataclasses.replace(record, phy_offset=10**9)
    with pytest.raises(BrokerClientError, match="look message by offset failed") as caught:
        await client.send_back("CG", bogus)
    assert caught.value.code == ResponseCode.SYSTEM_ERROR


async def test_runtime_info_and_search_offset(broker: BrokerNode, client: BrokerClient) -> None:
    before = time.time_ns() // 1_000_000
    producer = Producer(client, "PG")
    for _ in range(3):
        await producer.send(Message(TOPIC, b"x"), queue_id=0)
    info = await client.runtime_info()
    assert broker.store is not None
    assert info["commitLogMaxOffset"] == str(broker.store.max_phy_offset)
    assert info["commitLogMinOffset"] == "0"
    assert info["msgPutTotalTodayNow"] == "3"
    assert info["brokerVersionDesc"] == PYRMQ_VERSION_DESC
    assert info["runtime"].startswith("[ 0 days")
    assert len(info["putTps"].split(" ")) == 3  # what `mqadmin clusterList` splits
    assert await client.search_offset(TOPIC, 0, before - 10_000) == 0
    assert await client.search_offset(TOPIC, 0, time.time_ns() // 1_000_000 + 10_000) == 3
    assert await client.search_offset(TOPIC, 0, before - 10_000, upper=True) == 0


async def test_unknown_code_is_not_supported(client: BrokerClient) -> None:
    response = await client.invoke(RemotingCommand.request(9999))
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 9999 not supported"


async def test_missing_header_field_is_a_system_error_naming_it(client: BrokerClient) -> None:
    response = await client.invoke(RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                                           {"topic": TOPIC}))
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "queueId" in (response.remark or "")


def send_request(topic: str, body: bytes, properties: str = "", *,
                 batch: bool = False) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="PG", topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=0, sys_flag=0, born_timestamp=0, flag=0, properties=properties, batch=batch,
    )
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand.request(code, header.to_ext_fields_v2(), body)


@pytest.mark.parametrize(
    ("topic", "body", "properties", "batch", "code"),
    [
        pytest.param(TOPIC, b"x" * (64 * 1024 + 1), "", False, ResponseCode.MESSAGE_ILLEGAL,
                     id="body-too-large"),
        pytest.param(TOPIC, b"x", "K\x01" + "v" * 32_760 + "\x02", False,
                     ResponseCode.MESSAGE_ILLEGAL, id="properties-too-large"),
        pytest.param("%DLQ%" + "g" * 130, b"x", "", False, ResponseCode.MESSAGE_ILLEGAL,
                     id="dlq-topic-too-long-for-the-store"),
        pytest.param(TOPIC, b"\x00\x00\x00\x30\x00\x00", "", True, ResponseCode.MESSAGE_ILLEGAL,
                     id="malformed-batch"),
        pytest.param("%RETRY%CG", b"", "", True, ResponseCode.MESSAGE_ILLEGAL,
                     id="batch-to-retry-topic"),
        pytest.param("Topic Test", b"x", "", False, ResponseCode.INVALID_PARAMETER,
                     id="illegal-characters"),
        pytest.param("T" * 128, b"x", "", False, ResponseCode.INVALID_PARAMETER,
                     id="topic-over-127"),
        pytest.param("SCHEDULE_TOPIC_XXXX", b"x", "", False, ResponseCode.NO_PERMISSION,
                     id="not-allowed-topic"),
        pytest.param(TOPIC, b"x", "TRAN_MSG\x01true\x02", False, ResponseCode.NO_PERMISSION,
                     id="transaction"),
    ],
)
async def test_refused_messages_append_nothing(
    broker: BrokerNode, client: BrokerClient, topic: str, body: bytes, properties: str,
    batch: bool, code: int,
) -> None:
    await Producer(client, "PG").send(Message(TOPIC, b"before"), queue_id=0)
    assert broker.store is not None
    assert broker.topic_configs is not None
    max_phy = broker.store.max_phy_offset
    topics_before = {config.topic_name for config in broker.topic_configs}
    response = await client.invoke(send_request(topic, body, properties, batch=batch))
    assert response.code == code, response.remark
    assert response.ext_fields["MSG_REGION"] == "DefaultRegion"
    assert broker.store.max_phy_offset == max_phy
    assert {config.topic_name for config in broker.topic_configs} == topics_before


async def test_unknown_topic_without_auto_creation_is_topic_not_exist(tmp_path: Path) -> None:
    config = broker_config(tmp_path, auto_create_topic_enable=False)
    async with running_broker(config) as node, connected(node) as client:
        with pytest.raises(BrokerClientError) as caught:
            await Producer(client, "PG").send(Message("Unknown", b"x"))
        assert caught.value.code == ResponseCode.TOPIC_NOT_EXIST
        await client.create_topic("Known", read_queue_nums=1, write_queue_nums=1)
        result = await Producer(client, "PG").send(Message("Known", b"x"))
        assert (result.queue_id, result.queue_offset) == (0, 0)


async def test_admin_topic_checks(client: BrokerClient) -> None:
    with pytest.raises(BrokerClientError) as caught:
        await client.create_topic("TBW102")
    assert caught.value.code == ResponseCode.INVALID_PARAMETER
    with pytest.raises(BrokerClientError) as caught:
        await client.create_topic("bad topic")
    assert caught.value.code == ResponseCode.INVALID_PARAMETER
    await client.create_topic("Same", read_queue_nums=2, write_queue_nums=2)
    await client.create_topic("Same", read_queue_nums=2, write_queue_nums=2)  # no change: 0


async def test_retry_send_over_max_reconsume_goes_to_dlq(client: BrokerClient) -> None:
    properties = encode_properties({"UNIQ_KEY": "AB"}).decode()
    header = SendMessageRequestHeader(
        producer_group="PG", topic="%RETRY%CG", default_topic="TBW102",
        default_topic_queue_nums=4, queue_id=0, sys_flag=0, born_timestamp=0, flag=0,
        properties=properties, reconsume_times=17,
    )
    response = await client.invoke(RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, header.to_ext_fields_v2(), b"late"))
    assert response.code == ResponseCode.SUCCESS
    dead = await PullConsumer(client, "CG").pull("%DLQ%CG", 0, 0)
    assert [m.body for m in dead.messages] == [b"late"]
    assert dead.messages[0].properties_map()["DELAY"] == "-1"
