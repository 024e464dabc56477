"""RocketMQ 5.5.0's optional `liteTopic` header field (docs/remoting-protocol.md §5, §6.4, §6.7;
spec README "Version differences" row 9): a 5.5.0 broker reads a non-empty one in PULL_MESSAGE and
SEARCH_OFFSET_BY_TIMESTAMP as "the lite topic's LMQ instead of `topic`". pyrmq has no lite topics
and must not serve the parent topic instead: it answers SYSTEM_ERROR naming the field and changes
nothing; an empty value is ignored, as is every other unknown key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.node import BrokerNode
from pyrmq_client import BrokerClient, Message, Producer
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.support import broker_config, connected, running_broker

TOPIC = "TopicTest"
PULL = {
    "consumerGroup": "CG", "topic": TOPIC, "queueId": "0", "queueOffset": "0",
    "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
    "subVersion": "0",
}
SEARCH = {"topic": TOPIC, "queueId": "0", "timestamp": "0"}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[BrokerClient]:
    node: BrokerNode
    async with running_broker(broker_config(tmp_path)) as node, connected(node) as opened:
        await Producer(opened, "PG").send(Message(TOPIC, b"m", tags="TagA"), queue_id=0)
        await opened.heartbeat(consumer_groups={"CG": {TOPIC: "*"}})
        yield opened


@pytest.mark.parametrize(
    ("code", "fields"),
    [
        pytest.param(RequestCode.PULL_MESSAGE, PULL, id="pull"),
        pytest.param(RequestCode.LITE_PULL_MESSAGE, PULL, id="lite-pull"),
        pytest.param(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SEARCH, id="search-offset"),
    ],
)
async def test_a_lite_topic_is_refused_naming_the_field_and_an_empty_one_is_ignored(
    client: BrokerClient, code: int, fields: dict[str, str]
) -> None:
    refused = await client.invoke(
        RemotingCommand.request(code, {**fields, "liteTopic": "lite-1"}))
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert refused.remark is not None
    assert "liteTopic='lite-1'" in refused.remark
    assert refused.body == b""
    served = await client.invoke(RemotingCommand.request(code, {**fields, "liteTopic": ""}))
    assert served.code == ResponseCode.SUCCESS, served.remark
    plain = await client.invoke(RemotingCommand.request(code, fields))
    assert (served.ext_fields, served.body) == (plain.ext_fields, plain.body)
