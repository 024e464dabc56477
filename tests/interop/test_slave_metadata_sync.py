"""Slave metadata sync against real Apache RocketMQ brokers (each release; docs/remoting-protocol.md
§10, docs/reliability.md M11; spec README "Version differences" rows 4-5).

- Java slaves follow a pyrmq master: classic-mode Java brokers of each release at once
  (brokerRole=SLAVE, brokerId 1 and 2, the master's brokerName) registered with the same Java
  name server learn the pyrmq master's address from it and pull topic configs (from the
  master's fast remoting port, listenPort - 2), subscription groups and consumer offsets. The
  pyrmq master pages at 3 (`splitMetadataSize=3`): the 5.5.0 slave gets them in pages, the
  5.3.3 slave asks for everything. The topic count leaves one topic for a last page, which a
  5.5.0 slave would not ask for (it stops at `seq >= total - 1`) had the master not put it in
  the page before. Checked in each Java slave's own config files. The classic HA data channel
  does not work against pyrmq (whose HA server speaks AutoSwitch HA only): the Java slaves' HA
  clients fail to connect, which is expected and does not concern the metadata sync. A
  classic Java slave syncs first a minute after it starts, so this test takes about 80 s.
- A pyrmq slave follows a Java master (classic ASYNC_MASTER; 5.5.0 pages at 2 with
  `splitMetadataSize=2`, 5.3.3 answers in one page): a topic, a group (made by a heartbeat)
  and offsets, all made by pyrmq's client, reach the pyrmq slave's config files. Its HA address
  points at a closed port: pyrmq's AutoSwitch HA client cannot follow a classic Java master, and
  only the metadata sync is under test here.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pyrmq_client import BrokerClient
from remoting.errors import BodyDecodeError
from remoting.fastjson import parse_fastjson
from tests.interop.build import NEWEST, ROCKETMQ_VERSIONS
from tests.interop.harness import JavaEnv, JavaServer
from tests.interop.network import free_broker_port, free_port
from tests.interop.pyrmq_env import PyrmqEnv, wait_until

pytestmark = pytest.mark.interop

# A classic-mode Java slave first syncs when 60 s have passed since its BrokerController was
# built (then every 60 s); a controller-mode one every 10 s.
SYNC_TIMEOUT_S = 120.0
GROUP = "MetaSyncGroup"
OFFSETS = {0: 17, 2: 5}
PYRMQ_PAGE = 3  # the pyrmq master's splitMetadataSize
JAVA_PAGE = 2  # the Java master's splitMetadataSize (5.5.0; 5.3.3 does not page)


def _split(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def _config_file(store: Path, name: str) -> Mapping[str, object]:
    """A broker's `config/<name>` as parsed JSON ({} while it does not exist or is being written).

    A Java broker rewrites its config files in place (`MixAll.string2File`: the old text to
    `<name>.bak`, then the new text over the file), so a read can catch half a file; its own
    loader then falls back to the `.bak`. Here a torn read counts as "not synced yet" and the
    caller's wait reads again: a file that never parses still fails the wait at its deadline.
    """
    path = store / "config" / name
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return {}
    if not text.strip():
        return {}
    try:
        value = parse_fastjson(text)  # decodes UTF-8: a torn character is one more torn read
    except BodyDecodeError:
        return {}
    assert isinstance(value, dict)
    return value


def _table(store: Path, name: str, key: str) -> Mapping[str, object]:
    table = _config_file(store, name).get(key) or {}
    assert isinstance(table, dict)
    return table


def _offsets(store: Path, topic: str) -> dict[int, int]:
    queues = _table(store, "consumerOffset.json", "offsetTable").get(f"{topic}@{GROUP}") or {}
    assert isinstance(queues, dict)
    return {int(queue): int(offset) for queue, offset in queues.items()}


async def _commit(addr: str, topic: str, *, heartbeat: bool) -> None:
    async with await BrokerClient.connect(*_split(addr)) as client:
        if heartbeat:
            await client.heartbeat(consumer_groups={GROUP: {topic: "*"}})
        for queue_id, offset in OFFSETS.items():
            await client.update_consumer_offset(GROUP, topic, queue_id, offset)


def test_java_slaves_follow_pyrmq_master_metadata(tmp_path: Path) -> None:
    """One pyrmq master, one Java slave of each release (brokerId 1, 2, ...) started at once:
    a classic-mode Java slave first syncs a minute after it was built, so one shared wait
    serves every release."""
    with contextlib.ExitStack() as stack:
        # A JVM dies with the thread that started it (PR_SET_PDEATHSIG): the pool's threads
        # must outlive the JVMs, so the pool is shut down last.
        pool = stack.enter_context(ThreadPoolExecutor(len(ROCKETMQ_VERSIONS)))
        envs = {version: stack.enter_context(JavaEnv.of_version(version, tmp_path / version))
                for version in ROCKETMQ_VERSIONS}
        namesrv = envs[NEWEST].start_java_namesrv()
        env = stack.enter_context(PyrmqEnv(tmp_path / "pyrmq"))
        master = env.start_broker(namesrv, listen_port=free_broker_port(),
                                  extra_conf={"splitMetadataSize": PYRMQ_PAGE})
        topics = ["PyrmqMetaSync0"]
        asyncio.run(_create_topics(master.addr, topics))
        asyncio.run(_commit(master.addr, topics[0], heartbeat=True))  # also makes %RETRY%G
        # As many topics as make the last page hold one (total % 3 == 1), where a 5.5.0 slave
        # stops one short unless the master folds that one into the page before.
        existing = len(_master_topics(master.addr))
        count = 6 + (1 - existing - 6) % PYRMQ_PAGE
        more = [f"PyrmqMetaSync{index}" for index in range(1, count + 1)]
        asyncio.run(_create_topics(master.addr, more))
        master_topics = set(_master_topics(master.addr))
        assert len(master_topics) % PYRMQ_PAGE == 1

        def start_slave(broker_id: int, version: str) -> JavaServer:
            return envs[version].start_java_broker(
                namesrv, name=f"java-slave-{version}",
                extra_conf={"brokerId": broker_id, "brokerRole": "SLAVE",
                            "brokerIP2": "127.0.0.1"},
            )

        slaves = dict(zip(ROCKETMQ_VERSIONS, pool.map(
            start_slave, range(1, len(envs) + 1), ROCKETMQ_VERSIONS), strict=True))

        def synced(slave: JavaServer) -> bool:
            store = slave.store_dir
            assert store is not None
            return master_topics <= set(_table(store, "topics.json", "topicConfigTable")) \
                and GROUP in _table(store, "subscriptionGroup.json", "subscriptionGroupTable") \
                and _offsets(store, topics[0]) == OFFSETS

        for version, slave in slaves.items():
            try:
                wait_until(lambda slave=slave: synced(slave), timeout_s=SYNC_TIMEOUT_S,  # type: ignore[misc]
                           what=f"Java {version} slave has the pyrmq master's metadata")
            except Exception as err:
                raise AssertionError(f"{err}\n{slave.process.diagnostics()}\n"
                                     f"{master.diagnostics()}") from err
            # A 5.5.0 slave asked for pages, a 5.3.3 one for the whole table: their logs say.
            log_text = _java_log(slave)
            seqs = {int(seq) for seq in re.findall(r"getAllTopicConfig from seq (\d+)",
                                                   log_text)}
            if version == "5.3.3":
                assert not seqs
            else:
                assert {0, PYRMQ_PAGE} <= seqs, log_text[-2000:]
        assert master.terminate() == 0


async def _create_topics(addr: str, topics: list[str]) -> None:
    async with await BrokerClient.connect(*_split(addr)) as client:
        for topic in topics:
            await client.create_topic(topic, read_queue_nums=4, write_queue_nums=4)


def _java_log(server: JavaServer) -> str:
    """Every log file of the Java broker (java.log and RocketMQ's own under its work dir)."""
    root = server.process.work_dir
    return "\n".join(path.read_text(errors="replace") for path in root.rglob("*.log"))


def _master_topics(addr: str) -> list[str]:
    async def get() -> list[str]:
        async with await BrokerClient.connect(*_split(addr)) as client:
            return list((await client.topic_configs()).topic_config_table)

    return asyncio.run(get())


def test_pyrmq_slave_follows_java_master_metadata(
        java_env: JavaEnv, java_namesrv: JavaServer, tmp_path: Path,
        rocketmq_version: str) -> None:
    topic = "JavaMetaSyncTopic"
    master = java_env.start_java_broker(
        java_namesrv, extra_conf={"brokerIP2": "127.0.0.1", "splitMetadataSize": JAVA_PAGE})
    asyncio.run(_create_topics(master.addr, [topic]))
    asyncio.run(_commit(master.addr, topic, heartbeat=True))  # the heartbeat creates the group
    master_topics = set(_master_topics(master.addr))
    with PyrmqEnv(tmp_path / "pyrmq") as env:
        slave = env.start_broker(None, name="pyrmq-slave", extra_conf={
            "enableControllerMode": True, "brokerId": 2, "pyrmqHaRole": "slave",
            "pyrmqHaMasterAddress": f"127.0.0.1:{free_port()}",
            "pyrmqHaMasterRemotingAddress": master.addr,
            "pyrmqSlaveSyncIntervalMs": 500,
        })
        store = slave.store_dir
        assert store is not None

        def synced() -> bool:
            return master_topics <= set(_table(store, "topics.json", "topicConfigTable")) \
                and GROUP in _table(store, "subscriptionGroup.json", "subscriptionGroupTable") \
                and _offsets(store, topic) == OFFSETS

        wait_until(synced, timeout_s=SYNC_TIMEOUT_S,
                   what=f"pyrmq slave has the Java {rocketmq_version} master's metadata",
                   process=slave)
        pages = [int(n) for n in re.findall(r"topic configs from master topics=\d+ pages=(\d+)",
                                            slave.log())]
        assert pages, slave.log()[-2000:]
        if rocketmq_version == "5.3.3":
            assert pages[0] == 1  # no totalTopicNum: one response
        else:
            assert pages[0] >= len(master_topics) // JAVA_PAGE
        assert "slave sync from master" not in slave.log()  # no failed round
        assert slave.terminate() == 0
