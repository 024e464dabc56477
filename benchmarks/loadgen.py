"""pyrmq's Python load generator: concurrent producers on one asyncio (uvloop) loop.

    python -m benchmarks.loadgen pyrmq|redis HOST:PORT TOPIC sync|batch
        [--producers 16] [--body-bytes 1024] [--batch-size 32] [--queues 8]
        [--warmup-s 3] [--duration-s 10] [--rate MSGS_PER_S]

The workload shape of tests/interop/java/.../LoadGen.java, from Python: `producers` coroutines,
each with its own connection, send back to back for warmup-s + duration-s, each waiting for its
answer before the next send.
- pyrmq: pyrmq_client's `Producer` on a `BrokerClient` to the broker itself (no name-server
  routing): SEND_MESSAGE_V2 of one message (sync) or SEND_BATCH_MESSAGE of batch-size messages
  (batch), queues round-robin from a random start, as the Java client picks them.
- redis: redis-py's asyncio client, one `Redis` (one connection) per producer: XADD TOPIC * body
  <body-bytes> (sync) or a pipeline of batch-size such XADDs in one round trip (batch).

With `--rate`, the load is open-loop at that many messages/s in all: each producer sends on
its own fixed schedule (every producers/rate s, the producers evenly staggered), waiting for
each answer; one that falls behind its schedule sends at once, and the largest lag behind the
schedule is reported (`behind_schedule_max_ms`: a figure above the p99 means the target did not
keep up and the latencies understate the queueing).

Only sends started inside the measured window count; their latency (call to answer) gives p50 and
p99 (nearest rank). Prints "WINDOW_OPEN" when the window opens, "WINDOW_CLOSED" when every
producer stopped, then one JSON line: mode, msgs_per_s, p50_ms, p99_ms, errors, messages, seconds,
sends, total_messages and client_cpu_pct (this process's CPU over the window, per cent of a core).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import redis.asyncio
import redis.exceptions
import uvloop

from pyrmq_client import BrokerClient, Message, Producer
from pyrmq_client.errors import BrokerClientError
from remoting.errors import RemotingError

PRODUCER_GROUP: Final = "pyrmq_py_loadgen_producer"
STREAM_FIELD: Final = b"body"
DEADLINE_EXTRA_S: Final = 60.0  # set-up and the last answers, beyond warm-up and window
ERRORS_PRINTED_MAX: Final = 5


class Sender(Protocol):
    """One producer's connection: `send()` sends once and returns how many messages were
    acknowledged; it raises on any failure."""

    async def send(self) -> int: ...

    async def close(self) -> None: ...


class PyrmqSender:
    """Sends to a pyrmq (or any RocketMQ) broker through pyrmq_client."""

    def __init__(self, client: BrokerClient, topic: str, *, body: bytes, batch_size: int | None,
                 queues: int) -> None:
        self._client = client
        self._producer = Producer(client, PRODUCER_GROUP)
        self._message = Message(topic, body)
        self._batch = [self._message] * batch_size if batch_size is not None else None
        self._queues = queues
        self._next_queue = random.randrange(queues)

    @classmethod
    async def open(cls, addr: str, topic: str, *, body: bytes, batch_size: int | None,
                   queues: int) -> PyrmqSender:
        host, port = addr.rsplit(":", 1)
        client = await BrokerClient.connect(host, int(port))
        return cls(client, topic, body=body, batch_size=batch_size, queues=queues)

    async def send(self) -> int:
        queue_id = self._next_queue
        self._next_queue = (queue_id + 1) % self._queues
        if self._batch is None:
            await self._producer.send(self._message, queue_id=queue_id)
            return 1
        await self._producer.send_batch(self._batch, queue_id=queue_id)
        return len(self._batch)

    async def close(self) -> None:
        await self._client.close()


class RedisSender:
    """XADDs to a Redis stream through redis-py's asyncio client, on its own connection."""

    def __init__(self, client: redis.asyncio.Redis, stream: str, *, body: bytes,
                 batch_size: int | None) -> None:
        self._client = client
        self._stream = stream
        self._fields: dict[bytes, bytes] = {STREAM_FIELD: body}
        self._batch_size = batch_size

    @classmethod
    async def open(cls, addr: str, stream: str, *, body: bytes,
                   batch_size: int | None) -> RedisSender:
        host, port = addr.rsplit(":", 1)
        client = redis.asyncio.Redis(host=host, port=int(port), socket_timeout=3.0,
                                     socket_connect_timeout=3.0)
        await client.ping()  # connect now, not inside the window
        return cls(client, stream, body=body, batch_size=batch_size)

    async def send(self) -> int:
        if self._batch_size is None:
            await self._client.xadd(self._stream, self._fields)  # type: ignore[arg-type]
            return 1
        pipe = self._client.pipeline(transaction=False)
        for _ in range(self._batch_size):
            pipe.xadd(self._stream, self._fields)  # type: ignore[arg-type]
        await pipe.execute()
        return self._batch_size

    async def close(self) -> None:
        await self._client.aclose()


@dataclass(slots=True)
class ProducerStats:
    """One producer's counts; only sends started inside the window are measured."""

    latencies_ns: list[int] = field(default_factory=list)
    messages: int = 0
    total_messages: int = 0
    errors: int = 0
    last_done_ns: int = 0
    behind_ns: int = 0  # open loop: the largest lag behind the schedule


_errors_printed = 0


