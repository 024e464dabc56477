"""Topic routes as a client uses them (pure): message queues, master addresses, queue selection.

A name server answers GET_ROUTEINFO_BY_TOPIC with a `TopicRouteData`: per broker name, how many
read and write queues the topic has there (`QueueData`) and the addresses of that broker set by
broker id (`BrokerData`, id 0 the master). `TopicRoute.of` turns that into what a client needs:
the readable and writable `MessageQueue`s and each broker name's master address.

`QueueSelector` picks the queue of a send: round-robin over the writable queues, skipping the
broker names that failed recently when another broker has a writable queue (Java's
"sendLatencyFaultEnable" in its simplest form: avoid the broker that just failed, once).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from remoting.bodies import PERM_READ, PERM_WRITE, TopicRouteData

MASTER_ID: Final = 0


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker set: RocketMQ's `MessageQueue`."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """A topic's queues and the master address of each broker name that holds them."""

    topic: str
    read_queues: tuple[MessageQueue, ...]
    write_queues: tuple[MessageQueue, ...]
    master_addrs: dict[str, str]

    @classmethod
    def of(cls, topic: str, data: TopicRouteData) -> TopicRoute:
        """The route of `topic` from a name server's answer. A broker name without a master
        (id 0) keeps its queues listed (a read of them fails until a master appears) but has no
        entry in `master_addrs`."""
        masters = {
            broker.broker_name: broker.broker_addrs[MASTER_ID]
            for broker in data.broker_datas if MASTER_ID in broker.broker_addrs
        }
        read: list[MessageQueue] = []
        write: list[MessageQueue] = []
        for queue_data in sorted(data.queue_datas, key=lambda q: q.broker_name):
            name = queue_data.broker_name
            if queue_data.perm & PERM_READ:
                read += (MessageQueue(topic, name, i) for i in range(queue_data.read_queue_nums))
            if queue_data.perm & PERM_WRITE and name in masters:
                write += (MessageQueue(topic, name, i) for i in range(queue_data.write_queue_nums))
        return cls(topic, tuple(read), tuple(write), masters)

    def master_addr(self, broker_name: str) -> str | None:
        return self.master_addrs.get(broker_name)


class QueueSelector:
    """Round-robin over a route's writable queues, avoiding broker names that just failed."""

    def __init__(self, start: int = 0) -> None:
        self._next = start

    def select(self, route: TopicRoute, avoid: Iterable[str] = ()) -> MessageQueue | None:
        """The next writable queue, not on a broker name in `avoid` while another broker name
        has one; None when the route has no writable queue."""
        queues = route.write_queues
        if not queues:
            return None
        avoided = frozenset(avoid)
        for step in range(len(queues)):
            queue = queues[(self._next + step) % len(queues)]
            if queue.broker_name not in avoided:
                self._next += step + 1
                return queue
        queue = queues[self._next % len(queues)]
        self._next += 1
        return queue
