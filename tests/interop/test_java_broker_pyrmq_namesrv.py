"""The real Apache RocketMQ broker (each release) with pyrmq's name server: the Java broker
registers with it, the Java clients find the broker's routes there and produce and consume
through the Java broker, and mqadmin reads the cluster from it. The mirror image of
test_pyrmq_java_namesrv.py (issue 13: the name server's claims are shown both ways).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from remoting.bodies import ClusterInfo
from tests.interop.consume_checks import assert_exactly_once
from tests.interop.harness import Classpath, JavaEnv, JavaServer, namesrv_cluster_info
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess
from tests.interop.routes import wait_for_route

pytestmark = pytest.mark.interop

TOPIC = "PyrmqInteropJavaBroker"
COUNT = 20
BODY_BYTES = 256


@dataclass(frozen=True, slots=True)
class MixedCluster:
    """pyrmq's name server with one Java broker registered."""

    java: JavaEnv
    broker: JavaServer
    pyrmq: PyrmqEnv
    namesrv: PyrmqProcess


@pytest.fixture(scope="module")
def mixed_cluster(
    interop_classpath: Classpath, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MixedCluster]:
    base = tmp_path_factory.mktemp("pyrmq-namesrv")
    with JavaEnv(interop_classpath, base / "java") as java, PyrmqEnv(base / "pyrmq") as pyrmq:
        namesrv = pyrmq.start_namesrv()
        # start_java_broker returns once pyrmq's name server lists the broker's address.
        broker = java.start_java_broker(namesrv.addr, broker_name="broker-java")
        yield MixedCluster(java, broker, pyrmq, namesrv)


def test_the_java_broker_is_in_pyrmqs_cluster_info(mixed_cluster: MixedCluster) -> None:
    info = ClusterInfo.decode(namesrv_cluster_info(mixed_cluster.namesrv.addr).encode())
    assert {c: tuple(b) for c, b in info.cluster_addr_table.items()} == {
        "DefaultCluster": ("broker-java",)
    }
    broker_data = info.broker_addr_table["broker-java"]
    assert (broker_data.cluster, dict(broker_data.broker_addrs)) == (
        "DefaultCluster", {0: mixed_cluster.broker.addr})


def test_java_clients_route_through_pyrmqs_name_server_to_the_java_broker(
    mixed_cluster: MixedCluster,
) -> None:
    java, namesrv = mixed_cluster.java, mixed_cluster.namesrv.addr
    produced = [
        java.produce(namesrv, TOPIC, COUNT, mode, "TagA", body_bytes=BODY_BYTES)
        for mode in ("sync", "batch")
    ]
    sends = [sent for result in produced for sent in result.sent]
    route = wait_for_route(namesrv, TOPIC)
    assert [b.broker_name for b in route.broker_datas] == ["broker-java"]
    assert dict(route.broker_datas[0].broker_addrs) == {0: mixed_cluster.broker.addr}
    pushed = java.push_consume(namesrv, "pyrmq_interop_jb_push", TOPIC, "TagA", 2 * COUNT,
                               linger_ms=1000)
    assert_exactly_once(pushed, sends, tag="TagA", body_bytes=BODY_BYTES)
    pulled = java.lite_pull(namesrv, "pyrmq_interop_jb_lite", TOPIC, "TagA", 2 * COUNT,
                            linger_ms=1000)
    assert_exactly_once(pulled, sends, tag="TagA", body_bytes=BODY_BYTES)


def test_mqadmin_reads_the_java_broker_from_pyrmqs_name_server(
    mixed_cluster: MixedCluster,
) -> None:
    done = mixed_cluster.java.mqadmin(mixed_cluster.namesrv.addr, "clusterList")
    assert "broker-java" in done.stdout
    assert mixed_cluster.broker.addr in done.stdout
