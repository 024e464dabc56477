"""Replication throughput master -> slave, against a plain loopback socket stream, and the worst
event-loop stall meanwhile.

A master store holds a backlog of BACKLOG_BYTES (4 KiB messages); an empty slave joins and the
time until its commitlog ends where the master's does is measured. Master and slave run in one
event loop (uvloop), as do both ends of the peer: a plain TCP stream of the same bytes (a copy
of the master's commitlog; zeros would be the kernel's one shared zero page, always in cache),
written in `haTransferBatchSize` chunks from a memoryview and copied by the receiver into a
preallocated buffer (the slave copies into its mapping). Rounds alternate peer / replication
and the printed ratio is the median of per-round ratios (this shared machine drifts). The
issue's goal is >= 0.5 for a 1 GiB backlog; BACKLOG_BYTES is smaller to keep CI short.

The same ratio in CPU seconds of the process (both ends, their worker threads) is printed too:
on a busy shared host it moves less than the wall-time one.

A ticker coroutine sleeping 1 ms records how late it wakes: the worst lateness during
replication is the worst event-loop stall (goal < 5 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import statistics
import time
from pathlib import Path
from typing import Final

import uvloop

from benchmarks.conftest import record
from ha.config import HAConfig
from ha.service import AutoSwitchHAService
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support.store_helpers import message

BACKLOG_BYTES: Final = 1024 * 1024 * 1024
FILE_BYTES: Final = 128 * 1024 * 1024
BATCH: Final = 32 * 1024
ROUNDS: Final = 3


def _config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=FILE_BYTES,
                       enable_controller_mode=True)


def _ha(broker_id: int) -> HAConfig:
    return HAConfig(broker_id=broker_id, ha_listen_port=0, bind_address="127.0.0.1",
                    ha_transfer_batch_size=BATCH, reconnect_interval_ms=50)


class Ticker:
    """Measures how late a 1 ms sleep wakes up: the event loop's stalls."""

    def __init__(self) -> None:
        self.worst_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            self.worst_s = max(self.worst_s, time.perf_counter() - started - 0.001)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def _replicate_once(master: MessageStore, service: AutoSwitchHAService, root: Path,
                          ticker: Ticker) -> tuple[float, float]:
    slave = MessageStore(_config(root))
    await asyncio.to_thread(slave.open)
    slave_run = asyncio.create_task(slave.run())  # as in the broker: pre-faulting, allocation
    slave_service = AutoSwitchHAService(slave, _ha(2), replica_ids=lambda: {1, 2},
                                        propose_sync_state_set=lambda *_: None)
    end = master.max_phy_offset
    try:
        started = time.perf_counter()
        cpu_started = time.process_time()
        ticker.start()
        await slave_service.become_slave(("127.0.0.1", service.ha_port), 1)
        for _ in itertools.count():  # polled: the figure is the time to the last byte
            if slave.max_phy_offset >= end:
                break
            await asyncio.sleep(0.005)
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu_started
        await ticker.stop()
        return seconds, cpu_seconds
    finally:
        await slave_service.close()
        slave_run.cancel()
        await asyncio.gather(slave_run, return_exceptions=True)
        await asyncio.to_thread(slave.close)
        shutil.rmtree(root)


class _Receiver(asyncio.BufferedProtocol):
    """The plain stream's receiving end: copies into `received`, resolves `done` at `size`."""

    def __init__(self, received: bytearray, size: int, done: asyncio.Future[None],
                 lost: asyncio.Future[None]) -> None:
        self.received = received
        self.size = size
        self.done = done
        self.lost = lost
        self.pos = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.received)[self.pos : self.pos + 256 * 1024]

    def buffer_updated(self, nbytes: int) -> None:
        self.pos += nbytes
        if self.pos >= self.size and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)


