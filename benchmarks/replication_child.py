"""Far ends of the replication benchmark (benchmarks/test_ha_replication.py), each in a process of
its own, as a slave runs on a host of its own:

- `slave ROOT PORT END`: an empty slave store; prints `ready`, waits for a line on stdin, then
  replicates from the master's HA port until its commitlog ends at END, and prints
  `done <cpu seconds> <worst event-loop stall seconds>` (CPU of this process since the line);
- `receiver SIZE`: the plain stream's receiving end; prints `port <port>`, copies SIZE bytes
  into a preallocated buffer (every page touched first), and prints
  `done <cpu seconds> <worst stall seconds>`.

Each runs its own uvloop loop with a 1 ms ticker, as the parent does for its end.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import uvloop

from benchmarks.replication_parts import Receiver, Ticker, broker_heap, empty_slave, replicate


async def slave(root: Path, port: int, end: int) -> None:
    async with empty_slave(root) as (store, service):
        with broker_heap():  # started up: as a broker process, from here on
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
            ticker = Ticker()
            cpu_started = time.process_time()
            ticker.start()
            await replicate(store, service, port, end)
            cpu_seconds = time.process_time() - cpu_started
            await ticker.stop()
            print(f"done {cpu_seconds} {ticker.worst_s}", flush=True)


async def receiver(size: int) -> None:
    received = bytearray(size + 256 * 1024)  # never an empty buffer at the end
    # Touched before the stream (a byte per page): preallocated in fact, not only reserved.
    # Pages first touched during the stream made it 2.2 instead of 4.1 GB/s in some runs on
    # this VM, whose host backs cold memory again only on first touch.
    received[::4096] = bytes(len(range(0, len(received), 4096)))
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    lost: asyncio.Future[None] = loop.create_future()
    server = await loop.create_server(lambda: Receiver(received, size, done, lost),
                                      "127.0.0.1", 0)
    with broker_heap():  # as the slave's process, for the same footing
        ticker = Ticker()
        ticker.start()
        cpu_started = time.process_time()
        print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
        await done
        cpu_seconds = time.process_time() - cpu_started
        await ticker.stop()
        print(f"done {cpu_seconds} {ticker.worst_s}", flush=True)
        server.close()
        await lost


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "slave":
        uvloop.run(slave(Path(args[0]), int(args[1]), int(args[2])))
    elif role == "receiver":
        uvloop.run(receiver(int(args[0])))
    else:
        raise SystemExit(f"unknown role {role!r}")
