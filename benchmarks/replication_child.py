"""Far ends of the replication benchmark (benchmarks/test_ha_replication.py), each in a process of
its own, as a slave runs on a host of its own:

- `slave ROOT PORT END`: an empty slave store and a warmed page cache (`warm_page_cache`);
  prints `ready`, waits for a line on stdin, then
  replicates from the master's HA port until its commitlog ends at END, and prints
  `done <cpu seconds> <worst event-loop stall seconds>` (CPU of this process since the line);
- `receiver SIZE`: the plain stream's receiving end; prints `port <port>`, copies SIZE bytes
  into a preallocated buffer (every page touched first), and prints
  `done <cpu seconds> <worst stall seconds>`.

Each runs its own uvloop loop with a 1 ms ticker, as the parent does for its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import uvloop

from benchmarks.replication_parts import Ticker, broker_heap, ha_config, store_config
from ha.service import AutoSwitchHAService
from store.message_store import MessageStore

RECEIVE_CHUNK_BYTES: Final = 256 * 1024

WARM_WRITE_BYTES: Final = 4 * 1024 * 1024


@contextlib.asynccontextmanager
async def empty_slave(root: Path) -> AsyncIterator[tuple[MessageStore, AutoSwitchHAService]]:
    """An empty slave store under `root`, its background loops running (as in the broker:
    pre-faulting, allocation), and its HA service (broker id 2); closed and removed after."""
    store = MessageStore(store_config(root))
    await asyncio.to_thread(store.open)
    store_run = asyncio.create_task(store.run())
    service = AutoSwitchHAService(store, ha_config(2), replica_ids=lambda: {1, 2},
                                  propose_sync_state_set=lambda *_: None)
    try:
        yield store, service
    finally:
        await service.close()
        store_run.cancel()
        await asyncio.gather(store_run, return_exceptions=True)
        await asyncio.to_thread(store.close)
        shutil.rmtree(root)


async def replicate(store: MessageStore, service: AutoSwitchHAService, port: int,
                    end: int) -> None:
    """Become the slave of the master's HA port and return once the commitlog ends at `end`
    (polled: the figure is the time to the last byte)."""
    await service.become_slave(("127.0.0.1", port), 1)
    while store.max_phy_offset < end:  # noqa: ASYNC110 - polled on purpose, as documented
        await asyncio.sleep(0.005)


def warm_page_cache(path: Path, size: int) -> None:
    """Write `size` bytes to a scratch file at `path` and remove it: the page cache a slave
    fills right after takes the pages just freed. This VM gives memory it has not used for a
    few seconds back to its host (free page reporting), and a page cache page on such memory
    costs a host fault first: writing a new 1 GiB file took 2.4 s after 20 s idle, 0.5 s right
    after another was removed (2026-11-27); in a clean-clone CI run without this step, three
    of four replication rounds took 2.0-2.5 s at 2.5-3.1 s of CPU, the other 0.47 s at 0.77.
    Freed anonymous memory did not serve: the page cache did not reuse it. So the slave starts
    on the footing of the stream's receiver, whose buffer is touched before it too; the host's
    first-touch cost is what neither measures."""
    chunk = bytes(WARM_WRITE_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for offset in range(0, size, len(chunk)):
            os.pwrite(fd, chunk, offset)
    finally:
        os.close(fd)
        path.unlink()


async def slave(root: Path, port: int, end: int) -> None:
    async with empty_slave(root) as (store, service):
        await asyncio.to_thread(warm_page_cache, root.parent / f"{root.name}.warm", end)
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


class Receiver(asyncio.BufferedProtocol):
    """The plain stream's receiving end: copies into `received`, resolves `done` at `size` and
    `lost` when the connection goes."""

    def __init__(self, received: bytearray, size: int, done: asyncio.Future[None],
                 lost: asyncio.Future[None]) -> None:
        self.received = received
        self.size = size
        self.done = done
        self.lost = lost
        self.pos = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.received)[self.pos : self.pos + RECEIVE_CHUNK_BYTES]

    def buffer_updated(self, nbytes: int) -> None:
        self.pos += nbytes
        if self.pos >= self.size and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)


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
