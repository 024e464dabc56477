"""pyrmq_client.routing (pure): a name server's route as queues and masters; queue selection."""

from __future__ import annotations

import pytest

from pyrmq_client.cluster import split_addrs
from pyrmq_client.routing import MessageQueue, QueueSelector, TopicRoute
from remoting.bodies import PERM_READ, PERM_WRITE, BrokerData, QueueData, TopicRouteData

RW = PERM_READ | PERM_WRITE

ROUTE = TopicRouteData(
    queue_datas=(QueueData("b", 2, 2, RW), QueueData("a", 3, 1, RW),
                 QueueData("c", 1, 1, PERM_READ), QueueData("d", 1, 1, RW)),
    broker_datas=(BrokerData("C", "a", {0: "h:1", 1: "h:2"}), BrokerData("C", "b", {0: "h:3"}),
                  BrokerData("C", "c", {0: "h:4"}), BrokerData("C", "d", {1: "h:5"})),
)


def test_route_lists_readable_and_writable_queues_and_masters() -> None:
    route = TopicRoute.of("T", ROUTE)
    assert [(q.broker_name, q.queue_id) for q in route.read_queues] == [
        ("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("c", 0), ("d", 0)]
    # c is read-only; d has no master (id 0), so nothing can be sent to it.
    assert [(q.broker_name, q.queue_id) for q in route.write_queues] == [
        ("a", 0), ("b", 0), ("b", 1)]
    assert route.master_addrs == {"a": "h:1", "b": "h:3", "c": "h:4"}
    assert route.master_addr("d") is None


@pytest.mark.parametrize(("avoid", "picks"), [
    ((), ["a", "b", "b", "a", "b"]),
    (("a",), ["b", "b", "b", "b", "b"]),
    (("a", "b"), ["a", "b", "b", "a", "b"]),  # nothing else to go to: plain round-robin
])
def test_selector_round_robin_avoiding_failed_brokers(avoid: tuple[str, ...],
                                                      picks: list[str]) -> None:
    route = TopicRoute.of("T", ROUTE)
    selector = QueueSelector()
    chosen = [selector.select(route, avoid) for _ in picks]
    assert [q.broker_name if q else None for q in chosen] == picks


def test_selector_without_writable_queue() -> None:
    assert QueueSelector().select(TopicRoute.of("T", TopicRouteData())) is None
    assert str(MessageQueue("T", "a", 3)) == "T@a:3"


@pytest.mark.parametrize(("text", "addrs"), [
    ("h:1", ("h:1",)), ("h:1; h:2;", ("h:1", "h:2")), (["h:1"], ("h:1",)), ("", ()),
])
def test_split_addrs(text: str | list[str], addrs: tuple[str, ...]) -> None:
    assert split_addrs(text) == addrs


@pytest.mark.parametrize("bad", ["h", "h:x", ":1"])
def test_split_addrs_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        split_addrs(bad)
