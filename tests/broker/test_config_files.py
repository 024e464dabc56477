"""`config/*.json`: Java's shapes read and written, `.bak` fallback, atomic persistence."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from broker.config_file import ConfigFile, IntKeyMap, PrettyValue, dump_pretty
from broker.consumer_offsets import ConsumerOffsetManager
from broker.errors import ConfigFileError
from broker.subscription_groups import SubscriptionGroupManager, validate_group
from broker.topic_config import TopicConfigManager, derive_auto_created_topic, validate_topic
from remoting.bodies import TopicConfig, TopicFilterType
from remoting.fastjson import parse_fastjson
from store.atomic_file import bak_path_of
from tests.broker.support import broker_config

WALL_MS = 1_700_000_000_000

# A consumerOffset.json as a Java 5.x broker writes it (fastjson PrettyFormat, integer keys
# unquoted, groupTopicMap and lmqOffsetTable present).
JAVA_CONSUMER_OFFSET_JSON = """{
\t"dataVersion":{
\t\t"counter":1448,
\t\t"stateVersion":0,
\t\t"timestamp":1736661762584
\t},
\t"groupTopicMap":{
\t\t"CG":["TopicTest"]
\t},
\t"lmqOffsetTable":{},
\t"offsetTable":{
\t\t"TopicTest@CG":{0:37960,1:37961,2:37959,3:37959},
\t\t"%RETRY%CG@CG":{0:0}
\t}
}"""

JAVA_SUBSCRIPTION_GROUP_JSON = """{"dataVersion":{"counter":2,"stateVersion":0,
"timestamp":1700000000000},"forbiddenTable":{},"subscriptionGroupTable":{"CG":{"attributes":{},
"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":false,"consumeFromMinEnable":true,
"consumeMessageOrderly":false,"consumeTimeoutMinute":15,"groupName":"CG",
"groupRetryPolicy":{"type":"CUSTOMIZED"},"groupSysFlag":0,"notifyConsumerIdsChangedEnable":true,
"retryMaxTimes":3,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}}}"""


def wall_ms() -> int:
    return WALL_MS


def test_pretty_dump_is_fastjson_pretty_format() -> None:
    version: dict[str, PrettyValue] = {"counter": 1}
    offsets: dict[str, PrettyValue] = {"t@g": IntKeyMap({0: 5, 1: 7})}
    items: list[PrettyValue] = ["a", 1]
    value: dict[str, PrettyValue] = {
        "dataVersion": version, "offsetTable": offsets, "empty": {}, "list": items,
    }
    assert dump_pretty(value) == (
        '{\n\t"dataVersion":{\n\t\t"counter":1\n\t},\n\t"offsetTable":{\n\t\t"t@g":{0:5,1:7}\n'
        '\t},\n\t"empty":{},\n\t"list":["a",1]\n}'
    )
    assert dump_pretty(value, pretty=False) == (
        '{"dataVersion":{"counter":1},"offsetTable":{"t@g":{0:5,1:7}},"empty":{},'
        '"list":["a",1]}'
    )


async def test_consumer_offsets_read_javas_file_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text(JAVA_CONSUMER_OFFSET_JSON)
    offsets = ConsumerOffsetManager(ConfigFile(path), flush_interval_ms=5000, wall_ms=wall_ms)
    offsets.load()
    assert offsets.query_offset("CG", "TopicTest", 1) == 37961
    assert offsets.query_offset("CG", "%RETRY%CG", 0) == 0
    assert offsets.query_offset("CG", "TopicTest", 9) is None
    assert offsets.data_version.counter == 1448
    offsets.commit_offset("CG", "TopicTest", 1, 40000)
    offsets.commit_offset("OTHER", "TopicTest", 0, 3)
    await offsets.persist()
    written = path.read_text()
    assert '\t\t"TopicTest@CG":{0:37960,1:40000,2:37959,3:37959}' in written
    assert bak_path_of(path).read_text() == JAVA_CONSUMER_OFFSET_JSON
    parsed = parse_fastjson(written)
    assert isinstance(parsed, dict)
    assert parsed["groupTopicMap"] == {"CG": ["TopicTest", "%RETRY%CG"], "OTHER": ["TopicTest"]}
    assert parsed["dataVersion"] == {"counter": 1449, "stateVersion": 0, "timestamp": WALL_MS}
    again = ConsumerOffsetManager(ConfigFile(path), flush_interval_ms=5000, wall_ms=wall_ms)
    again.load()
    assert again.offset_table == offsets.offset_table


def test_a_damaged_file_falls_back_to_its_bak(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text('{"offsetTable":{"t@g":{0:')
    bak_path_of(path).write_text('{"offsetTable":{"t@g":{0:7}}}')
    offsets = ConsumerOffsetManager(ConfigFile(path), flush_interval_ms=5000, wall_ms=wall_ms)
    offsets.load()
    assert offsets.query_offset("g", "t", 0) == 7


def test_file_and_bak_both_damaged_refuse_to_start(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text("{not json")
    bak_path_of(path).write_text("")
    offsets = ConsumerOffsetManager(ConfigFile(path), flush_interval_ms=5000, wall_ms=wall_ms)
    with pytest.raises(ConfigFileError, match=r"consumerOffset\.json"):
        offsets.load()


def test_wrongly_typed_offsets_name_the_path(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text('{"offsetTable":{"t@g":{"x":1}}}')
    offsets = ConsumerOffsetManager(ConfigFile(path), flush_interval_ms=5000, wall_ms=wall_ms)
    with pytest.raises(ConfigFileError, match=r"offsetTable\['t@g'\] key 'x'"):
        offsets.load()


async def test_topics_json_has_javas_shape_and_reloads(tmp_path: Path) -> None:
    config = broker_config(tmp_path)
    path = tmp_path / "config" / "topics.json"
    topics = TopicConfigManager(config, ConfigFile(path), wall_ms=wall_ms)
    topics.load()
    assert {"TBW102", "SELF_TEST_TOPIC", "DefaultCluster", "broker-a", "OFFSET_MOVED_EVENT",
            "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"} <= {t.topic_name for t in topics}
    tbw = topics.select("TBW102")
    assert tbw is not None
    assert (tbw.perm, tbw.write_queue_nums) == (7, 8)
    created = await topics.create_in_send_message("TopicTest", "TBW102", client_queue_nums=4,
                                                  topic_sys_flag=0)
    assert created == TopicConfig("TopicTest", read_queue_nums=4, write_queue_nums=4, perm=6)
    assert topics.data_version.counter == 1
    parsed = json.loads(path.read_text())
    assert list(parsed) == ["dataVersion", "topicConfigTable"]
    assert parsed["topicConfigTable"]["TopicTest"] == {
        "attributes": {}, "order": False, "perm": 6, "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG", "topicName": "TopicTest", "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    reloaded = TopicConfigManager(config, ConfigFile(path), wall_ms=wall_ms)
    reloaded.load()
    assert reloaded.select("TopicTest") == created
    assert reloaded.data_version == topics.data_version


def test_auto_creation_needs_an_inheriting_template() -> None:
    template = TopicConfig("TBW102", read_queue_nums=8, write_queue_nums=8, perm=7,
                           topic_filter_type=TopicFilterType.MULTI_TAG)
    created = derive_auto_created_topic("T", template, client_queue_nums=16, topic_sys_flag=0)
    assert created == TopicConfig("T", read_queue_nums=8, write_queue_nums=8, perm=6,
                                  topic_filter_type=TopicFilterType.MULTI_TAG)
    no_inherit = TopicConfig("TBW102", perm=6)
    assert derive_auto_created_topic("T", no_inherit, client_queue_nums=4,
                                     topic_sys_flag=0) is None


@pytest.mark.parametrize(
    ("topic", "problem"),
    [
        pytest.param("TopicTest", None, id="ok"),
        pytest.param("%RETRY%CG", None, id="retry-ok"),
        pytest.param("", "blank", id="blank"),
        pytest.param("Topic Test", "illegal characters", id="space"),
        pytest.param("T" * 128, "longer than topic max length: 127", id="too-long"),
        pytest.param("%DLQ%" + "g" * 251, "DLQ or Retry topic", id="dlq-too-long"),
        pytest.param("%DLQ%" + "g" * 200, None, id="dlq-under-255"),
    ],
)
def test_topic_validation(topic: str, problem: str | None) -> None:
    result = validate_topic(topic)
    assert (result is None) if problem is None else (result is not None and problem in result)


def test_group_validation() -> None:
    assert validate_group("CG") is None
    assert validate_group("C G") is not None
    assert validate_group("g" * 121) is not None


async def test_subscription_groups_keep_what_java_wrote(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    path.write_text(JAVA_SUBSCRIPTION_GROUP_JSON)
    groups = SubscriptionGroupManager(ConfigFile(path), auto_create=True, wall_ms=wall_ms)
    groups.load()
    group = groups.get("CG")
    assert group is not None
    assert (group.consume_enable, group.retry_max_times) == (False, 3)
    assert group.group_retry_policy == {"type": "CUSTOMIZED"}
    assert "TOOLS_CONSUMER" in groups  # built-in groups are kept
    created = await groups.find_or_create("NEW_GROUP")
    assert created is not None
    assert created.retry_max_times == 16
    assert await groups.find_or_create("bad group") is None
    parsed = json.loads(path.read_text())
    assert list(parsed) == ["dataVersion", "forbiddenTable", "subscriptionGroupTable"]
    assert parsed["subscriptionGroupTable"]["CG"] == json.loads(
        JAVA_SUBSCRIPTION_GROUP_JSON.replace("\n", "")
    )["subscriptionGroupTable"]["CG"]


async def test_concurrent_persists_leave_the_last_state(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    offsets = ConsumerOffsetManager(ConfigFile(path), flush_interval_ms=5000, wall_ms=wall_ms)

    async def commit_and_persist(offset: int) -> None:
        offsets.commit_offset("g", "t", 0, offset)
        await offsets.persist()

    await asyncio.gather(*(commit_and_persist(n) for n in range(10)))
    again = ConsumerOffsetManager(ConfigFile(path), flush_interval_ms=5000, wall_ms=wall_ms)
    again.load()
    assert again.query_offset("g", "t", 0) == 9


async def test_a_persist_writes_its_snapshot_while_commits_go_on(tmp_path: Path) -> None:
    # The encoding and the write run in a worker thread (they grow with groups x queues);
    # commits made on the loop meanwhile change neither what that write holds nor the table's
    # consistency, and the next persist writes them.
    path = tmp_path / "consumerOffset.json"
    offsets = ConsumerOffsetManager(ConfigFile(path), flush_interval_ms=5000, wall_ms=wall_ms)
    for group in range(2000):
        for queue_id in range(8):
            offsets.commit_offset(f"g{group}", "t", queue_id, 1)
    encode = offsets.snapshot()
    for group in range(2000):
        offsets.commit_offset(f"g{group}", "t", 3, 2)  # after the snapshot
    written = encode()
    assert isinstance(written, dict)
    table = written["offsetTable"]
    assert isinstance(table, dict)
    assert len(table) == 2000
    assert all(isinstance(queues, IntKeyMap) and queues.entries == dict.fromkeys(range(8), 1)
               for queues in table.values())

    persist = asyncio.create_task(offsets.persist())
    offsets.commit_offset("late", "t", 0, 7)  # runs while the worker thread writes
    await persist
    await offsets.persist()
    again = ConsumerOffsetManager(ConfigFile(path), flush_interval_ms=5000, wall_ms=wall_ms)
    again.load()
    assert again.query_offset("g5", "t", 3) == 2
    assert again.query_offset("g5", "t", 4) == 1
    assert again.query_offset("late", "t", 0) == 7
