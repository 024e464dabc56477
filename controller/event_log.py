"""The controller's event log: an append-only file of events, fsynced before any answer.

Record layout (big-endian), one per event:

    0         4        8
    | length  | crc32  | payload (length bytes: the event's JSON, `events.encode_event`) |
    | u32     | u32    |

`crc32` covers the payload. `length` is at most `RECORD_BYTES_MAX`.

Reading (`read_records`, a pure function of the file's bytes) returns the payloads in order. A
last record that is cut short or fails its CRC (or a tail of zero bytes) raises
`TruncatedLastRecordError` carrying where the good records end: only a write that a crash
interrupted before its fsync returned can leave one, and such a record was never acknowledged.
`EventLog.open` drops it (truncates the file there, fsyncs) with one WARNING. A damaged record
followed by more bytes, or a length outside 1..RECORD_BYTES_MAX, raises `EventLogCorruptError`:
the log is not trusted and the controller does not start.

Invariants:
- `append` returns only after the record and the file's size are on disk (`os.fsync`), so a
  request answered after `append` survives kill -9 and power loss.
- The file only grows, except for the one-time cut of an unacknowledged torn tail at open, and
  the cut of a failed append's partial record.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Final

from controller.errors import EventLogCorruptError, EventLogError, TruncatedLastRecordError
from controller.events import Event, decode_event, encode_event

log = logging.getLogger(__name__)

EVENT_LOG_FILE_NAME: Final = "events.log"
RECORD_HEADER: Final = struct.Struct(">II")
RECORD_BYTES_MAX: Final = 1024 * 1024
"""An event is a few hundred bytes; anything above a MiB is damage, not an event."""


def encode_record(payload: bytes) -> bytes:
    if not 0 < len(payload) <= RECORD_BYTES_MAX:
        raise EventLogError(f"event of {len(payload)} bytes outside 1..{RECORD_BYTES_MAX}")
    return RECORD_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def read_records(data: bytes, *, source: str) -> list[bytes]:
    """Every record payload of a log's bytes, in order.

    Raises TruncatedLastRecordError (with `valid_bytes`) when only the last record is damaged,
    EventLogCorruptError when a damaged record has more bytes after it.
    """
    payloads: list[bytes] = []
    pos = 0
    while pos < len(data):
        rest = len(data) - pos
        torn: bool
        if rest < RECORD_HEADER.size:
            problem, torn = f"{rest} bytes, shorter than a record header", True
        else:
            length, crc = RECORD_HEADER.unpack_from(data, pos)
            end = pos + RECORD_HEADER.size + length
            if not 0 < length <= RECORD_BYTES_MAX:
                # A torn append never writes a wrong length: this is damage (or a zeroed tail).
                problem, torn = f"length {length} outside 1..{RECORD_BYTES_MAX}", False
            elif end > len(data):
                problem, torn = f"length {length} runs past the end of the file", True
            else:
                payload = data[pos + RECORD_HEADER.size : end]
                found = zlib.crc32(payload)
                if found == crc:
                    payloads.append(payload)
                    pos = end
                    continue
                problem, torn = f"crc32 {found:#010x} != {crc:#010x}", end == len(data)
        if not data[pos:].strip(b"\0"):
            torn = True  # a tail of zeros: the file grew but the append never landed
        where = f"event log {source}: record {len(payloads)} at byte {pos}: {problem}"
        if torn:
            raise TruncatedLastRecordError(where, valid_bytes=pos)
        raise EventLogCorruptError(f"{where}; {rest} bytes from there on")
    return payloads


class EventLog:
    """One open event log file; `open()` it (which replays it), `append()`, `close()`."""

    def __init__(self, path: Path, fd: int, size: int) -> None:
        self.path = path
        self._fd = fd
        self._size = size

    @classmethod
    def open(cls, directory: Path) -> tuple[EventLog, list[Event]]:
        """Open (creating it) `directory/events.log` and return it with its events in order.

        Blocking (reads and fsyncs): call it before serving, or in a thread.
        A torn last record is dropped (WARNING); other damage raises EventLogCorruptError,
        an undecodable event EventDecodeError.
        """
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / EVENT_LOG_FILE_NAME
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if created:
                dir_fd = os.open(directory, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            data = path.read_bytes()
            try:
                payloads = read_records(data, source=str(path))
            except TruncatedLastRecordError as err:
                log.warning(
                    "event log torn last record dropped path=%s valid_bytes=%d file_bytes=%d "
                    "reason=%s",
                    path,
                    err.valid_bytes,
                    len(data),
                    err,
                )
                os.ftruncate(fd, err.valid_bytes)
                os.fsync(fd)
                data = data[: err.valid_bytes]
                payloads = read_records(data, source=str(path))
            events = [decode_event(payload) for payload in payloads]
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, len(data)), events

    def append_sync(self, events: tuple[Event, ...]) -> None:
        """Write the events as one write and fsync; blocking."""
        data = b"".join(encode_record(encode_event(event)) for event in events)
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise EventLogError(  # noqa: TRY301 - the cut below must cover it too
                    f"event log {self.path}: short write {written} of {len(data)}"
                )
            os.fsync(self._fd)
        except BaseException:
            # Cut a partial record off (disk full, I/O error) so later appends stay readable.
            os.ftruncate(self._fd, self._size)
            raise
        self._size += len(data)

    async def append(self, events: tuple[Event, ...]) -> None:
        """Make `events` durable (write + fsync in a thread); returns once they are on disk."""
        if events:
            await asyncio.to_thread(self.append_sync, events)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
