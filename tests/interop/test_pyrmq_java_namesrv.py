"""pyrmq's broker with the real Apache RocketMQ name server (each release): the broker registers
with it, the Java clients find the broker's routes there and produce and consume through pyrmq, and
a SIGTERM unregisters the broker (exit 0, gone from the name server's cluster info).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from remoting.bodies import ClusterInfo
from tests.interop.consume_checks import assert_exactly_once
from tests.interop.harness import Classpath, JavaEnv, JavaServer, namesrv_cluster_info
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess, wait_until
from tests.interop.routes import wait_for_route

pytestmark = pytest.mark.interop

TOPIC = "PyrmqInteropJavaNamesrv"
COUNT = 20
BODY_BYTES = 256
CLIENT_QUEUE_NUMS = 4
UNREGISTER_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class MixedCluster:
    """The real Java name server with one pyrmq broker registered."""

    java: JavaEnv
    namesrv: JavaServer
    pyrmq: PyrmqEnv
    broker: PyrmqProcess


@pytest.fixture(scope="module")
def mixed_cluster(
    interop_classpath: Classpath, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MixedCluster]:
    base = tmp_path_factory.mktemp("java-namesrv")
    with JavaEnv(interop_classpath, base / "java") as java, PyrmqEnv(base / "pyrmq") as pyrmq:
        namesrv = java.start_java_namesrv()
        broker = pyrmq.start_broker(namesrv, broker_name="broker-py")
        yield MixedCluster(java, namesrv, pyrmq, broker)


def test_pyrmq_broker_is_in_the_java_name_servers_cluster_info(
    mixed_cluster: MixedCluster,
) -> None:
    info = ClusterInfo.decode(namesrv_cluster_info(mixed_cluster.namesrv.addr).encode())
    assert {c: tuple(b) for c, b in info.cluster_addr_table.items()} == {
        "DefaultCluster": ("broker-py",)
    }
    broker_data = info.broker_addr_table["broker-py"]
    assert (broker_data.cluster, dict(broker_data.broker_addrs)) == (
        "DefaultCluster",
        {0: mixed_cluster.broker.addr},
    )


def test_java_clients_route_through_the_java_name_server_to_pyrmq(
    mixed_cluster: MixedCluster,
) -> None:
    java, namesrv = mixed_cluster.java, mixed_cluster.namesrv
    produced = [
        java.produce(namesrv, TOPIC, COUNT, mode, "TagA", body_bytes=BODY_BYTES)
        for mode in ("sync", "batch")
    ]
    sends = [sent for result in produced for sent in result.sent]
    route = wait_for_route(namesrv.addr, TOPIC)
    assert [b.broker_name for b in route.broker_datas] == ["broker-py"]
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [
        ("broker-py", CLIENT_QUEUE_NUMS, CLIENT_QUEUE_NUMS)
    ]
    assert dict(route.broker_datas[0].broker_addrs) == {0: mixed_cluster.broker.addr}

    pushed = java.push_consume(namesrv, "pyrmq_interop_jns_push", TOPIC, "TagA", 2 * COUNT,
                               fail_every=COUNT, linger_ms=1000)
    assert_exactly_once(pushed, sends, tag="TagA", body_bytes=BODY_BYTES)
    assert {r.key for r in pushed.received if r.reconsume_times >= 1} == {
        r.key for r in pushed.rejected
    }
    pulled = java.lite_pull(namesrv, "pyrmq_interop_jns_lite", TOPIC, "TagA", 2 * COUNT,
                            linger_ms=1000)
    assert_exactly_once(pulled, sends, tag="TagA", body_bytes=BODY_BYTES)


def test_sigterm_unregisters_the_broker_from_the_java_name_server(
    mixed_cluster: MixedCluster,
) -> None:
    broker = mixed_cluster.broker
    assert broker.terminate() == 0, broker.diagnostics()
    assert "broker stopped cleanly" in broker.log(), broker.diagnostics()
    # UNREGISTER_BROKER was answered before the process exited; no expiry wait is involved.
    wait_until(
        lambda: f'"{broker.addr}"' not in namesrv_cluster_info(mixed_cluster.namesrv.addr),
        timeout_s=UNREGISTER_TIMEOUT_S,
        what="the Java name server dropped the pyrmq broker",
    )
