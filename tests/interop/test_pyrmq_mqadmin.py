"""`mqadmin` (Apache RocketMQ rocketmq-tools, each release) against pyrmq's name server and broker:
updateTopic, topicList, topicStatus, clusterList and brokerStatus succeed and print pyrmq's data.

A topic is created with `updateTopic -r 3 -w 5`, then pyrmq's own client stores 3 messages in
queue 0 and 1 in queue 4, so that topicStatus has offsets to show.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from dataclasses import dataclass

import pytest

from pyrmq_client import BrokerClient, Message, Producer
from remoting.bodies import PERM_READ, PERM_WRITE, TopicConfig
from remoting.codes import PYRMQ_VERSION_DESC
from tests.interop.conftest import PyrmqCluster
from tests.interop.pyrmq_env import PyrmqProcess
from tests.interop.routes import wait_for_route

pytestmark = pytest.mark.interop

TOPIC = "PyrmqInteropAdmin"
READ_QUEUE_NUMS = 3
WRITE_QUEUE_NUMS = 5
MESSAGES_BY_QUEUE = {0: 3, 4: 1}
# mqadmin's topicStatus prints "Last Updated" as UtilAll.timeMillisToHumanString2.
HUMAN_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}")


@dataclass(frozen=True, slots=True)
class AdminTopic:
    """The topic updateTopic created, and that command's output."""

    update: subprocess.CompletedProcess[str]


def split_addr(process: PyrmqProcess) -> tuple[str, int]:
    host, port = process.addr.rsplit(":", 1)
    return host, int(port)


@pytest.fixture(scope="module")
def admin_topic(pyrmq_cluster: PyrmqCluster) -> AdminTopic:
    update = pyrmq_cluster.java.mqadmin(
        pyrmq_cluster.namesrv.addr,
        "updateTopic",
        "-c", "DefaultCluster",
        "-t", TOPIC,
        "-r", str(READ_QUEUE_NUMS),
        "-w", str(WRITE_QUEUE_NUMS),
    )

    async def send() -> None:
        async with await BrokerClient.connect(*split_addr(pyrmq_cluster.broker)) as client:
            producer = Producer(client, "pyrmq_interop_admin_producer")
            for queue_id, count in MESSAGES_BY_QUEUE.items():
                for i in range(count):
                    message = Message(TOPIC, f"admin-{queue_id}-{i}".encode(), tags="TagA")
                    await producer.send(message, queue_id=queue_id)

    asyncio.run(send())
    return AdminTopic(update)


def test_update_topic_creates_the_topic_with_the_given_queue_counts(
    pyrmq_cluster: PyrmqCluster, admin_topic: AdminTopic
) -> None:
    out = admin_topic.update.stdout
    assert f"create topic to {pyrmq_cluster.broker.addr} success." in out, out
    assert (
        f"TopicConfig [topicName={TOPIC}, readQueueNums={READ_QUEUE_NUMS}, "
        f"writeQueueNums={WRITE_QUEUE_NUMS}, perm=RW-" in out
    ), out

    async def broker_topic_configs() -> dict[str, TopicConfig]:
        async with await BrokerClient.connect(*split_addr(pyrmq_cluster.broker)) as client:
            return dict((await client.topic_configs()).topic_config_table)

    config = asyncio.run(broker_topic_configs())[TOPIC]
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (
        READ_QUEUE_NUMS,
        WRITE_QUEUE_NUMS,
        PERM_READ | PERM_WRITE,
    )
    route = wait_for_route(pyrmq_cluster.namesrv.addr, TOPIC)
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [
        ("broker-a", READ_QUEUE_NUMS, WRITE_QUEUE_NUMS)
    ]


def test_topic_list_shows_the_created_topic(
    pyrmq_cluster: PyrmqCluster, admin_topic: AdminTopic
) -> None:
    wait_for_route(pyrmq_cluster.namesrv.addr, TOPIC)
    done = pyrmq_cluster.java.mqadmin(pyrmq_cluster.namesrv.addr, "topicList")
    topics = done.stdout.split()
    assert TOPIC in topics, done.stdout
    assert "TBW102" in topics, done.stdout  # the broker's auto-create template is routed too


def test_topic_status_shows_every_queues_offsets(
    pyrmq_cluster: PyrmqCluster, admin_topic: AdminTopic
) -> None:
    wait_for_route(pyrmq_cluster.namesrv.addr, TOPIC)
    done = pyrmq_cluster.java.mqadmin(pyrmq_cluster.namesrv.addr, "topicStatus", "-t", TOPIC)
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["#Broker", "Name", "#QID", "#Min", "Offset", "#Max", "Offset",
                                "#Last", "Updated"], done.stdout
    rows = [line.split(maxsplit=4) for line in lines[1:] if line.startswith("broker-a")]
    # One row per queue up to max(read, write) queue nums, as a Java broker answers.
    assert [row[:4] for row in rows] == [
        ["broker-a", str(q), "0", str(MESSAGES_BY_QUEUE.get(q, 0))]
        for q in range(max(READ_QUEUE_NUMS, WRITE_QUEUE_NUMS))
    ], done.stdout
    for row in rows:
        last_updated = row[4] if len(row) == 5 else ""
        assert bool(HUMAN_TIMESTAMP.fullmatch(last_updated)) == (int(row[1]) in MESSAGES_BY_QUEUE)
    assert "Topic Put TPS: 0.0" in lines, done.stdout


def test_cluster_list_shows_the_pyrmq_broker(pyrmq_cluster: PyrmqCluster) -> None:
    done = pyrmq_cluster.java.mqadmin(pyrmq_cluster.namesrv.addr, "clusterList")
    rows = [line.split() for line in done.stdout.splitlines()]
    assert ["DefaultCluster", "broker-a", "0", pyrmq_cluster.broker.addr,
            PYRMQ_VERSION_DESC] in [
        row[:5] for row in rows
    ], done.stdout


def test_broker_status_prints_the_runtime_info(
    pyrmq_cluster: PyrmqCluster, admin_topic: AdminTopic
) -> None:
    done = pyrmq_cluster.java.mqadmin(
        pyrmq_cluster.namesrv.addr, "brokerStatus", "-b", pyrmq_cluster.broker.addr
    )
    printed = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            printed[key.strip()] = value.strip()

    async def runtime_info() -> dict[str, str]:
        async with await BrokerClient.connect(*split_addr(pyrmq_cluster.broker)) as client:
            return await client.runtime_info()

    assert set(printed) == set(asyncio.run(runtime_info())), done.stdout
    assert printed["brokerVersionDesc"] == PYRMQ_VERSION_DESC
    assert printed["brokerActive"] == "true"
    assert int(printed["msgPutTotalTodayNow"]) >= sum(MESSAGES_BY_QUEUE.values())
    assert int(printed["commitLogMaxOffset"]) > 0
    assert int(printed["topicNumber"]) >= 1
    assert re.fullmatch(r"\[ \d+ days, \d+ hours, \d+ minutes, \d+ seconds \]",
                        printed["runtime"]), printed["runtime"]
