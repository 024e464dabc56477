"""What the replication benchmark's processes share (benchmarks/test_ha_replication.py and its
child processes, benchmarks/replication_child.py): the store and HA settings, the broker's heap
settings, the loop ticker, and the plain stream's receiving end."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Final

from broker.heap import freeze_startup_heap
from ha.config import HAConfig
from ha.service import AutoSwitchHAService
from store.config import StoreConfig
from store.message_store import MessageStore

FILE_BYTES: Final = 128 * 1024 * 1024
BATCH: Final = 32 * 1024  # haTransferBatchSize, Java's default
RECEIVE_CHUNK_BYTES: Final = 256 * 1024


def store_config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=FILE_BYTES,
                       enable_controller_mode=True)


def ha_config(broker_id: int) -> HAConfig:
    return HAConfig(broker_id=broker_id, ha_listen_port=0, bind_address="127.0.0.1",
                    ha_transfer_batch_size=BATCH, reconnect_interval_ms=50)


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


@contextlib.contextmanager
def broker_heap() -> Iterator[None]:
    """The heap settings a broker process runs with (`broker.heap.freeze_startup_heap`: what
    is alive now frozen out of later collections, the broker's thresholds), undone after."""
    thresholds = gc.get_threshold()
    freeze_startup_heap()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


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
