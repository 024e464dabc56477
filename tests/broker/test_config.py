"""`broker.conf` -> `BrokerConfig`: stock files load, unknown keys warn, bad values fail."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from broker.config import (
    KEYS,
    BrokerConfig,
    BrokerRole,
    MetricsExporterType,
    config_items,
    load_broker_config,
)
from broker.errors import BrokerConfigError
from broker.node import BrokerNode
from store.config import FlushDiskType, StoreConfig

# distribution/conf/broker.conf of RocketMQ 5.x, license header included.
QUICK_START_BROKER_CONF = """\
# Licensed to the Apache Software Foundation (ASF) under one or more
# contributor license agreements.  See the NOTICE file distributed with
# this work for additional information regarding copyright ownership.
#
#  Unless required by applicable law or agreed to in writing, software
#  distributed under the License is distributed on an "AS IS" BASIS,

brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = ASYNC_FLUSH
"""

# distribution/conf/controller/quick-start/broker-n0.conf plus the other controller-mode keys of
# the spec (docs/replicas-manager.md §2, docs/ha-protocol.md §13).
CONTROLLER_BROKER_CONF = """\
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = -1
brokerRole = SLAVE
deleteWhen = 04
fileReservedTime = 48
enableControllerMode = true
controllerAddr = 127.0.0.1:9878
namesrvAddr = 127.0.0.1:9876
allAckInSyncStateSet=true
listenPort=30911
storePathRootDir=/tmp/rmqstore/node00
storePathCommitLog=/tmp/rmqstore/node00/commitlog
fetchControllerAddrByDnsLookup=false
syncControllerMetadataPeriod=10000
syncBrokerMetadataPeriod=5000
checkSyncStateSetPeriod=5000
brokerHeartbeatInterval=1000
sendHeartbeatTimeoutMillis=1000
controllerHeartBeatTimeoutMills=10000
brokerElectionPriority=2147483647
registerNameServerPeriod=30000
registerBrokerTimeoutMills=24000
haSendHeartbeatInterval=5000
haHousekeepingInterval=20000
haTransferBatchSize=32768
haMaxTimeSlaveNotCatchup=15000
syncFromLastFile=false
asyncLearner=false
inSyncReplicas=1
minInSyncReplicas=1
enableAutoInSyncReplicas=false
slaveTimeout=3000
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.conf"
    path.write_text(text)
    return path


def test_stock_quick_start_broker_conf_loads_without_warnings(tmp_path: Path) -> None:
    loaded = load_broker_config(write(tmp_path, QUICK_START_BROKER_CONF))
    config = loaded.config
    assert loaded.warnings == ()
    assert config.broker_cluster_name == "DefaultCluster"
    assert config.broker_name == "broker-a"
    assert config.broker_id == 0
    assert config.broker_role is BrokerRole.ASYNC_MASTER
    store = config.store
    assert (store.file_reserved_time_h, store.delete_when) == (48, "04")
    assert store.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert not store.enable_controller_mode


def test_controller_mode_keys_load_without_warnings(tmp_path: Path) -> None:
    loaded = load_broker_config(write(tmp_path, CONTROLLER_BROKER_CONF))
    config = loaded.config
    assert loaded.warnings == ()
    assert config.store.enable_controller_mode
    assert config.controller_addr == "127.0.0.1:9878"
    assert config.namesrv_addr_list == ("127.0.0.1:9876",)
    assert config.broker_id == -1
    assert config.broker_role is BrokerRole.SLAVE
    assert config.listen_port == 30911
    assert config.ha_listen_port == 30912  # listenPort + 1, as BrokerStartup sets it
    assert config.store.store_path_root_dir == Path("/tmp/rmqstore/node00")
    assert config.all_ack_in_sync_state_set
    assert config.broker_election_priority == 2**31 - 1
    assert config.controller_heart_beat_timeout_ms == 10_000
    assert config.ha_transfer_batch_size == 32768


