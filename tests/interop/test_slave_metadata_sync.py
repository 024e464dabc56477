"""Slave metadata sync against real Apache RocketMQ brokers (each release; remoting §10,
reliability.md M11; spec README "Version differences" rows 4-5).

- A Java slave follows a pyrmq master: a classic-mode Java broker (brokerRole=SLAVE,
  brokerId=1, the master's brokerName) registered with the same Java name server learns the
  pyrmq master's address from it and pulls topic configs (from the master's fast remoting port,
  listenPort - 2), subscription groups and consumer offsets. The pyrmq master pages at 3
  (`splitMetadataSize=3`): a 5.5.0 slave gets them in pages, a 5.3.3 slave asks for everything.
  Checked in the Java slave's own config files. The classic HA data channel does not work
  against pyrmq (its HA server speaks AutoSwitch HA only): the Java slave's HA client fails to
  connect, which is expected and does not concern the metadata sync.
- A pyrmq slave follows a Java master (classic ASYNC_MASTER; 5.5.0 pages at 2 with
  `splitMetadataSize=2`, 5.3.3 answers in one page): topics and groups made with mqadmin and
  offsets committed by pyrmq's client reach the pyrmq slave's config files. Its HA address
  points at a closed port: pyrmq's AutoSwitch HA client cannot follow a classic Java master, and
  only the metadata sync is under test here.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from broker.client import BrokerClient
from remoting.fastjson import parse_fastjson
from tests.interop.harness import JavaEnv, JavaServer
from tests.interop.network import free_broker_port, free_port
from tests.interop.pyrmq_env import PyrmqEnv, wait_until

pytestmark = pytest.mark.interop

SYNC_TIMEOUT_S = 60.0  # a Java slave syncs 3 s after its start, then every ~10 s
GROUP = "MetaSyncGroup"
OFFSETS = {0: 17, 2: 5}


def _split(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def _config_file(store: Path, name: str) -> Mapping[str, object]:
    """A broker's `config/<name>` as parsed JSON ({} while it does not exist)."""
    path = store / "config" / name
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    if not text.strip():
        return {}
    value = parse_fastjson(text)
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


def test_java_slave_follows_pyrmq_master_metadata(
        java_env: JavaEnv, java_namesrv: JavaServer, tmp_path: Path,
        rocketmq_version: str) -> None:
    topics = [f"PyrmqMetaSync{index}" for index in range(7)]
    with PyrmqEnv(tmp_path / "pyrmq") as env:
        master = env.start_broker(java_namesrv, listen_port=free_broker_port(),
                                  extra_conf={"splitMetadataSize": 3})
        for topic in topics:
            java_env.mqadmin(java_namesrv, "updateTopic", "-b", master.addr, "-t", topic,
                             "-r", "4", "-w", "4")
        asyncio.run(_commit(master.addr, topics[0], heartbeat=True))
        slave = java_env.start_java_broker(
            java_namesrv, name="java-slave",
            extra_conf={"brokerId": 1, "brokerRole": "SLAVE", "brokerIP2": "127.0.0.1"},
        )
        store = slave.store_dir
        assert store is not None
        master_topics = set(_master_topics(master.addr))
        assert set(topics) <= master_topics

        def synced() -> bool:
            return master_topics <= set(_table(store, "topics.json", "topicConfigTable")) \
                and GROUP in _table(store, "subscriptionGroup.json", "subscriptionGroupTable") \
                and _offsets(store, topics[0]) == OFFSETS

        try:
            wait_until(synced, timeout_s=SYNC_TIMEOUT_S,
                       what=f"Java {rocketmq_version} slave has the pyrmq master's metadata")
        except Exception as err:
            raise AssertionError(f"{err}\n{slave.process.diagnostics()}\n"
                                 f"{master.diagnostics()}") from err
        # The Java slave asked for pages (5.5.0) or for the whole table (5.3.3): its log says.
        log_text = _java_log(slave)
        if rocketmq_version == "5.3.3":
            assert "getAllTopicConfig from seq" not in log_text
        else:
            seqs = {int(seq) for seq in re.findall(r"getAllTopicConfig from seq (\d+)",
                                                   log_text)}
            assert {0, 3} <= seqs, log_text[-2000:]
        master.terminate()


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
        java_namesrv, extra_conf={"brokerIP2": "127.0.0.1", "splitMetadataSize": 2})
    java_env.mqadmin(java_namesrv, "updateTopic", "-b", master.addr, "-t", topic,
                     "-r", "4", "-w", "4")
    java_env.mqadmin(java_namesrv, "updateSubGroup", "-b", master.addr, "-g", GROUP)
    asyncio.run(_commit(master.addr, topic, heartbeat=False))
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
            assert pages[0] >= len(master_topics) // 2  # pages of 2
        assert "slave sync from master" not in slave.log()  # no failed round
        assert slave.terminate() == 0
