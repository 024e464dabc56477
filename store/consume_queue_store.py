"""The table of consume queues of a store: `consumequeue/<topic>/<queueId>/`."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from store.consume_queue import ConsumeQueue
from store.errors import CorruptFileError

log = logging.getLogger(__name__)


class ConsumeQueueStore:
    """Every (topic, queue_id) queue, created on first dispatch and loaded at start."""

    __slots__ = ("_queues", "file_size", "root")

    def __init__(self, root: Path, file_size: int) -> None:
        self.root = root
        self.file_size = file_size
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}

    def load_and_recover(self) -> None:
        if not self.root.exists():
            return
        for topic_dir in sorted(self.root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.name.isdigit():
                    raise CorruptFileError(f"consume queue dir {queue_dir}: not a queue id")
                queue = ConsumeQueue(self.root, topic_dir.name, int(queue_dir.name),
                                     self.file_size)
                queue.load_and_recover()
                self._queues[(queue.topic, queue.queue_id)] = queue

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(self.root, topic, queue_id, self.file_size)
            self._queues[(topic, queue_id)] = queue
        return queue

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def topics(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for topic, queue_id in self._queues:
            result.setdefault(topic, []).append(queue_id)
        return result

    def max_phy_offset(self) -> int:
        """RocketMQ's dispatchFromPhyOffset: the end of the furthest dispatched record."""
        return max((queue.max_phy_offset for queue in self._queues.values()), default=0)

    def last_dispatched_phy_offset(self) -> int:
        """The start (PHYSICALOFFSET) of the furthest dispatched record, 0 if none: RocketMQ
        5.5.0's checkpoint field logicsPhysicalOffset when read before a flush (§7)."""
        queue = max(self._queues.values(), key=lambda q: q.max_phy_offset, default=None)
        if queue is None or queue.max_phy_offset == 0:
            return 0
        phy_offset, _, _ = queue.unit_at(queue.max_offset - 1)
        return phy_offset

    def units_between(
        self, low: int, high: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(phyOffsets, sizes) of every queue's units with phyOffset in [low, high), sorted by
        phyOffset: the records recovery need not dispatch again, and where they lie."""
        parts = [queue.units_between(low, high) for queue in self._queues.values()]
        if not parts:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        phys = np.concatenate([p for p, _ in parts])
        sizes = np.concatenate([s for _, s in parts])
        order = np.argsort(phys, kind="stable")
        return phys[order], sizes[order]

    def truncate_by_phy(self, phy_offset: int) -> None:
        for queue in self._queues.values():
            if queue.max_phy_offset > phy_offset:
                queue.truncate_by_phy(phy_offset)

    def destroy(self, topic: str, queue_id: int) -> None:
        queue = self._queues.pop((topic, queue_id), None)
        if queue is not None:
            queue.destroy()

    def flush(self) -> None:
        for queue in list(self._queues.values()):
            queue.flush()

    def close(self) -> None:
        for queue in self._queues.values():
            queue.close()