def test_defaults_are_javas_where_pyrmq_does_not_say_otherwise() -> None:
    config = BrokerConfig(broker_name="b", broker_ip1="10.0.0.1")
    assert (config.listen_port, config.ha_listen_port) == (10911, 10912)
    assert config.broker_ip2 == "10.0.0.1"
    assert config.default_topic_queue_nums == 8
    assert config.register_name_server_period_effective_ms == 30_000
    assert config.metrics_exporter_type is MetricsExporterType.PROM
    assert config.metrics_prom_exporter_port == 5557
    assert config.channel_expired_timeout_ms == 120_000
    assert config.server_socket_backlog == 1024  # NettyServerConfig.serverSocketBacklog


def test_server_socket_backlog_reaches_the_remoting_server(tmp_path: Path) -> None:
    config = load_broker_config(write(tmp_path, "serverSocketBacklog=4096\n")).config
    assert config.server_socket_backlog == 4096
    assert BrokerNode(config)._server_limits.backlog == 4096  # (the server's listen backlog)
    with pytest.raises(BrokerConfigError, match="serverSocketBacklog"):
        load_broker_config(write(tmp_path, "serverSocketBacklog=0\n"))


def test_unknown_key_is_a_warning_naming_the_line(tmp_path: Path) -> None:
    text = "brokerName=broker-a\nbrokerNmae=typo\nsendMessageThreadPoolNums=16\n"
    loaded = load_broker_config(write(tmp_path, text))
    assert loaded.warnings == (f"{tmp_path / 'broker.conf'}:2: unknown key brokerNmae ignored",)
    assert loaded.config.broker_name == "broker-a"


def test_repeated_key_warns_and_the_last_wins(tmp_path: Path) -> None:
    loaded = load_broker_config(write(tmp_path, "brokerId=0\nlistenPort=1\nlistenPort=2\n"))
    assert loaded.config.listen_port == 2
    assert len(loaded.warnings) == 1
    assert "key listenPort repeats line 2" in loaded.warnings[0]


@pytest.mark.parametrize(
    ("line", "key", "reason"),
    [
        pytest.param("listenPort=10911x", "listenPort", "is not an int32", id="int"),
        pytest.param("listenPort=70000", "listenPort", "is not a port", id="port-range"),
        pytest.param("brokerId=zero", "brokerId", "is not an int64", id="long"),
        pytest.param("autoCreateTopicEnable=yes", "autoCreateTopicEnable", "is not a boolean",
                     id="bool"),
        pytest.param("flushDiskType=FAST", "flushDiskType", "is not one of ASYNC_FLUSH",
                     id="enum"),
        pytest.param("brokerRole=master", "brokerRole", "is not one of", id="enum-case"),
        pytest.param("diskMaxUsedSpaceRatio=101", "diskMaxUsedSpaceRatio",
                     "is not a percentage", id="ratio"),
        pytest.param("flushIntervalCommitLog=-5", "flushIntervalCommitLog",
                     "must not be negative", id="negative"),
    ],
)
def test_bad_value_is_an_error_naming_key_value_and_line(
    tmp_path: Path, line: str, key: str, reason: str
) -> None:
    path = write(tmp_path, f"brokerName=broker-a\n# comment\n{line}\n")
    with pytest.raises(BrokerConfigError) as caught:
        load_broker_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:3: {key}=")
    assert reason in message
    assert (caught.value.line, caught.value.key) == (3, key)


def test_store_size_that_the_store_refuses_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "brokerId=0\nmappedFileSizeCommitLog=1000\n")
    with pytest.raises(BrokerConfigError, match=r":2: mappedFileSizeCommitLog: .*=1000 must"):
        load_broker_config(path)


@pytest.mark.parametrize(
    "key", ["storePathCommitLog", "storePathConsumeQueue", "storePathEpochFile",
            "storePathBrokerIdentity"],
)
def test_store_file_outside_the_root_is_refused(tmp_path: Path, key: str) -> None:
    text = f"storePathRootDir=/data/store\n{key}=/other/place\n"
    with pytest.raises(BrokerConfigError, match=rf":2: {key}='/other/place': pyrmq keeps"):
        load_broker_config(write(tmp_path, text))


def test_store_paths_where_pyrmq_keeps_them_are_accepted(tmp_path: Path) -> None:
    text = ("storePathRootDir=/data/store\nstorePathCommitLog=/data/store/commitlog\n"
            "storePathEpochFile=/data/store/epochFileCheckpoint\nduplicationEnable=false\n")
    assert load_broker_config(write(tmp_path, text)).warnings == ()


