"""Slave metadata sync (broker/slave_synchronize.py; docs/reliability.md M11,
docs/remoting-protocol.md §10).

Pure cores with tables and hypothesis (the 5.5.0 paging loop, the master's page bounds against
both pyrmq's loop and Java 5.5.0's, the offsets merge); the master's processors (paging, the
total headers, forbiddenTable, bad paging fields); a pyrmq master and a pyrmq slave as two
in-process nodes over loopback TCP (topics, groups and offsets reach the slave, also paged, and
survive its restart); a hostile master (bad bodies, error codes, pages that do not add up, a
frame over the limit): typed errors, nothing applied.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given

from broker.config import BrokerConfig
from broker.config_file import dump_pretty
from broker.errors import BrokerConfigError
from broker.node import BrokerNode
from broker.slave_synchronize import (
    MetadataSyncError,
    Page,
    PageCursor,
    PageStep,
    SlaveSynchronize,
    fetch_all_pages,
    merge_consumer_offsets,
    next_page_step,
    page_bounds,
)
from remoting.bodies import DataVersion
from remoting.client import ClientLimits, RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.server import RemotingServer, ServerLimits
from tests.broker.support import broker_config, connected, running_broker, wait_until
from tests.interop.network import free_port

V1 = DataVersion(timestamp=1, counter=1)
V2 = DataVersion(timestamp=2, counter=2)
SYNC_TIMEOUT_S = 20.0

# -- pure: the paging loop ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cursor", "received", "version", "total", "step", "seq"),
    [
        # a 5.3.3 master: no total, the one response is the table
        (PageCursor(), 7, V1, None, PageStep.DONE, 7),
        (PageCursor(), 0, V1, None, PageStep.DONE, 0),
        # everything in one page
        (PageCursor(), 5, V1, 5, PageStep.DONE, 5),
        (PageCursor(), 0, V1, 0, PageStep.DONE, 0),
        # more to come
        (PageCursor(), 2, V1, 5, PageStep.NEXT, 2),
        (PageCursor(seq=2, version=V1, pages=1, gathered=2), 2, V1, 5, PageStep.NEXT, 4),
        # Java 5.5.0 stops here (4 >= 5 - 1); pyrmq asks for the last one
        (PageCursor(seq=4, version=V1, pages=2, gathered=4), 1, V1, 5, PageStep.DONE, 5),
        # the master's table changed between pages: start again from 0
        (PageCursor(seq=2, version=V1, pages=1, gathered=2), 2, V2, 5, PageStep.RESTART, 0),
    ],
)
def test_next_page_step(cursor: PageCursor, received: int, version: DataVersion,
                        total: int | None, step: PageStep, seq: int) -> None:
    got, after = next_page_step(cursor, received=received, page_version=version, total=total)
    assert (got, after.seq) == (step, seq)
    assert after.pages == cursor.pages + 1


@pytest.mark.parametrize(
    ("cursor", "received", "total", "match"),
    [
        (PageCursor(seq=2, version=V1, pages=1), 0, 5, "empty page at seq=2 of total=5"),
        (PageCursor(), 1, -1, "negative"),
        (PageCursor(seq=1, version=V1, pages=10_000), 1, 5, "more than 10000 pages"),
    ],
)
def test_next_page_step_refuses_pages_that_do_not_add_up(
        cursor: PageCursor, received: int, total: int, match: str) -> None:
    with pytest.raises(MetadataSyncError, match=match):
        next_page_step(cursor, received=received, page_version=V1, total=total)


def test_restarts_are_bounded() -> None:
    cursor = PageCursor(seq=1, version=V1, pages=1, restarts=10)
    with pytest.raises(MetadataSyncError, match="changed 11 times"):
        next_page_step(cursor, received=1, page_version=V2, total=5)


@pytest.mark.parametrize(
    ("total", "seq", "same", "size", "bounds"),
    [
        (0, 0, False, 2, (0, 0)),
        (5, 0, False, 2, (0, 2)),
        (5, 2, True, 2, (2, 5)),  # would leave one: taken too
        (6, 2, True, 2, (2, 4)),
        (5, 4, False, 2, (0, 2)),  # another version: from 0
        (5, 9, True, 2, (5, 5)),
        (3, 0, False, 2000, (0, 3)),
    ],
)
def test_page_bounds(total: int, seq: int, same: bool, size: int,
                     bounds: tuple[int, int]) -> None:
    assert page_bounds(total, seq=seq, same_version=same, page_size=size) == bounds


def _master_pages(names: list[str], page_size: int, *, extend: bool
                  ) -> Callable[[int, DataVersion | None], Awaitable[Page[int]]]:
    """A paging master over `names` (pyrmq's page_bounds, or Java's exact slices)."""

    async def fetch(seq: int, version: DataVersion | None) -> Page[int]:
        same = version == V1
        if extend:
            begin, end = page_bounds(len(names), seq=seq, same_version=same,
                                     page_size=page_size)
        else:
            begin = seq if same else 0
            end = min(begin + page_size, len(names))
        return Page(dict.fromkeys(names[begin:end], 1), V1, len(names))

    return fetch


def _java_slave_loop(names: list[str], page_size: int) -> set[str]:
    """Java 5.5.0's `getAllTopicConfig` loop against pyrmq's pages (stops at total - 1)."""
    gathered: set[str] = set()
    seq, version = 0, None
    while True:
        begin, end = page_bounds(len(names), seq=seq, same_version=version == V1,
                                 page_size=page_size)
        page = names[begin:end]
        gathered.update(page)
        seq += len(page)
        version = V1
        if seq >= len(names) - 1:
            return gathered


@given(st.integers(0, 60), st.integers(1, 9), st.booleans())
def test_the_loop_gathers_every_entry(total: int, page_size: int, extend: bool) -> None:
    names = sorted(f"T{i:03d}" for i in range(total))
    table, version, pages = asyncio.run(
        fetch_all_pages(_master_pages(names, page_size, extend=extend)))
    assert pages >= max(1, -(-total // (page_size + 1)))
    assert sorted(table) == names
    assert version == V1


@given(st.integers(0, 60), st.integers(1, 9))
def test_a_java_slave_gathers_every_entry_from_pyrmq_pages(total: int, page_size: int) -> None:
    names = sorted(f"T{i:03d}" for i in range(total))
    assert _java_slave_loop(names, page_size) == set(names)


async def test_the_loop_starts_again_when_the_table_changes() -> None:
    asked: list[tuple[int, DataVersion | None]] = []

    async def fetch(seq: int, version: DataVersion | None) -> Page[int]:
        asked.append((seq, version))
        if len(asked) == 1:
            return Page({"A": 1, "B": 1}, V1, 4)
        current = V2
        begin = seq if version == current else 0
        names = ["A", "B", "C", "D"][begin:begin + 2]
        return Page(dict.fromkeys(names, 2), current, 4)

    table, version, pages = await fetch_all_pages(fetch)
    assert (table, version, pages) == ({"A": 2, "B": 2, "C": 2, "D": 2}, V2, 4)
    assert asked == [(0, None), (2, V1), (0, V2), (2, V2)]


async def test_the_loop_refuses_pages_with_fewer_distinct_entries_than_the_total() -> None:
    async def fetch(seq: int, version: DataVersion | None) -> Page[int]:
        return Page({"A": 1, "B": 1}, V1, 4)  # the same two names on every page

    with pytest.raises(MetadataSyncError, match="2 distinct entries of total=4"):
        await fetch_all_pages(fetch)


@pytest.mark.parametrize(
    ("local", "master", "merged"),
    [
        ({}, {}, None),
        ({"t@g": {0: 5}}, {"t@g": {0: 5}}, None),
        ({"t@g": {0: 5}}, {"t@g": {0: 7}}, {"t@g": {0: 7}}),
        # the master's queue map replaces the slave's for that key (Java's putAll)
        ({"t@g": {0: 5, 1: 3}}, {"t@g": {0: 7}}, {"t@g": {0: 7}}),
        # keys only the slave has stay
        ({"x@g": {0: 1}}, {"t@g": {0: 7}}, {"x@g": {0: 1}, "t@g": {0: 7}}),
    ],
)
def test_merge_consumer_offsets(local: dict[str, dict[int, int]],
                                master: dict[str, dict[int, int]],
                                merged: dict[str, dict[int, int]] | None) -> None:
    assert merge_consumer_offsets(local, master) == merged


offset_tables = st.dictionaries(
    st.sampled_from(["a@g", "b@g", "c@h"]),
    st.dictionaries(st.integers(0, 3), st.integers(0, 100), max_size=3), max_size=3)


@given(offset_tables, offset_tables)
def test_merge_keeps_the_slaves_keys_and_takes_the_masters(
        local: dict[str, dict[int, int]], master: dict[str, dict[int, int]]) -> None:
    merged = merge_consumer_offsets(local, master)
    result = local if merged is None else merged
    assert {key: result[key] for key in master} == master
    assert {key: result[key] for key in local if key not in master} == \
        {key: queues for key, queues in local.items() if key not in master}
    assert (merged is None) == all(local.get(key) == queues for key, queues in master.items())


# -- the master's processors -------------------------------------------------------------------


async def _invoke(node: BrokerNode, code: int, fields: dict[str, str] | None = None,
                  *, port: int | None = None) -> RemotingCommand:
    host, main_port = node.address
    async with await RemotingClient.connect(host, port or main_port) as client:
        return await client.invoke(RemotingCommand.request(code, fields or {}), 5_000)


async def test_master_pages_topics_and_groups_by_name(tmp_path: Path) -> None:
    config = broker_config(tmp_path, split_metadata_size=3)
    async with running_broker(config) as node, connected(node) as client:
        for index in range(5):
            await client.create_topic(f"Paged{index}")
        await client.heartbeat(consumer_groups={f"G{i}": {"Paged0": "*"} for i in range(4)})
        topics = node.topic_configs
        groups = node.subscription_groups
        assert topics is not None
        assert groups is not None
        # 5.3.3 slaves send no field: everything, with the total
        whole = await _invoke(node, RequestCode.GET_ALL_TOPIC_CONFIG)
        assert whole.code == ResponseCode.SUCCESS
        assert whole.ext_fields == {"totalTopicNum": str(len(topics))}
        assert len(json.loads(whole.body)["topicConfigTable"]) == len(topics)
        # 5.5.0 slaves page
        names = sorted(t.topic_name for t in topics)
        version = json.dumps(topics.data_version.to_json_value())
        first = await _invoke(node, RequestCode.GET_ALL_TOPIC_CONFIG,
                              {"topicSeq": "0", "dataVersion": "", "maxTopicNum": "2000"})
        assert sorted(json.loads(first.body)["topicConfigTable"]) == names[:3]
        second = await _invoke(node, RequestCode.GET_ALL_TOPIC_CONFIG,
                               {"topicSeq": "3", "dataVersion": version, "maxTopicNum": "2"})
        assert sorted(json.loads(second.body)["topicConfigTable"]) == names[3:5]
        stale = await _invoke(node, RequestCode.GET_ALL_TOPIC_CONFIG,
                              {"topicSeq": "3", "dataVersion": '{"counter":0}',
                               "maxTopicNum": "2"})
        assert sorted(json.loads(stale.body)["topicConfigTable"]) == names[:2]
        page = await _invoke(node, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                             {"groupSeq": "0", "dataVersion": "", "maxGroupNum": "2"})
        body = json.loads(page.body)
        assert page.ext_fields == {"totalGroupNum": str(len(groups))}
        assert sorted(body) == ["dataVersion", "forbiddenTable", "subscriptionGroupTable"]
        assert sorted(body["subscriptionGroupTable"]) == sorted(groups.table)[:2]
        assert body["forbiddenTable"] == {}


@pytest.mark.parametrize(
    ("code", "fields", "remark"),
    [
        (RequestCode.GET_ALL_TOPIC_CONFIG, {"topicSeq": "-1"}, "topicSeq='-1' is negative"),
        (RequestCode.GET_ALL_TOPIC_CONFIG, {"topicSeq": "0", "maxTopicNum": "0"},
         "maxTopicNum='0' is below 1"),
        (RequestCode.GET_ALL_TOPIC_CONFIG, {"topicSeq": "0", "dataVersion": "{nope"},
         "dataVersion='{nope' is not DataVersion JSON"),
        (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {"groupSeq": "-5"},
         "groupSeq='-5' is negative"),
        (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {"groupSeq": "0", "maxGroupNum": "-1"},
         "maxGroupNum='-1' is below 1"),
    ],
)
async def test_master_refuses_bad_paging_fields(tmp_path: Path, code: int,
                                                fields: dict[str, str], remark: str) -> None:
    async with running_broker(broker_config(tmp_path)) as node:
        response = await _invoke(node, code, fields)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert remark in (response.remark or "")
        # the connection and the broker go on
        assert (await _invoke(node, code)).code == ResponseCode.SUCCESS


async def test_master_serves_delay_offsets_request_modes_and_the_vip_port(
        tmp_path: Path) -> None:
    from tests.interop.network import free_broker_port

    config = broker_config(tmp_path, listen_port=free_broker_port())
    async with running_broker(config) as node:
        delay = await _invoke(node, RequestCode.GET_ALL_DELAY_OFFSET)
        assert delay.code == ResponseCode.SUCCESS
        assert delay.body.startswith(b'{"dataVersion":{')
        assert b'"offsetTable":{1:' in delay.body
        modes = await _invoke(node, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE)
        assert (modes.code, modes.body) == (ResponseCode.SUCCESS, b'{"messageRequestModeMap":{}}')
        vip = await _invoke(node, RequestCode.GET_ALL_TOPIC_CONFIG, port=config.listen_port - 2)
        assert vip.code == ResponseCode.SUCCESS
        assert b"TBW102" in vip.body


# -- a pyrmq master and a pyrmq slave -------------------------------------------------------


def _master_config(root: Path, **overrides: object) -> BrokerConfig:
    return dataclasses.replace(
        broker_config(root, enable_controller_mode=True, broker_id=1, pyrmq_ha_role="master",
                      pyrmq_ha_replica_ids="2"), **overrides)  # type: ignore[arg-type]


def _slave_config(root: Path, master: BrokerNode, **overrides: object) -> BrokerConfig:
    assert master.ha is not None
    return dataclasses.replace(broker_config(
        root, enable_controller_mode=True, broker_id=2, pyrmq_ha_role="slave",
        pyrmq_ha_master_address=f"127.0.0.1:{master.ha.ha_port}",
        pyrmq_ha_master_remoting_address=master.broker_addr,
        pyrmq_slave_sync_interval_ms=100,
    ), **overrides)  # type: ignore[arg-type]


def _slave_has(slave: BrokerNode, *, topic: str, group: str, offsets: dict[int, int]) -> bool:
    topics, groups, committed = slave.topic_configs, slave.subscription_groups, \
        slave.consumer_offsets
    assert topics is not None
    assert groups is not None
    assert committed is not None
    return topic in topics and group in groups and \
        dict(committed.offset_table.get(f"{topic}@{group}", {})) == offsets


@pytest.mark.parametrize("split_metadata_size", [2_000, 2], ids=["one-page", "paged"])
async def test_topics_groups_and_offsets_reach_the_slave_and_survive_its_restart(
        tmp_path: Path, split_metadata_size: int) -> None:
    topic, group = "SyncedTopic", "SyncedGroup"
    offsets = {0: 11, 3: 4}
    master_config = _master_config(tmp_path / "master", split_metadata_size=split_metadata_size)
    async with running_broker(master_config) as master:
        schedule = master.schedule_message_service
        assert schedule is not None
        schedule.offset_table[3] = 7  # level 3's queue is empty: its task leaves this alone
        async with connected(master) as client:
            await client.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
            await client.heartbeat(consumer_groups={group: {topic: "*"}})
            for queue_id, offset in offsets.items():
                await client.update_consumer_offset(group, topic, queue_id, offset)
        slave_config = _slave_config(tmp_path / "slave", master)
        async with running_broker(slave_config) as slave:
            await wait_until(lambda: _slave_has(slave, topic=topic, group=group,
                                                offsets=offsets),
                             timeout_s=SYNC_TIMEOUT_S, what="the slave has the master's tables")
            sync = slave.slave_synchronize
            assert sync is not None
            assert sync.counters.failures == 0, sync.counters
            master_topics, slave_topics = master.topic_configs, slave.topic_configs
            assert master_topics is not None
            assert slave_topics is not None
            assert {t.topic_name: t for t in slave_topics} == \
                {t.topic_name: t for t in master_topics}
            assert slave_topics.data_version == master_topics.data_version
            slave_schedule = slave.schedule_message_service
            assert slave_schedule is not None
            await wait_until(lambda: slave_schedule.offset_table.get(3) == 7,
                             timeout_s=SYNC_TIMEOUT_S, what="delay offsets reach the slave")
            delay_file = tmp_path / "slave" / "config" / "delayOffset.json"
            await wait_until(lambda: delay_file.exists() and "3:7" in delay_file.read_text(),
                             timeout_s=SYNC_TIMEOUT_S, what="the slave wrote delayOffset.json")
            # a later change on the master arrives too
            async with connected(master) as client:
                await client.create_topic("LaterTopic")
                await client.update_consumer_offset(group, topic, 0, 12)
            await wait_until(lambda: _slave_has(slave, topic="LaterTopic", group=group,
                                                offsets={}) and
                             _slave_has(slave, topic=topic, group=group,
                                        offsets={0: 12, 3: 4}),
                             timeout_s=SYNC_TIMEOUT_S, what="later changes reach the slave")
    # the slave restarts alone (no master, no role yet: its controller is not up): everything
    # was persisted
    restarted = dataclasses.replace(slave_config, pyrmq_ha_role="",
                                    controller_addr=f"127.0.0.1:{free_port()}")
    async with running_broker(restarted) as slave:
        assert _slave_has(slave, topic=topic, group=group, offsets={0: 12, 3: 4})
        assert _slave_has(slave, topic="LaterTopic", group=group, offsets={})


async def test_the_slave_derives_the_masters_remoting_address_from_its_ha_address(
        tmp_path: Path) -> None:
    from tests.interop.network import free_broker_port

    port = free_broker_port()
    master_config = _master_config(tmp_path / "master", listen_port=port)
    assert master_config.ha_listen_port == port + 1  # Java's default layout
    async with running_broker(master_config) as master:
        slave_config = _slave_config(tmp_path / "slave", master,
                                     pyrmq_ha_master_remoting_address="")
        async with running_broker(slave_config) as slave:
            sync = slave.slave_synchronize
            assert sync is not None
            assert sync.master_addr == master.broker_addr == f"127.0.0.1:{port}"
            await wait_until(lambda: sync.counters.rounds > 0 and sync.counters.failures == 0
                             and sync.counters.topics_applied > 0,
                             timeout_s=SYNC_TIMEOUT_S, what="a successful round")
        bad = dataclasses.replace(slave_config, pyrmq_ha_master_remoting_address="nohost")
        with pytest.raises(BrokerConfigError, match="'nohost' is not ip:port"):
            async with running_broker(bad):
                pass


# -- a hostile master -------------------------------------------------------------------------


class FakeMaster:
    """A remoting server that answers each code with what the test sets."""

    def __init__(self) -> None:
        self.answers: dict[int, Callable[[RemotingCommand], RemotingCommand]] = {}
        self.server = RemotingServer(self.handle, limits=ServerLimits(close_timeout_ms=500),
                                     name="fake-master")

    async def handle(self, connection: RemotingConnection,
                     request: RemotingCommand) -> RemotingCommand:
        answer = self.answers.get(request.code)
        if answer is None:
            return request.make_response(ResponseCode.SUCCESS, body=b"{}")
        return answer(request)

    @property
    def address(self) -> str:
        host, port = self.server.address
        return f"{host}:{port}"


@asynccontextmanager
async def fake_master() -> AsyncIterator[FakeMaster]:
    fake = FakeMaster()
    await fake.server.start("127.0.0.1", 0)
    try:
        yield fake
    finally:
        await fake.server.close()


def _body(body: bytes, fields: dict[str, str] | None = None
          ) -> Callable[[RemotingCommand], RemotingCommand]:
    return lambda request: request.make_response(ResponseCode.SUCCESS, body=body,
                                                 ext_fields=fields or {})


OVERSIZED = b'{"topicConfigTable":{},"x":"' + b"a" * (64 * 1024) + b'"}'


@pytest.mark.parametrize(
    ("code", "answer", "error"),
    [
        (RequestCode.GET_ALL_TOPIC_CONFIG, _body(b"{not json"), "body does not decode"),
        (RequestCode.GET_ALL_TOPIC_CONFIG, _body(b'{"topicConfigTable":{"T":{"perm":"x"}}}'),
         "body does not decode"),
        (RequestCode.GET_ALL_TOPIC_CONFIG,
         lambda r: r.make_response(ResponseCode.SYSTEM_ERROR, remark="no"),
         "code=1 remark='no'"),
        (RequestCode.GET_ALL_TOPIC_CONFIG, _body(b'{"topicConfigTable":{}}',
                                                 {"totalTopicNum": "3"}),
         "empty page at seq=0 of total=3"),
        # an unparsable total is no total (Java's leniency): one page, here an empty one
        (RequestCode.GET_ALL_TOPIC_CONFIG, _body(b'{"topicConfigTable":{}}',
                                                 {"totalTopicNum": "many"}),
         "the master lists no topic"),
        (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, _body(b'{"subscriptionGroupTable":{}}'),
         "the master lists no group"),
        (RequestCode.GET_ALL_TOPIC_CONFIG, _body(OVERSIZED), "RemotingConnectionClosedError"),
        (RequestCode.GET_ALL_CONSUMER_OFFSET, _body(b'{"offsetTable":{"t@g":{"q":1}}}'),
         "key 'q' is not an int"),
        (RequestCode.GET_ALL_CONSUMER_OFFSET, _body(b'{"offsetTable":[]}'), "not an object"),
        (RequestCode.GET_ALL_DELAY_OFFSET, _body(b'{"offsetTable":{1:"x"}}'),
         "is not an offset"),
        (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
         _body(b'{"subscriptionGroupTable":{"G":{"groupName":7}}}'), "groupName=7"),
    ],
    ids=["not-json", "bad-topic", "error-code", "pages-short", "bad-total", "no-group",
         "oversized",
         "bad-queue", "offsets-not-object", "bad-delay", "bad-group"],
)
async def test_a_bad_master_answer_is_a_typed_error_and_changes_nothing(
        tmp_path: Path, code: int, answer: Callable[[RemotingCommand], RemotingCommand],
        error: str) -> None:
    small = ClientLimits(frame_bytes_max=16 * 1024)

    async def connect(host: str, port: int) -> RemotingClient:
        return await RemotingClient.connect(host, port, limits=small)

    async with fake_master() as fake, running_broker(broker_config(tmp_path)) as node:
        topics, groups, offsets = node.topic_configs, node.subscription_groups, \
            node.consumer_offsets
        assert topics is not None
        assert groups is not None
        assert offsets is not None
        before = (list(topics), dict(groups.table), dict(offsets.offset_table))
        sync = SlaveSynchronize(topics=topics, groups=groups, offsets=offsets,
                                delay_offsets=node.schedule_message_service,
                                own_addr=lambda: node.broker_addr, connect=connect)
        # by default the fake serves the node's own tables (same versions: nothing to apply)
        fake.answers[RequestCode.GET_ALL_TOPIC_CONFIG] = _body(
            topics.serialize_wrapper().encode())
        fake.answers[RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG] = _body(
            dump_pretty(groups.encode(), pretty=False).encode())
        fake.answers[code] = answer
        sync.set_master(fake.address)
        assert not await sync.sync_once()
        assert error in sync.counters.last_error
        assert (list(topics), dict(groups.table), dict(offsets.offset_table)) == before


async def test_a_round_applies_nothing_once_the_node_stopped_following(
        tmp_path: Path) -> None:
    """set_master(None) while a round waits for the master: that round applies nothing."""
    async with fake_master() as fake, running_broker(broker_config(tmp_path)) as node:
        topics, groups, offsets = node.topic_configs, node.subscription_groups, \
            node.consumer_offsets
        assert topics is not None
        assert groups is not None
        assert offsets is not None
        sync = SlaveSynchronize(topics=topics, groups=groups, offsets=offsets,
                                delay_offsets=None, own_addr=lambda: node.broker_addr)
        before = list(topics)

        def promoted_meanwhile(request: RemotingCommand) -> RemotingCommand:
            sync.set_master(None)  # e.g. the ReplicasManager made this node master
            return request.make_response(
                ResponseCode.SUCCESS,
                body=b'{"topicConfigTable":{"Other":{"topicName":"Other"}}}')

        fake.answers[RequestCode.GET_ALL_TOPIC_CONFIG] = promoted_meanwhile
        sync.set_master(fake.address)
        assert not await sync.sync_once()
        assert "the master changed" in sync.counters.last_error
        assert list(topics) == before


def test_set_master_refuses_an_address_that_is_not_ip_port() -> None:
    sync = SlaveSynchronize(topics=None, groups=None, offsets=None,  # type: ignore[arg-type]
                            delay_offsets=None, own_addr=lambda: "")
    for bad in ("nohost", "h:", ":1", "h:99999", "h:x"):
        with pytest.raises(ValueError, match="is not ip:port"):
            sync.set_master(bad)
    assert sync.master_addr is None
