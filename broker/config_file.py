"""One RocketMQ metadata file under `<storePathRootDir>/config`: load with `.bak` fallback, and
replace atomically (RocketMQ's `ConfigManager`).

RocketMQ keeps `config/topics.json`, `config/subscriptionGroup.json` and
`config/consumerOffset.json` as fastjson text ("pretty format": tab indentation, integer map keys
unquoted). `ConfigFile` reads what Java writes and writes what Java reads:
- `load()` parses the file; if it is missing, empty or unparsable it tries `<file>.bak` (as
  Java does); both present and unparsable is a `ConfigFileError` (a broker must not start with an
  empty topic table and then overwrite the good `.bak` on its first persist);
- `persist(value)` takes a snapshot of the tables on the event loop (fresh containers), then
  turns it into text and writes it in a worker thread with
  `store.atomic_file.atomic_replace(keep_bak=True)`: `.bak` first, then the new content, each
  fsynced and renamed, then the directory fsynced.

Invariants:
- Writes of one file never overlap (an `asyncio.Lock`, held until the worker thread is done,
  even when the caller is cancelled); the last `persist` writes the last state.
- The file on disk always holds a whole version (old or new), and `.bak` the one before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeAlias

from broker.errors import ConfigFileError
from remoting.errors import BodyDecodeError
from remoting.fastjson import JSONValue, parse_fastjson, quote_fastjson
from store.atomic_file import atomic_replace, bak_path_of

log = logging.getLogger(__name__)

CONFIG_DIR_NAME: Final = "config"
TOPICS_FILE_NAME: Final = "topics.json"
SUBSCRIPTION_GROUP_FILE_NAME: Final = "subscriptionGroup.json"
CONSUMER_OFFSET_FILE_NAME: Final = "consumerOffset.json"


@dataclass(frozen=True, slots=True)
class IntKeyMap:
    """A Java map with Integer/Long keys: fastjson writes it inline with unquoted keys."""

    entries: dict[int, int]


PrettyValue: TypeAlias = "JSONValue | IntKeyMap | dict[str, PrettyValue] | list[PrettyValue]"


def dump_pretty(value: PrettyValue, *, pretty: bool = True) -> str:
    """`value` as fastjson writes it. `pretty` (PrettyFormat, what config files hold): objects
    one property per line, indented by tabs; otherwise compact (what bodies hold).
    `IntKeyMap`s are inline with unquoted keys (`{0:12,1:7}`) either way; strings are escaped
    as fastjson escapes them."""
    parts: list[str] = []
    _dump(value, parts, 0 if pretty else None)
    return "".join(parts)


def _dump(value: PrettyValue, parts: list[str], depth: int | None) -> None:
    if isinstance(value, IntKeyMap):
        inner = ",".join(f"{key}:{item}" for key, item in value.entries.items())
        parts.append(f"{{{inner}}}")
    elif isinstance(value, dict):
        if not value:
            parts.append("{}")
            return
        parts.append("{")
        inner_depth = None if depth is None else depth + 1
        for index, (key, item) in enumerate(value.items()):
            parts.append("," if index else "")
            if inner_depth is not None:
                parts.append("\n" + "\t" * inner_depth)
            parts.append(quote_fastjson(key) + ":")
            _dump(item, parts, inner_depth)
        if depth is not None:
            parts.append("\n" + "\t" * depth)
        parts.append("}")
    elif isinstance(value, list):
        parts.append("[")
        for index, item in enumerate(value):
            parts.append("," if index else "")
            _dump(item, parts, depth)
        parts.append("]")
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(quote_fastjson(value))
    else:
        parts.append(str(value))


class ConfigFile:
    """`<root>/config/<name>` and its `.bak`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    def load(self) -> JSONValue | None:
        """The parsed content, from the file or (missing, empty, unparsable) its `.bak`.

        None when neither exists (first start). Raises `ConfigFileError` when the content that
        exists cannot be parsed at all. Blocking (startup only).
        """
        problems: list[str] = []
        for candidate in (self.path, bak_path_of(self.path)):
            try:
                text = candidate.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as err:
                problems.append(f"{candidate}: {err}")
                continue
            if not text.strip():
                problems.append(f"{candidate}: empty")
                continue
            try:
                value = parse_fastjson(text)
            except BodyDecodeError as err:
                problems.append(f"{candidate}: {err}")
                continue
            if candidate != self.path:
                log.warning("config file unusable, loaded its .bak path=%s problems=%s",
                            self.path, problems)
            return value
        if problems:
            raise ConfigFileError("; ".join(problems))
        return None

    def write_blocking(self, data: bytes) -> None:
        """Replace the file with `data` (keeping `.bak`); raises the store's I/O errors."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_replace(self.path, data, keep_bak=True)

    def _encode_dump_and_write(self, encode: Callable[[], PrettyValue]) -> None:
        self.write_blocking(dump_pretty(encode()).encode("utf-8"))

    async def persist(self, encode: Callable[[], PrettyValue]) -> None:
        """Encode now (on the loop: `encode` returns fresh containers with immutable leaves),
        dump and write in a worker thread; one write at a time."""
        value = encode()
        await self.persist_snapshot(lambda: lambda: value)

    async def persist_snapshot(self, snapshot: Callable[[], Callable[[], PrettyValue]]) -> None:
        """Take `snapshot()` now, on the loop; run the encoder it returns, the dump and the write
        in a worker thread (they grow with the table: consumer offsets are groups x queues).
        One write at a time.

        Cancelling the caller does not cut the write short: the lock is held until the worker
        thread has finished, so two writes of this file never run at once.
        """
        async with self._lock:
            encode = snapshot()
            write = asyncio.get_running_loop().run_in_executor(
                None, self._encode_dump_and_write, encode
            )
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                await asyncio.wait([write])
                if write.exception() is not None:
                    log.warning("config write failed during cancellation path=%s error=%s",
                                self.path, write.exception())
                raise
