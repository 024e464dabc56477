"""Committed consumer offsets (`ConsumerOffsetManager`) and `config/consumerOffset.json`.

Offsets are kept per `"<topic>@<group>"` and queue id, as Java keys them. Commits (UPDATE_CONSUMER
_OFFSET and the COMMIT_OFFSET flag of pulls) only change memory; `run()` persists the table every
`flushConsumerOffsetInterval` (5 s) when something changed, and the node persists it once more at
shutdown, as Java does. The file has Java's shape (fastjson, integer keys unquoted):
`{"dataVersion":{..},"groupTopicMap":{"<group>":["<topic>",..]},"offsetTable":{"t@g":{0:12}}}`.

Invariants:
- `query_offset` returns exactly the last committed value (None if never committed); a commit
  lower than the stored one is accepted (Java logs it) since consumers may reset offsets.
- After a clean shutdown every acknowledged commit is in the file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from broker.config_file import ConfigFile, IntKeyMap, PrettyValue
from broker.errors import ConfigFileError
from remoting.bodies import DataVersion
from remoting.errors import BodyDecodeError
from remoting.fastjson import JSONValue, java_int

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


def offset_key(topic: str, group: str) -> str:
    """Java's `topic@group` table key."""
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def _read_offset_table(value: JSONValue, path: str) -> dict[str, dict[int, int]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BodyDecodeError(f"{path} is not an object")
    table: dict[str, dict[int, int]] = {}
    for key, queues in value.items():
        if not isinstance(queues, dict):
            raise BodyDecodeError(f"{path}[{key!r}] is not an object")
        offsets: dict[int, int] = {}
        for queue_text, offset in queues.items():
            queue_id = java_int(queue_text, bits=32)
            if queue_id is None:
                raise BodyDecodeError(f"{path}[{key!r}] key {queue_text!r} is not a queue id")
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise BodyDecodeError(f"{path}[{key!r}][{queue_id}]={offset!r} is not an offset")
            offsets[queue_id] = offset
        table[key] = offsets
    return table


def _read_file(value: JSONValue, path: str) -> tuple[dict[str, dict[int, int]], DataVersion]:
    if not isinstance(value, dict):
        raise BodyDecodeError(f"{path} is not an object")
    table = _read_offset_table(value.get("offsetTable"), f"{path}.offsetTable")
    version = DataVersion.from_json_value(value.get("dataVersion") or {}, f"{path}.dataVersion")
    return table, version


def _group_topic_map(table: Mapping[str, Mapping[int, int]]) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    for key in table:
        parts = key.split(TOPIC_GROUP_SEPARATOR)
        if len(parts) == 2:
            topic, group = parts
            topics = result.setdefault(group, [])
            if topic not in topics:
                topics.append(topic)
    return result


def _encode_file(table: Mapping[str, Mapping[int, int]], version: DataVersion) -> PrettyValue:
    group_topics: dict[str, PrettyValue] = {
        group: list[PrettyValue](topics) for group, topics in _group_topic_map(table).items()
    }
    offsets: dict[str, PrettyValue] = {
        key: IntKeyMap(dict(queues)) for key, queues in table.items()
    }
    value: dict[str, PrettyValue] = {
        "dataVersion": version.to_json_value(),
        "groupTopicMap": group_topics,
        "offsetTable": offsets,
    }
    return value


class ConsumerOffsetManager:
    """The committed offsets of one broker and their file."""

    def __init__(
        self, file: ConfigFile, *, flush_interval_ms: int, wall_ms: Callable[[], int]
    ) -> None:
        self._file = file
        self._flush_interval_ms = flush_interval_ms
        self._wall_ms = wall_ms
        self._offset_table: dict[str, dict[int, int]] = {}
        self._dirty = False
        self.data_version = DataVersion(timestamp=wall_ms())

    def load(self) -> None:
        """Read `consumerOffset.json` (or its `.bak`). Blocking (startup).

        Raises `ConfigFileError` if the file and its `.bak` are both unparsable.
        """
        value = self._file.load()
        if value is None:
            return
        try:
            self._offset_table, self.data_version = _read_file(value, self._file.path.name)
        except BodyDecodeError as err:
            raise ConfigFileError(f"{self._file.path}: {err}") from err
        log.info("loaded consumer offsets path=%s keys=%d", self._file.path,
                 len(self._offset_table))

    @property
    def offset_table(self) -> Mapping[str, Mapping[int, int]]:
        return self._offset_table

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Remember `offset` as the group's committed offset of the queue (memory only).

        Copy on write: a key's queue map is replaced, never changed, so a snapshot is a shallow
        copy of the outer map (`persist` encodes it in a worker thread while commits go on).
        """
        key = offset_key(topic, group)
        queues = self._offset_table.get(key)
        previous = None if queues is None else queues.get(queue_id)
        if previous == offset:
            return
        self._offset_table[key] = {**queues, queue_id: offset} if queues else {queue_id: offset}
        self._dirty = True
        if previous is not None and offset < previous:
            log.debug("consumer offset moved back key=%s queue_id=%d old=%d new=%d", key,
                      queue_id, previous, offset)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, or None if the group never committed one for this queue."""
        queues = self._offset_table.get(offset_key(topic, group))
        return None if queues is None else queues.get(queue_id)

    def group_topic_map(self) -> dict[str, list[str]]:
        """Java's `getGroupTopicMap()` (written to the file as `groupTopicMap`)."""
        return _group_topic_map(self._offset_table)

    def encode(self) -> PrettyValue:
        """`consumerOffset.json`: dataVersion, groupTopicMap, offsetTable."""
        return _encode_file(self._offset_table, self.data_version)

    def snapshot(self) -> Callable[[], PrettyValue]:
        """The table as it is now, to encode later in any thread: a shallow copy on the loop
        (O(keys) at C speed), the encoding (O(keys x queues) in Python) left for later."""
        table, version = dict(self._offset_table), self.data_version
        return lambda: _encode_file(table, version)

    def encode_json_value(self) -> JSONValue:
        """The table as GET_ALL_CONSUMER_OFFSET's body value (quoted integer keys)."""
        return {
            "dataVersion": self.data_version.to_json_value(),
            "offsetTable": {
                key: {str(queue_id): offset for queue_id, offset in queues.items()}
                for key, queues in self._offset_table.items()
            },
        }

    async def replace_from_master(self, table: dict[str, dict[int, int]],
                                  version: DataVersion) -> None:
        """A slave takes the offsets merged from its master's (broker/slave_synchronize.py)
        and the master's version, and persists them at once."""
        self._offset_table = table
        self.data_version = version
        self._dirty = False
        await self._file.persist(self.encode)

    async def persist(self) -> None:
        """Write the table now (also when unchanged)."""
        if self._dirty:
            version = self.data_version
            self.data_version = DataVersion(
                state_version=version.state_version, timestamp=self._wall_ms(),
                counter=version.counter + 1,
            )
        self._dirty = False
        await self._file.persist_snapshot(self.snapshot)

    async def run(self) -> None:
        """Persist every `flush_interval_ms` when offsets changed, until cancelled."""
        while True:
            await asyncio.sleep(self._flush_interval_ms / 1000)
            if self._dirty:
                await self.persist()
