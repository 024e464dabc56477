"""The stock C++ client (PyPI `rocketmq` 0.4.4: ctypes over the librocketmq its wheel bundles) as
a command-line program for the interop tests; it prints the lines `output.py` parses, like the
Java programs do.

It runs under the C++ client's own interpreter (`.venv-cpp`, made by scripts/setup.sh), so it
imports nothing of ours: only the standard library and `rocketmq`.

    produce NAMESRV TOPIC COUNT sync|async|oneway|orderly TAG [--key-prefix= --body-bytes=
            --shards= --delay-level=]  orderly: message i to queue (i % shards) % queues, in order
    push    NAMESRV GROUP TOPIC EXPR EXPECTED [--fail-every=N --linger-ms= --timeout-s= --orderly]
    pull    NAMESRV GROUP TOPIC EXPR EXPECTED [--timeout-s=]

`push --fail-every=N` answers RECONSUME_LATER to the first delivery of every N-th key (by its
index), which makes the client send it back to the broker. The wrapper's own `subscribe()`
cannot do that (it re-raises the callback's exception inside ctypes, which returns
CONSUME_SUCCESS), so the callback is registered here with the status as its return value.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from typing import Any

import rocketmq.client as cpp  # type: ignore[import-not-found, unused-ignore]
from rocketmq.exceptions import ffi_check  # type: ignore[import-not-found, unused-ignore]
from rocketmq.ffi import dll  # type: ignore[import-not-found, unused-ignore]

CONSUME_SUCCESS = 0
RECONSUME_LATER = 1
SEND_OK = 0
_print_lock = threading.Lock()


def emit(line: str) -> None:
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def body_of(key: str, body_bytes: int) -> bytes:
    """"key|" repeated and cut to body_bytes, as the Java Produce program writes."""
    unit = (key + "|").encode()
    return (unit * (body_bytes // len(unit) + 1))[:body_bytes]


def key_index(key: str) -> int:
    return int(key.rsplit("-", 1)[1])


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def produce(args: argparse.Namespace) -> int:
    producer = cpp.Producer(f"PG_{args.topic}_{args.mode}", timeout=args.send_timeout_ms)
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    failures = 0
    pending = threading.Semaphore(0)
    for index in range(args.count):
        key = f"{args.key_prefix}-{index}"
        msg = cpp.Message(args.topic)
        msg.set_keys(key)
        msg.set_tags(args.tag)
        msg.set_body(body_of(key, args.body_bytes))
        if args.delay_level:
            msg.set_delay_time_level(args.delay_level)
        if args.mode == "sync":
            result = producer.send_sync(msg)
            emit(f"SENT {result.msg_id} -1 {result.offset} {key} {result.status.name}")
            failures += result.status != SEND_OK
        elif args.mode == "async":

            def on_success(result: Any, key: str = key) -> None:
                emit(f"SENT {result.msg_id} -1 {result.offset} {key} {result.status.name}")
                pending.release()

            def on_exception(exc: Exception, key: str = key) -> None:
                emit(f"FAILED {key} {exc!r}".replace("\n", " "))
                pending.release()

            producer.send_async(msg, on_success, on_exception)
        elif args.mode == "oneway":
            producer.send_oneway(msg)
            emit(f"ONEWAY - {key}")
        else:
            chosen: list[int] = []

            def select(queues: int, _msg: Any, arg: Any, chosen: list[int] = chosen) -> int:
                shard = ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0]
                chosen.append(shard % queues)
                return chosen[-1]

            result = producer.send_orderly(msg, index % args.shards, queue_selector=select)
            emit(f"SENT {result.msg_id} {chosen[-1]} {result.offset} {key} {result.status.name}")
            failures += result.status != SEND_OK
    if args.mode == "async":
        deadline = time.monotonic() + args.timeout_s
        for _ in range(args.count):
            if not pending.acquire(timeout=max(0.0, deadline - time.monotonic())):
                emit("TIMEOUT async sends")
                return 1
    producer.shutdown()
    return 1 if failures else 0


def push(args: argparse.Namespace) -> int:
    consumer = cpp.PushConsumer(args.group, orderly=args.orderly)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.set_thread_count(2)
    seen: set[str] = set()
    done = threading.Event()

    def on_message(_consumer: Any, handle: Any) -> int:
        msg = cpp.RecvMessage(handle)
        key = text(msg.keys)
        times = int(msg.reconsume_times)
        if args.fail_every and times == 0 and key_index(key) % args.fail_every == 0:
            emit(f"REJECTED {key} {times}")
            return RECONSUME_LATER
        body = msg.body
        tags = text(msg.tags) or "-"
        emit(
            f"RECEIVED {key} {times} {msg.queue_id} {msg.queue_offset} {len(body)} "
            f"{zlib.crc32(body)} {tags}"
        )
        with _print_lock:
            if key not in seen:
                seen.add(key)
                if len(seen) >= args.expected:
                    done.set()
        return CONSUME_SUCCESS

    ffi_check(dll.Subscribe(consumer._handle, args.topic.encode(), args.expr.encode()))
    consumer._register_callback(on_message)
    consumer.start()
    finished = done.wait(args.timeout_s)
    if finished:
        time.sleep(args.linger_ms / 1000)  # let duplicates show
    consumer.shutdown()
    emit(f"DONE {len(seen)}" if finished else f"TIMEOUT {len(seen)} {args.expected}")
    return 0 if finished else 3


def pull(args: argparse.Namespace) -> int:
    consumer = cpp.PullConsumer(args.group)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.start()
    seen: set[str] = set()
    deadline = time.monotonic() + args.timeout_s
    while len(seen) < args.expected and time.monotonic() < deadline:
        for msg in consumer.pull(args.topic, args.expr):
            key = text(msg.keys)
            body = msg.body
            emit(
                f"RECEIVED {key} {msg.reconsume_times} {msg.queue_id} {msg.queue_offset} "
                f"{len(body)} {zlib.crc32(body)} {text(msg.tags) or '-'}"
            )
            seen.add(key)
    consumer.shutdown()
    finished = len(seen) >= args.expected
    emit(f"DONE {len(seen)}" if finished else f"TIMEOUT {len(seen)} {args.expected}")
    return 0 if finished else 3


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cpp_client")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("produce")
    p.add_argument("namesrv")
    p.add_argument("topic")
    p.add_argument("count", type=int)
    p.add_argument("mode", choices=("sync", "async", "oneway", "orderly"))
    p.add_argument("tag")
    p.add_argument("--key-prefix", default="cpp")
    p.add_argument("--body-bytes", type=int, default=128)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--delay-level", type=int, default=0)
    p.add_argument("--send-timeout-ms", type=int, default=3000)
    p.add_argument("--timeout-s", type=float, default=60.0)
    for name in ("push", "pull"):
        c = commands.add_parser(name)
        c.add_argument("namesrv")
        c.add_argument("group")
        c.add_argument("topic")
        c.add_argument("expr")
        c.add_argument("expected", type=int)
        c.add_argument("--timeout-s", type=float, default=60.0)
        if name == "push":
            c.add_argument("--fail-every", type=int, default=0)
            c.add_argument("--linger-ms", type=int, default=0)
            c.add_argument("--orderly", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    code = {"produce": produce, "push": push, "pull": pull}[args.command](args)
    sys.stdout.flush()
    # librocketmq's static destructors can crash at interpreter exit after shutdown(); the
    # outcome is already printed, so leave without running them.
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
