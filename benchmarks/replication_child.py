"""Far ends of the replication benchmark (benchmarks/test_ha_replication.py), each in a process of
its own, as a slave runs on a host of its own:

- `slave PORT END`: the slave's end for every round (one process, as the receiver: no process
  exits between rounds, see `reuse_freed_memory`). For each line `round ROOT PREVIOUS` on stdin:
  an empty slave store at ROOT, left on disk at the end; the previous round's store PREVIOUS
  ("-": none) removed just before (`reuse_freed_memory`); prints `ready`, waits for a line on
  stdin, then replicates from the master's HA port until its commitlog ends at END, prints a
  `done` line, then, once its consume queues reach END too, `dispatched <seconds> <cpu
  seconds>` (since `done`), and closes that store. Stdin closed: the process exits;
- `receiver SIZE ROUNDS`: the plain stream's receiving end for every round (one buffer, so no
  GiB is freed and handed back to the host between rounds, see `reuse_freed_memory`); prints
  `port <port>`, then for each of ROUNDS connections copies SIZE bytes into the buffer (every
  page touched once, first) and prints a `done` line (from the connection on).

A `done` line is `done <cpu seconds> <worst stall s> <worst stall less waits for a CPU s>
<major faults> <late ticks>`, of this process over the transfer (`replication_parts.Ticker`,
the last its `late_text()`). Each runs its own uvloop loop with a 1 ms ticker, as the parent
does for its end, and keeps the memory malloc frees, as a broker process does
(`broker.heap.keep_freed_memory`; process-wide, so not in the parent, which is the pytest
process of every benchmark).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import uvloop

from benchmarks.replication_parts import Ticker, broker_heap, ha_config, store_config
from broker.heap import keep_freed_memory
from ha.service import AutoSwitchHAService
from store.message_store import MessageStore

RECEIVE_CHUNK_BYTES: Final = 256 * 1024


@contextlib.asynccontextmanager
async def empty_slave(root: Path) -> AsyncIterator[tuple[MessageStore, AutoSwitchHAService]]:
    """An empty slave store under `root`, its background loops running (as in the broker:
    pre-faulting, allocation), and its HA service (broker id 2); closed after, its files left
    (the next round's slave removes them, `reuse_freed_memory`)."""
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


async def replicate(store: MessageStore, service: AutoSwitchHAService, port: int,
                    end: int) -> None:
    """Become the slave of the master's HA port and return once the commitlog ends at `end`
    (polled: the figure is the time to the last byte)."""
    await service.become_slave(("127.0.0.1", port), 1)
    while store.max_phy_offset < end:  # noqa: ASYNC110 - polled on purpose, as documented
        await asyncio.sleep(0.005)


def _done_line(cpu_seconds: float, ticker: Ticker) -> str:
    """The `done` line (module docstring) the parent reads after a transfer."""
    return (f"done {cpu_seconds} {ticker.worst_s} {ticker.worst_own_s} {ticker.major_faults} "
            f"{ticker.late_text()}")


def reuse_freed_memory(previous: Path | None) -> None:
    """Remove the previous round's slave store (its GiB of page cache) right before this round
    replicates, so that this slave's page cache takes the pages just freed. This VM gives memory
    unused for a few seconds back to its host (free page reporting) and a page on such memory
    costs a host fault at first touch: writing a new 1 GiB file took 2.4 s after 20 s idle, 0.5 s
    right after another was removed (2026-11-27). Removed here rather than when its round ended:
    with a GiB freed there (or a scratch file's, written and removed as a warm-up), the next
    plain stream stalled 28-39 ms in most runs, likely the host taking the freed memory back
    then (not shown); since, its stalls are 0.3-5 ms. So the slave starts on the footing of
    the stream's receiver, whose buffer is touched before it too; the host's first-touch cost
    is what neither measures. (The first round has nothing
    to remove: it is the warm-up round.)"""
    if previous is not None:
        shutil.rmtree(previous)


async def slave_round(root: Path, port: int, end: int, previous: Path | None) -> None:
    """One round of `slave` (module docstring), from `ready` to `dispatched`."""
    async with empty_slave(root) as (store, service):
        await asyncio.to_thread(reuse_freed_memory, previous)
        with broker_heap():  # started up: as a broker process, from here on
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
            ticker = Ticker()
            cpu_started = time.process_time()
            ticker.start()
            await replicate(store, service, port, end)
            cpu_seconds = time.process_time() - cpu_started
            await ticker.stop()
            print(_done_line(cpu_seconds, ticker), flush=True)
            # Then the consume queues (the slave dispatches after a backlog, ha/client.py).
            started, cpu_started = time.perf_counter(), time.process_time()
            while store.reput_from_offset < end:  # noqa: ASYNC110 - polled, as above
                await asyncio.sleep(0.005)
            print(f"dispatched {time.perf_counter() - started} "
                  f"{time.process_time() - cpu_started}", flush=True)


async def slave(port: int, end: int) -> None:
    while line := (await asyncio.to_thread(sys.stdin.readline)).split():
        if line[0] != "round" or len(line) != 3:
            raise SystemExit(f"slave: expected 'round ROOT PREVIOUS', got {line!r}")
        await slave_round(Path(line[1]), port, end, None if line[2] == "-" else Path(line[2]))


class Receiver(asyncio.BufferedProtocol):
    """One round of the plain stream: copies into `received` from its start, resolves `done` at
    `size` and `lost` when the connection goes; `cpu_started` is the process's CPU time when
    the connection came."""

    def __init__(self, received: bytearray, size: int) -> None:
        loop = asyncio.get_running_loop()
        self.received = received
        self.size = size
        self.done: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()
        self.pos = 0
        self.cpu_started = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.cpu_started = time.process_time()

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.received)[self.pos : self.pos + RECEIVE_CHUNK_BYTES]

    def buffer_updated(self, nbytes: int) -> None:
        self.pos += nbytes
        if self.pos >= self.size and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)


async def receiver(size: int, rounds: int) -> None:
    received = bytearray(size + 256 * 1024)  # never an empty buffer at the end
    # Touched before the stream (a byte per page): preallocated in fact, not only reserved.
    # Pages first touched during the stream made it 2.2 instead of 4.1 GB/s in some runs on
    # this VM, whose host backs cold memory again only on first touch.
    received[::4096] = bytes(len(range(0, len(received), 4096)))
    loop = asyncio.get_running_loop()
    connections: asyncio.Queue[Receiver] = asyncio.Queue()

    def accept() -> Receiver:
        connection = Receiver(received, size)
        connections.put_nowait(connection)
        return connection

    server = await loop.create_server(accept, "127.0.0.1", 0)
    with broker_heap():  # as the slave's process, for the same footing
        print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
        for _ in range(rounds):
            connection = await connections.get()
            ticker = Ticker()
            ticker.start()
            await connection.done
            cpu_seconds = time.process_time() - connection.cpu_started
            await ticker.stop()
            print(_done_line(cpu_seconds, ticker), flush=True)
            await connection.lost
        server.close()


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    keep_freed_memory()
    if role == "slave":
        uvloop.run(slave(int(args[0]), int(args[1])))
    elif role == "receiver":
        uvloop.run(receiver(int(args[0]), int(args[1])))
    else:
        raise SystemExit(f"unknown role {role!r}")