async def _socket_stream_once(data: memoryview) -> tuple[float, float]:
    """A plain TCP stream of `data` in BATCH chunks; the receiver copies into a buffer."""
    # A module-level protocol class, not one defined here: a class is in a reference cycle,
    # so a buffer its methods closed over was freed only by a later garbage collection, which
    # then unmapped the 256 MiB during a replication round (a 19 ms "stall" of replication).
    received = bytearray(len(data) + 256 * 1024)  # never an empty buffer at the end
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    lost: asyncio.Future[None] = loop.create_future()
    server = await loop.create_server(
        lambda: _Receiver(received, len(data), done, lost), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    started = time.perf_counter()
    cpu_started = time.process_time()
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    for pos in range(0, len(data), BATCH):
        writer.write(data[pos : pos + BATCH])
        await writer.drain()
    await done
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started
    writer.close()
    server.close()
    await writer.wait_closed()
    await lost
    # Freed here, not whenever the transport lets go of the protocol: unmapping 1 GiB takes
    # some 70 ms, which landed in the next replication round as a stall.
    with contextlib.suppress(BufferError):  # (none is exported once the connection is lost)
        received.clear()
    return seconds, cpu_seconds


def _commitlog_views(store: MessageStore) -> list[memoryview]:
    views = []
    pos = store.min_phy_offset
    while pos < store.max_phy_offset:
        size = min(FILE_BYTES - pos % FILE_BYTES, store.max_phy_offset - pos)
        views.append(store.commitlog.view(pos, size))
        pos += size
    return views


async def _bench(tmp_path: Path) -> None:
    master = MessageStore(_config(tmp_path / "master"))
    await asyncio.to_thread(master.open)
    service = AutoSwitchHAService(master, _ha(1), replica_ids=lambda: {1, 2},
                                  propose_sync_state_set=lambda *_: None)
    await service.start()
    try:
        await service.become_master(1, frozenset({1}), 1)
        msg = message(b"x" * 4000)
        while master.max_phy_offset < BACKLOG_BYTES:
            await master.put_message(msg)
        await master.flush()
        # The peer streams the same bytes as the master (its commitlog), not zeros: a zero
        # buffer is the kernel's one shared zero page, always in cache, which made the peer's
        # copies cheaper than any real data's.
        views = _commitlog_views(master)
        payload = b"".join(views)
        for view in views:
            view.release()
        peer_s: list[float] = []
        repl_s: list[float] = []
        peer_cpu: list[float] = []
        repl_cpu: list[float] = []
        stalls: list[float] = []
        peer_stalls: list[float] = []
        for index in range(ROUNDS):
            peer_ticker = Ticker()
            peer_ticker.start()
            with memoryview(payload) as view:
                wall, cpu = await _socket_stream_once(view)
            peer_s.append(wall)
            peer_cpu.append(cpu)
            await peer_ticker.stop()
            peer_stalls.append(peer_ticker.worst_s)
            ticker = Ticker()
            wall, cpu = await _replicate_once(master, service, tmp_path / f"s{index}", ticker)
            repl_s.append(wall)
            repl_cpu.append(cpu)
            stalls.append(ticker.worst_s)
        nbytes = master.max_phy_offset
        ratio = statistics.median(p / r for p, r in zip(peer_s, repl_s, strict=True))
        # CPU seconds of this process (both ends and their threads) per run: less sensitive
        # than wall time to the other tenants of a shared host.
        cpu_ratio = statistics.median(p / r for p, r in zip(peer_cpu, repl_cpu, strict=True))
        record(f"HA replication of a {nbytes / 2**20:.0f} MiB backlog: "
               f"{nbytes / statistics.median(repl_s) / 1e6:,.0f} MB/s; plain loopback stream "
               f"{len(payload) / statistics.median(peer_s) / 1e6:,.0f} MB/s; ratio "
               f"{ratio:.2f} (goal >= 0.5), in CPU time {cpu_ratio:.2f}; worst event-loop stall "
               f"{max(stalls) * 1000:.1f} ms (goal < 5 ms; {max(peer_stalls) * 1000:.1f} ms "
               f"during the plain stream); {ROUNDS} rounds, noisy shared host")
    finally:
        await service.close()
        await asyncio.to_thread(master.close)


def test_ha_replication_throughput(tmp_path: Path) -> None:
    uvloop.run(_bench(tmp_path))
