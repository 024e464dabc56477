"""Broker metrics under RocketMQ 5's names (`BrokerMetricsConstant`, `RemotingMetricsConstant`).

One `CollectorRegistry` per broker node (several nodes may share a test process). Names, labels
and histogram buckets are Java's:
- `rocketmq_messages_in_total`, `rocketmq_throughput_in_total` (bytes), `rocketmq_message_size`
  (bytes; buckets 1 KiB .. 4 MiB): successful sends, labels topic, message_type, is_system;
  retry and DLQ topics are not counted, as in Java;
- `rocketmq_messages_out_total`, `rocketmq_throughput_out_total`: messages served by pulls,
  labels topic, consumer_group, is_system;
- `rocketmq_rpc_latency` (ms; buckets 1, 3, 5, 7, 10, 100, 1000, 2000, 3000): every request, labels
  protocol_type, request_code and response_code (lower-case Java names), is_long_polling, result;
- `rocketmq_send_to_dlq_messages_total`; gauges `rocketmq_topic_number`,
  `rocketmq_consumer_group_number`, `rocketmq_producer_connections`,
  `rocketmq_consumer_connections`;
- pyrmq's own (no Java twin): `pyrmq_event_loop_lag_seconds`, the event loop's scheduling
  delay as `broker/loop_monitor.py` samples it (every 5 ms by default), and
  `pyrmq_event_loop_stalls_total` (label cause: gc, busy, not_scheduled, blocked, unknown);
  `pyrmq_store_dispatch_skipped`: records since start (recovery included) whose consume-queue
  unit was refused, kept in the commitlog but never served (store/dispatch.py);
- in controller mode, pyrmq's own `pyrmq_ha_*` series (see `_HACollector`).
Every series also carries Java's node labels: cluster, node_type="broker", node_id=<brokerName>.
Counting is cheap (no per-message logging, STYLE §6); rendering happens only when scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ha.service import HAStatus
from remoting.codes import RequestCode, ResponseCode

MESSAGE_SIZE_BUCKETS: Final = (1024, 4 * 1024, 512 * 1024, 1024**2, 2 * 1024**2, 4 * 1024**2)
RPC_LATENCY_BUCKETS_MS: Final = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
LOOP_LAG_BUCKETS_S: Final = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0,
                             2.5)
NODE_LABELS: Final = ("cluster", "node_type", "node_id")
NODE_TYPE_BROKER: Final = "broker"
PROTOCOL_TYPE_REMOTING: Final = "remoting"
RESULT_SUCCESS: Final = "success"
RESULT_ONEWAY: Final = "oneway"
RESULT_PROCESS_REQUEST_FAILED: Final = "process_request_failed"


def request_code_desc(code: int) -> str:
    """`RemotingHelper.getRequestCodeDesc`: the lower-case Java name, or the number."""
    try:
        return RequestCode(code).name.lower()
    except ValueError:
        return str(code)


def response_code_desc(code: int) -> str:
    """`RemotingHelper.getResponseCodeDesc`: the lower-case Java name, or the number."""
    try:
        return ResponseCode(code).name.lower()
    except ValueError:
        return str(code)


class _HACollector(Collector):
    """`pyrmq_ha_*`: the master's confirmOffset, SyncStateSet size, epoch and waiting sends;
    per connected slave its acked offset, lag in bytes and seconds, in-sync flag and bytes
    shipped (a counter: rate() gives bytes/s)."""

    def __init__(self, status: Callable[[], HAStatus], node: tuple[str, ...]) -> None:
        self._status = status
        self._node = list(node)

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        for name, help_text, value in (
            ("pyrmq_ha_confirm_offset", "confirmOffset", status.confirm_offset),
            ("pyrmq_ha_max_phy_offset", "commitlog max offset", status.max_phy_offset),
            ("pyrmq_ha_master_epoch", "master epoch (-1: none)", status.master_epoch),
            ("pyrmq_ha_sync_state_set_size", "SyncStateSet members (union while pending)",
             len(status.sync_state_set)),
            ("pyrmq_ha_waiting_sends", "sends waiting for replica acks", status.waiting_sends),
        ):
            family = GaugeMetricFamily(name, help_text, labels=list(NODE_LABELS))
            family.add_metric(self._node, float(value))
            yield family
        per_slave = [*NODE_LABELS, "slave_broker_id", "slave_address"]
        ack = GaugeMetricFamily("pyrmq_ha_slave_ack_offset", "slave acked offset",
                                labels=per_slave)
        lag = GaugeMetricFamily("pyrmq_ha_slave_lag_bytes", "bytes the slave lacks",
                                labels=per_slave)
        lag_s = GaugeMetricFamily("pyrmq_ha_slave_lag_seconds",
                                  "seconds since the slave was last caught up", labels=per_slave)
        in_sync = GaugeMetricFamily("pyrmq_ha_slave_in_sync", "1 if in the SyncStateSet",
                                    labels=per_slave)
        shipped = CounterMetricFamily("pyrmq_ha_slave_transfer_bytes",
                                      "commitlog bytes shipped on this connection",
                                      labels=per_slave)
        for slave in status.slaves:
            labels = [*self._node, str(slave.broker_id), slave.address]
            ack.add_metric(labels, float(slave.ack_offset))
            lag.add_metric(labels, float(slave.lag_bytes))
            lag_s.add_metric(labels, slave.lag_s)
            in_sync.add_metric(labels, 1.0 if slave.in_sync else 0.0)
            shipped.add_metric(labels, float(slave.transferred_bytes))
        yield from (ack, lag, lag_s, in_sync, shipped)


def is_retry_or_dlq_topic(topic: str) -> bool:
    return topic.startswith(("%RETRY%", "%DLQ%"))


class BrokerMetrics:
    """The metric families of one broker node, in their own registry."""

    def __init__(self, *, cluster: str, node_id: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Totals since start, every topic included (GET_BROKER_RUNTIME_INFO's msgPut/GetTotal).
        self.put_message_count = 0
        self.get_message_count = 0
        self._node = (cluster, NODE_TYPE_BROKER, node_id)
        # Labelled children, looked up once per label set rather than once per request.
        self._in_children: dict[tuple[str, str, bool], tuple[Counter, Counter, Histogram]] = {}
        self._out_children: dict[tuple[str, str, bool], tuple[Counter, Counter]] = {}
        self._rpc_children: dict[tuple[int, int | None, bool, str], Histogram] = {}
        registry = self.registry
        self.messages_in_total = Counter(
            "rocketmq_messages_in_total", "Messages stored by sends",
            [*NODE_LABELS, "topic", "message_type", "is_system"], registry=registry,
        )
        self.throughput_in_total = Counter(
            "rocketmq_throughput_in_total", "Bytes stored by sends",
            [*NODE_LABELS, "topic", "message_type", "is_system"], registry=registry,
        )
        self.message_size = Histogram(
            "rocketmq_message_size", "Stored message size in bytes",
            [*NODE_LABELS, "topic", "message_type", "is_system"],
            buckets=MESSAGE_SIZE_BUCKETS, registry=registry,
        )
        self.messages_out_total = Counter(
            "rocketmq_messages_out_total", "Messages served to pulls",
            [*NODE_LABELS, "topic", "consumer_group", "is_system"], registry=registry,
        )
        self.throughput_out_total = Counter(
            "rocketmq_throughput_out_total", "Bytes served to pulls",
            [*NODE_LABELS, "topic", "consumer_group", "is_system"], registry=registry,
        )
        self.send_to_dlq_messages_total = Counter(
            "rocketmq_send_to_dlq_messages_total", "Messages sent to a dead-letter queue",
            [*NODE_LABELS, "topic", "consumer_group", "is_system"], registry=registry,
        )
        self.rpc_latency = Histogram(
            "rocketmq_rpc_latency", "Request latency in milliseconds",
            [*NODE_LABELS, "protocol_type", "request_code", "response_code", "is_long_polling",
             "result"],
            buckets=RPC_LATENCY_BUCKETS_MS, registry=registry,
        )
        self.event_loop_lag = Histogram(
            "pyrmq_event_loop_lag_seconds", "How late the event loop ran a due timer",
            list(NODE_LABELS), buckets=LOOP_LAG_BUCKETS_S, registry=registry,
        )
        self.event_loop_stalls_total = Counter(
            "pyrmq_event_loop_stalls_total", "Event loop stalls over the threshold, by cause",
            [*NODE_LABELS, "cause"], registry=registry,
        )
        self._loop_lag_child = self.event_loop_lag.labels(*self._node)
        self._gauges: dict[str, Gauge] = {
            name: Gauge(name, help_text, list(NODE_LABELS), registry=registry)
            for name, help_text in (
                ("rocketmq_topic_number", "Topics on this broker"),
                ("rocketmq_consumer_group_number", "Subscription groups on this broker"),
                ("rocketmq_producer_connections", "Producer connections"),
                ("rocketmq_consumer_connections", "Consumer connections"),
                ("pyrmq_store_dispatch_skipped",
                 "Records since start whose consume-queue unit was refused (never served)"),
            )
        }

    def bind_ha(self, status: Callable[[], HAStatus]) -> None:
        """Export the HA service's figures (pyrmq names; Java's broker has no such series)."""
        self.registry.register(_HACollector(status, self._node))

    def bind_gauge(self, name: str, value: Callable[[], float]) -> None:
        """Make gauge `name` read `value()` at each scrape."""
        self._gauges[name].labels(*self._node).set_function(value)

    def message_in(self, topic: str, *, count: int, stored_bytes: int, message_type: str,
                   is_system: bool) -> None:
        self.put_message_count += count
        if is_retry_or_dlq_topic(topic):
            return
        key = (topic, message_type, is_system)
        children = self._in_children.get(key)
        if children is None:
            labels = (*self._node, topic, message_type, _bool(is_system))
            children = self._in_children[key] = (
                self.messages_in_total.labels(*labels), self.throughput_in_total.labels(*labels),
                self.message_size.labels(*labels),
            )
        children[0].inc(count)
        children[1].inc(stored_bytes)
        children[2].observe(stored_bytes / max(count, 1))

    def message_out(self, topic: str, group: str, *, count: int, bytes_out: int,
                    is_system: bool) -> None:
        self.get_message_count += count
        if is_retry_or_dlq_topic(topic):
            return
        key = (topic, group, is_system)
        children = self._out_children.get(key)
        if children is None:
            labels = (*self._node, topic, group, _bool(is_system))
            children = self._out_children[key] = (
                self.messages_out_total.labels(*labels), self.throughput_out_total.labels(*labels),
            )
        children[0].inc(count)
        children[1].inc(bytes_out)

    def send_to_dlq(self, topic: str, group: str, *, is_system: bool) -> None:
        self.send_to_dlq_messages_total.labels(*self._node, topic, group, _bool(is_system)).inc()

    def rpc(self, request_code: int, response_code: int | None, elapsed_ms: float, *,
            long_polling: bool = False, result: str = RESULT_SUCCESS) -> None:
        key = (request_code, response_code, long_polling, result)
        child = self._rpc_children.get(key)
        if child is None:
            child = self._rpc_children[key] = self.rpc_latency.labels(
                *self._node, PROTOCOL_TYPE_REMOTING, request_code_desc(request_code),
                "" if response_code is None else response_code_desc(response_code),
                _bool(long_polling), result,
            )
        child.observe(elapsed_ms)

    def loop_lag(self, seconds: float) -> None:
        self._loop_lag_child.observe(seconds)

    def loop_stall(self, cause: str) -> None:
        self.event_loop_stalls_total.labels(*self._node, cause).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of every family."""
        return generate_latest(self.registry)


def _bool(value: bool) -> str:
    return "true" if value else "false"
