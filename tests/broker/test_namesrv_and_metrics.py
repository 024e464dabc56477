"""Name-server registration (REGISTER_BROKER / UNREGISTER_BROKER) and the metrics endpoint."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from broker.node import BrokerNode
from pyrmq_client import Message, Producer
from remoting.bodies import RegisterBrokerBody
from remoting.codes import PYRMQ_VERSION, RequestCode
from remoting.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from store.message_crc import crc32
from tests.broker.support import (
    FakeNameServer,
    broker_config,
    connected,
    running_broker,
    wait_until,
)

pytestmark = pytest.mark.timeout(30)


async def test_registers_at_start_on_topic_change_and_unregisters_at_stop(
    tmp_path: Path,
) -> None:
    async with FakeNameServer() as first, FakeNameServer() as second:
        config = broker_config(tmp_path, namesrv_addr=f"{first.address};{second.address}")
        async with running_broker(config) as node:
            await wait_until(lambda: len(first.registrations) == 1 == len(second.registrations),
                             timeout_s=5, what="registration at start")
            request = first.registrations[0]
            header = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
            assert header.broker_addr == node.broker_addr
            assert (header.broker_name, header.cluster_name, header.broker_id) == (
                "broker-a", "DefaultCluster", 0)
            assert header.body_crc32 == crc32(request.body)
            assert (header.compressed, header.enable_acting_master) == (False, False)
            assert request.version == PYRMQ_VERSION == 513
            body = RegisterBrokerBody.decode(request.body)
            topics = body.topic_config_serialize_wrapper.topic_config_table
            assert "TBW102" in topics
            assert len(topics) >= 2
            async with connected(node) as client:
                await client.create_topic("NewTopic", read_queue_nums=2, write_queue_nums=2)
            await wait_until(lambda: len(first.registrations) == 2, timeout_s=5,
                             what="registration after a topic change")
            latest = RegisterBrokerBody.decode(first.registrations[-1].body)
            wrapper = latest.topic_config_serialize_wrapper
            assert "NewTopic" in wrapper.topic_config_table
            assert wrapper.data_version.counter > body.topic_config_serialize_wrapper \
                .data_version.counter
        for name_server in (first, second):
            unregisters = name_server.of_code(RequestCode.UNREGISTER_BROKER)
            assert len(unregisters) == 1
            unregister = UnRegisterBrokerRequestHeader.from_ext_fields(unregisters[0].ext_fields)
            assert (unregister.broker_name, unregister.broker_id) == ("broker-a", 0)
            assert unregister.broker_addr == header.broker_addr


async def test_an_unreachable_name_server_does_not_stop_the_broker(tmp_path: Path) -> None:
    async with FakeNameServer() as alive:
        config = broker_config(tmp_path, namesrv_addr=f"127.0.0.1:1;{alive.address}")
        async with running_broker(config) as node, connected(node) as client:
            await wait_until(lambda: len(alive.registrations) == 1, timeout_s=5,
                             what="registration with the live name server")
            result = await Producer(client, "PG").send(Message("T", b"x"))
            assert result.queue_offset == 0


async def scrape(node: BrokerNode) -> str:
    address = node.metrics_address
    assert address is not None
    reader, writer = await asyncio.open_connection(*address)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    async with asyncio.timeout(5):
        data = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 OK")
    return body.decode()


def sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(key) == value for key, value in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name} {labels} in:\n{text}")


async def test_metrics_use_rocketmq_names(tmp_path: Path) -> None:
    async with running_broker(broker_config(tmp_path)) as node, connected(node) as client:
        producer = Producer(client, "PG")
        await producer.send(Message("TopicTest", b"x" * 100), queue_id=0)
        await producer.send_batch([Message("TopicTest", b"a"), Message("TopicTest", b"b")],
                                  queue_id=0)
        await client.pull("CG", "TopicTest", 0, 0)
        text = await scrape(node)
    node_labels = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
    assert sample(text, "rocketmq_messages_in_total", topic="TopicTest", **node_labels) == 3
    assert sample(text, "rocketmq_throughput_in_total", topic="TopicTest") > 100
    assert sample(text, "rocketmq_messages_out_total", topic="TopicTest",
                  consumer_group="CG") == 3
    assert sample(text, "rocketmq_throughput_out_total", topic="TopicTest") > 100
    assert sample(text, "rocketmq_message_size_count", topic="TopicTest") == 2
    assert sample(text, "rocketmq_rpc_latency_count", request_code="send_message_v2",
                  response_code="success") == 1
    assert sample(text, "rocketmq_rpc_latency_count", request_code="send_batch_message") == 1
    assert sample(text, "rocketmq_rpc_latency_count", request_code="pull_message") == 1
    assert sample(text, "rocketmq_topic_number") >= 2
    assert "rocketmq_rpc_latency_bucket" in text
