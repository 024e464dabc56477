"""ScheduleMessageService: delivers the delayed messages of `SCHEDULE_TOPIC_XXXX` when due.

One task per delay level reads its queue (`level - 1`) in order from the level's delay offset.
A unit's tagsCode is its deliver time (store/schedule.py); while the head unit is not due the
task sleeps until it is (at most `IDLE_WAIT_MS` when the queue is empty), and the due messages
are put again under their real topics and queues (`REAL_TOPIC`, `REAL_QID`, without `DELAY`)
by `put_time_up`, a batch of up to `UNITS_PER_READ` per call (one read, one store call, one
flush wait: no per-message await or coroutine). Levels are independent: a full level never
holds up another, and no level holds the event loop for more than one bounded batch.

`delayOffset.json` (`<storePathRootDir>/config`, Java's `DelayOffsetSerializeWrapper`:
`{"dataVersion":{..},"offsetTable":{1:12,3:0}}`) holds each level's next offset. It is written
every `flushDelayOffsetInterval` and at a clean stop.

Invariants:
- A message is never lost: a persisted offset only ever passes messages whose re-put is on disk
  (the persist takes the offsets, then flushes the commitlog past every re-put made so far, then
  writes the file). After a crash the levels resume from the last file: a message delivered
  after it was written is delivered again (at-least-once, as in Java).
- Per level, messages are delivered in queue order; an offset only moves forward, except when
  it is clamped into the queue's [min, max] after load (Java's `correctDelayOffset`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import numpy as np

from broker.config_file import ConfigFile, IntKeyMap, PrettyValue, dump_pretty
from broker.errors import ConfigFileError
from remoting.bodies import DataVersion
from remoting.errors import BodyDecodeError
from remoting.fastjson import JSONValue
from store.consume_queue import FILLER_SIZE
from store.errors import StoreError
from store.message_decoder import decode_record
from store.message_store import MessageStore
from store.record_layout import MessageRecord
from store.schedule import SCHEDULE_TOPIC, due_head, queue_id_of_level

log = logging.getLogger(__name__)

DELAY_OFFSET_FILE_NAME: Final = "delayOffset.json"
IDLE_WAIT_MS: Final = 100  # Java's DELAY_FOR_A_WHILE: an empty level looks again this often
RETRY_WAIT_MS: Final = 100  # after a failed re-put (store not writable)
# The most units one delivery step reads and re-puts before the loop runs other tasks: at a
# few microseconds per re-put, a step holds the loop for about a millisecond.
UNITS_PER_READ: Final = 128
FLUSH_WAIT_MS: Final = 5_000  # a persist gives up (keeps the old file) if no flush came by then

# Puts due records under their real topics, in order; returns how many it took (a prefix:
# put, or dropped as undeliverable). Fewer than all means the store refused the next one now.
PutTimeUp = Callable[[Sequence[MessageRecord]], Awaitable[int]]


def _read_offset_table(value: JSONValue, path: str) -> dict[int, int]:
    if not isinstance(value, dict):
        raise BodyDecodeError(f"{path} is not an object")
    table = value.get("offsetTable") or {}
    if not isinstance(table, dict):
        raise BodyDecodeError(f"{path}.offsetTable is not an object")
    offsets: dict[int, int] = {}
    for key, offset in table.items():
        if not key.lstrip("-").isdigit() or not isinstance(offset, int) or isinstance(offset, bool):
            raise BodyDecodeError(f"{path}.offsetTable[{key!r}]={offset!r} is not level: offset")
        offsets[int(key)] = offset
    return offsets


def _system_wall_ms() -> int:
    return time.time_ns() // 1_000_000


class ScheduleMessageService:
    """The delay levels' delivery tasks and their offsets file."""

    def __init__(
        self,
        *,
        store: MessageStore,
        delays_ms: tuple[int, ...],
        file: ConfigFile,
        put_time_up: PutTimeUp,
        flush_delay_offset_interval_ms: int,
        wall_ms: Callable[[], int] = _system_wall_ms,
    ) -> None:
        self._store = store
        self._delays_ms = delays_ms
        self._file = file
        self._put_time_up = put_time_up
        self._flush_interval_ms = flush_delay_offset_interval_ms
        self._wall_ms = wall_ms
        self.offset_table: dict[int, int] = {}
        self.data_version = DataVersion(timestamp=wall_ms())
        self.delivered = 0  # messages re-put since start (a counter for tests and metrics)

    @property
    def max_delay_level(self) -> int:
        return len(self._delays_ms)

    def load(self) -> None:
        """Read `delayOffset.json` (or its `.bak`) and clamp each offset into its queue.
        Blocking (startup). Raises ConfigFileError if both are unparsable."""
        value = self._file.load()
        if value is not None:
            try:
                self.offset_table = _read_offset_table(value, self._file.path.name)
            except BodyDecodeError as err:
                raise ConfigFileError(f"{self._file.path}: {err}") from err
        for level in range(1, self.max_delay_level + 1):
            queue = self._store.queue(SCHEDULE_TOPIC, queue_id_of_level(level))
            offset = self.offset_table.get(level, 0)
            if queue is not None:
                clamped = min(max(offset, queue.min_offset), queue.max_offset)
                if clamped != offset:
                    log.warning("delay offset corrected level=%d old=%d new=%d", level, offset,
                                clamped)
                    offset = clamped
            self.offset_table[level] = offset
        log.info("loaded delay offsets path=%s offsets=%s", self._file.path, self.offset_table)

    async def persist(self) -> dict[int, int] | None:
        """Write the offsets once every re-put they pass is flushed (module invariant);
        returns the offsets written, or None (file unchanged) if the flush did not get there
        in FLUSH_WAIT_MS."""
        snapshot = dict(self.offset_table)
        target = self._store.max_phy_offset  # every re-put behind `snapshot` ends below this
        if self._store.commitlog.flushed_where < target:
            try:
                async with asyncio.timeout(FLUSH_WAIT_MS / 1000):
                    await self._store.flush()
            except (TimeoutError, StoreError, OSError) as err:
                log.warning("delay offsets not persisted: commitlog flush failed error=%s", err)
                return None
            if self._store.commitlog.flushed_where < target:
                return None
        version = self.data_version
        self.data_version = DataVersion(
            state_version=version.state_version, timestamp=self._wall_ms(),
            counter=version.counter + 1,
        )

        def encode() -> PrettyValue:
            value: dict[str, PrettyValue] = {
                "dataVersion": self.data_version.to_json_value(),
                "offsetTable": IntKeyMap(snapshot),
            }
            return value

        await self._file.persist(encode)
        return snapshot

    async def replace_from_master(self, table: dict[int, int], version: DataVersion) -> None:
        """A slave takes its master's delay offsets and version (broker/slave_synchronize.py)
        and writes them at once. They may pass re-puts the slave has not replicated yet: a
        slave promoted then skips those (as Java's slave does)."""
        self.offset_table = dict(table)
        self.data_version = version

        def encode() -> PrettyValue:
            value: dict[str, PrettyValue] = {
                "dataVersion": version.to_json_value(),
                "offsetTable": IntKeyMap(dict(table)),
            }
            return value

        await self._file.persist(encode)

    def encode_json(self) -> str:
        """The offsets as GET_ALL_DELAY_OFFSET's body (Java's `DelayOffsetSerializeWrapper`,
        integer keys unquoted)."""
        value: dict[str, PrettyValue] = {
            "dataVersion": self.data_version.to_json_value(),
            "offsetTable": IntKeyMap(dict(self.offset_table)),
        }
        return dump_pretty(value, pretty=False)

    async def run(self) -> None:
        """Deliver every level and persist periodically, until cancelled."""
        async with asyncio.TaskGroup() as group:
            for level in range(1, self.max_delay_level + 1):
                group.create_task(self._deliver_level(level), name=f"schedule-level-{level}")
            group.create_task(self._persist_loop(), name="delay-offset-persist")

    async def _persist_loop(self) -> None:
        persisted: dict[int, int] | None = dict(self.offset_table)
        while True:
            await asyncio.sleep(self._flush_interval_ms / 1000)
            if self.offset_table != persisted:
                persisted = await self.persist() or persisted

    async def _deliver_level(self, level: int) -> None:
        while True:
            wait_ms = await self.deliver_due(level)
            await asyncio.sleep(wait_ms / 1000)

    async def deliver_due(self, level: int) -> int:
        """Deliver the due head of one level's queue; returns how long to wait (ms) before
        looking again: until the next unit is due (at most 10 x IDLE_WAIT_MS), or
        IDLE_WAIT_MS / RETRY_WAIT_MS.

        One step reads up to UNITS_PER_READ units, finds the due ones in one numpy pass,
        reads their records in one checked read and re-puts them in one `put_time_up` call;
        between steps the loop runs other tasks, so a long backlog is delivered in bounded
        pieces. The wait is measured after the step, not before it.
        """
        queue = self._store.queue(SCHEDULE_TOPIC, queue_id_of_level(level))
        if queue is None:
            return IDLE_WAIT_MS
        level_delay_ms = self._delays_ms[level - 1]
        offset = max(self.offset_table.get(level, 0), queue.min_offset)
        while offset < queue.max_offset:
            units = queue.units(offset, UNITS_PER_READ)
            if not len(units):
                return IDLE_WAIT_MS
            due, next_deliver_ms = due_head(
                units["tags_code"].astype(np.int64), now_ms=self._wall_ms(),
                level_delay_ms=level_delay_ms,
            )
            phys = units["phy_offset"][:due].astype(np.int64)
            sizes = units["size"][:due].astype(np.int64)
            del units
            if due:
                # Fillers and units below the log's start (expired) have nothing to put.
                readable = np.flatnonzero((sizes != FILLER_SIZE)
                                          & (phys >= self._store.min_phy_offset))
                records: list[MessageRecord] = []
                record_offsets: list[int] = []
                for queue_offset, record in zip(
                    (offset + readable).tolist(),
                    self._read_all(phys[readable].tolist(), sizes[readable].tolist()),
                    strict=True,
                ):
                    if record is not None:
                        records.append(record)
                        record_offsets.append(queue_offset)
                put = await self._put_time_up(records) if records else 0
                self.delivered += put
                if put < len(records):
                    self.offset_table[level] = record_offsets[put]
                    return RETRY_WAIT_MS
                offset += due
                self.offset_table[level] = offset
            if next_deliver_ms is not None:
                wait_ms = next_deliver_ms - self._wall_ms()
                if wait_ms > 0:
                    return min(wait_ms, IDLE_WAIT_MS * 10)
            await asyncio.sleep(0)  # a long due backlog must not hold up the event loop
        return IDLE_WAIT_MS

    def _read_all(self, phys: list[int], sizes: list[int]) -> list[MessageRecord | None]:
        """The records at `phys` / `sizes`, in order (one checked read); None for one that
        cannot be read (logged), which is then skipped."""
        if not phys:
            return []
        try:
            return [decode_record(data) for data in self._store.commitlog.read_records(phys, sizes)]
        except (IndexError, StoreError, ValueError):
            return [self._read(phy, size) for phy, size in zip(phys, sizes, strict=True)]

    def _read(self, phy: int, size: int) -> MessageRecord | None:
        try:
            (data,) = self._store.commitlog.read_records([phy], [size])
            return decode_record(data)
        except (IndexError, StoreError, ValueError) as err:
            log.warning("scheduled message unreadable, skipped phy_offset=%d size=%d error=%s",
                        phy, size, err)
            return None