def _report_error(err: BaseException) -> None:
    global _errors_printed  # noqa: PLW0603 - a bound on stderr noise, process-wide
    if _errors_printed < ERRORS_PRINTED_MAX:
        _errors_printed += 1
        print(f"ERROR {type(err).__name__}: {err}", file=sys.stderr, flush=True)


async def produce(sender: Sender, stats: ProducerStats, *, measure_from_ns: int,
                  stop_at_ns: int, schedule: tuple[int, int] | None = None) -> None:
    """Send until stop_at_ns (monotonic ns): back to back, or on `schedule` (first send at,
    interval), both in ns."""
    clock = time.monotonic_ns
    next_at, interval = schedule if schedule is not None else (0, 0)
    while True:
        if interval:
            now = clock()
            if next_at > now:
                await asyncio.sleep((next_at - now) / 1e9)
            elif now >= measure_from_ns:
                stats.behind_ns = max(stats.behind_ns, now - next_at)
            next_at += interval
        started = clock()
        if started >= stop_at_ns:
            return
        try:
            messages = await sender.send()
        except (BrokerClientError, RemotingError, redis.exceptions.RedisError, OSError,
                TimeoutError) as err:
            _report_error(err)
            if started >= measure_from_ns:
                stats.errors += 1
            continue
        done = clock()
        stats.total_messages += messages
        if started >= measure_from_ns:
            stats.messages += messages
            stats.latencies_ns.append(done - started)
            stats.last_done_ns = done


def percentile_ms(sorted_ns: Sequence[int], fraction: float) -> float | None:
    """Nearest-rank percentile of sorted nanoseconds, in ms; None for no samples."""
    if not sorted_ns:
        return None
    rank = math.ceil(fraction * len(sorted_ns))
    return sorted_ns[min(len(sorted_ns) - 1, max(0, rank - 1))] / 1e6


async def run(args: argparse.Namespace) -> dict[str, object]:
    body = (b"loadgen|" * (args.body_bytes // 8 + 1))[: args.body_bytes]
    batch_size = args.batch_size if args.mode == "batch" else None
    senders: list[Sender] = []
    try:
        for _ in range(args.producers):
            if args.target == "pyrmq":
                senders.append(await PyrmqSender.open(args.addr, args.topic, body=body,
                                                      batch_size=batch_size, queues=args.queues))
            else:
                senders.append(await RedisSender.open(args.addr, args.topic, body=body,
                                                      batch_size=batch_size))
        measure_from_ns = time.monotonic_ns() + int(args.warmup_s * 1e9)
        stop_at_ns = measure_from_ns + int(args.duration_s * 1e9)
        stats = [ProducerStats() for _ in senders]
        start_ns = time.monotonic_ns()
        async with asyncio.TaskGroup() as group:
            for index, (sender, stat) in enumerate(zip(senders, stats, strict=True)):
                schedule = None
                if args.rate:
                    per_message_ns = int(1e9 * batch_size_of(args) / args.rate)
                    schedule = (start_ns + index * per_message_ns,
                                per_message_ns * len(senders))
                group.create_task(produce(sender, stat, measure_from_ns=measure_from_ns,
                                          stop_at_ns=stop_at_ns, schedule=schedule))
            await asyncio.sleep((measure_from_ns - time.monotonic_ns()) / 1e9)
            print("WINDOW_OPEN", flush=True)
            cpu_at_measure = time.process_time()
            wall_at_measure_ns = time.monotonic_ns()
        cpu_at_end = time.process_time()
        wall_at_end_ns = time.monotonic_ns()
        print("WINDOW_CLOSED", flush=True)
    finally:
        for sender in senders:
            await sender.close()
    latencies = sorted(ns for stat in stats for ns in stat.latencies_ns)
    messages = sum(stat.messages for stat in stats)
    last_done_ns = max([measure_from_ns + 1, *(stat.last_done_ns for stat in stats)])
    seconds = (last_done_ns - measure_from_ns) / 1e9
    return {
        "mode": args.mode,
        "target": args.target,
        "producers": args.producers,
        "body_bytes": args.body_bytes,
        "batch_size": batch_size or 1,
        "msgs_per_s": round(messages / seconds, 1),
        "p50_ms": percentile_ms(latencies, 0.50),
        "p99_ms": percentile_ms(latencies, 0.99),
        "errors": sum(stat.errors for stat in stats),
        "messages": messages,
        "seconds": round(seconds, 3),
        "sends": len(latencies),
        "total_messages": sum(stat.total_messages for stat in stats),
        "rate": args.rate,
        "behind_schedule_max_ms": max(stat.behind_ns for stat in stats) / 1e6,
        "client_cpu_pct": round(
            100 * (cpu_at_end - cpu_at_measure) / ((wall_at_end_ns - wall_at_measure_ns) / 1e9),
            1,
        ),
    }


def batch_size_of(args: argparse.Namespace) -> int:
    """Messages per send."""
    return int(args.batch_size) if args.mode == "batch" else 1


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loadgen",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("target", choices=("pyrmq", "redis"))
    parser.add_argument("addr", help="HOST:PORT of the broker or of redis-server")
    parser.add_argument("topic", help="the topic (pyrmq) or stream key (redis)")
    parser.add_argument("mode", choices=("sync", "batch"))
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--queues", type=int, default=8, help="pyrmq: the topic's queue count")
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="open loop at this many messages/s in all (0: back to back)")
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> None:
    async with asyncio.timeout(args.warmup_s + args.duration_s + DEADLINE_EXTRA_S):
        result = await run(args)
    print(json.dumps(result), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    uvloop.run(_main(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