def test_features_pyrmq_lacks_are_refused_when_on(tmp_path: Path) -> None:
    with pytest.raises(BrokerConfigError, match=r":1: enableDLegerCommitLog=true is not"):
        load_broker_config(write(tmp_path, "enableDLegerCommitLog=true\n"))


def test_command_line_namesrv_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "namesrvAddr=10.0.0.1:9876\n")
    loaded = load_broker_config(path, overrides={"namesrvAddr": "a:1; b:2 ;"})
    assert loaded.config.namesrv_addr_list == ("a:1", "b:2")


def test_tilde_expands_in_store_path(tmp_path: Path) -> None:
    loaded = load_broker_config(write(tmp_path, "storePathRootDir=~/rmq\n"))
    assert loaded.config.store.store_path_root_dir == Path.home() / "rmq"


def test_unreadable_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BrokerConfigError, match="cannot read"):
        load_broker_config(tmp_path / "missing.conf")


def test_config_items_print_every_key_once_and_important_ones_for_m(tmp_path: Path) -> None:
    config = load_broker_config(write(tmp_path, QUICK_START_BROKER_CONF)).config
    items = dict(config_items(config))
    assert set(items) == set(KEYS)
    assert items["brokerRole"] == "ASYNC_MASTER"
    assert items["autoCreateTopicEnable"] == "true"
    important = dict(config_items(config, important_only=True))
    assert important["brokerName"] == "broker-a"
    assert "haTransferBatchSize" not in important


# Every MessageStoreConfig key the store reads: the text in broker.conf and the typed value that
# must reach `config.store` (each differs from the default, so a dropped key shows).
STORE_KEY_VALUES: list[tuple[str, str, object]] = [
    ("storePathRootDir", "/data/rmq", Path("/data/rmq")),
    ("mappedFileSizeCommitLog", "8192", 8192),
    ("mappedFileSizeConsumeQueue", "2000", 2000),
    ("maxMessageSize", "65536", 65536),
    ("flushDiskType", "SYNC_FLUSH", FlushDiskType.SYNC_FLUSH),
    ("flushIntervalCommitLog", "250", 250),
    ("messageDelayLevel", "1s 2m 3h", "1s 2m 3h"),
    ("flushCommitLogLeastPages", "8", 8),
    ("flushIntervalConsumeQueue", "2000", 2000),
    ("syncFlushTimeout", "7000", 7000),
    ("fileReservedTime", "48", 48),
    ("deleteWhen", "01;04", "01;04"),
    ("diskMaxUsedSpaceRatio", "80", 80),
    ("diskSpaceWarningLevelRatio", "95", 95),
    ("cleanResourceInterval", "20000", 20000),
    ("enabledAppendPropCRC", "false", False),
    ("checkCRCOnRecover", "false", False),
    ("forceVerifyPropCRC", "false", False),
    ("enableControllerMode", "true", True),
    ("readUnCommitted", "true", True),
]


def test_the_store_key_table_covers_every_store_key() -> None:
    table = [key for key, _, _ in STORE_KEY_VALUES]
    assert sorted(table) == sorted(k for k, spec in KEYS.items() if spec.store)


def test_broker_config_declares_no_store_field_again() -> None:
    broker_fields = {f.name for f in dataclasses.fields(BrokerConfig)}
    assert broker_fields.isdisjoint(f.name for f in dataclasses.fields(StoreConfig))


@pytest.mark.parametrize(("key", "text", "expected"),
                         [pytest.param(*row, id=row[0]) for row in STORE_KEY_VALUES])
def test_store_key_reaches_the_store_with_its_type(
    tmp_path: Path, key: str, text: str, expected: object
) -> None:
    config = load_broker_config(write(tmp_path, f"{key}={text}\n")).config
    field_name = KEYS[key].field_name
    value = getattr(config.store, field_name)
    assert value == expected
    assert type(value) is type(expected)
    annotation = typing.get_type_hints(StoreConfig)[field_name]
    assert isinstance(value, annotation)
    default = next(f for f in dataclasses.fields(StoreConfig) if f.name == field_name).default
    assert value != default
