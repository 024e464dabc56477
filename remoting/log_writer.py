"""The log of a server process (the broker, the controller): records are written to stderr by a
thread of their own, never by the thread that logs them.

A write to stderr blocks when its reader does not keep up: a pipe whose reader stopped, a
terminal paused, a slow log collector. A handler writing on the event loop then stops the whole
server; a broker logging to an unread pipe answered nothing once 64 KiB of warnings had filled
it (418 malformed connections, 2026-11-28). Here the logging thread only puts the record on a
bounded queue: when the queue is full the record is dropped and counted, and the writer thread
reports the count once its reader takes lines again (RocketMQ's broker logs through logback's
asynchronous appenders for the same reason).
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from logging.handlers import QueueHandler
from typing import Final, TextIO

# Records waiting for the writer thread; past this many, new ones are dropped (and counted).
QUEUE_RECORDS: Final = 10_000
# At exit, how long the last records may take to reach a reader that does not read.
STOP_TIMEOUT_S: Final = 2.0
FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"

log = logging.getLogger(__name__)


class _Stop:
    """The writer thread's last item."""


class LogWriter:
    """The queue, the handler that fills it and the thread that empties it into `stream`."""

    def __init__(self, stream: TextIO, *, queue_records: int = QUEUE_RECORDS) -> None:
        self._queue: queue.Queue[logging.LogRecord | _Stop] = queue.Queue(queue_records)
        # Not a StreamHandler: at exit `logging.shutdown` flushes every handler under its lock,
        # which a write stuck in this thread holds: the process would never exit.
        self._stream = stream
        self._formatter = logging.Formatter(FORMAT)
        self._lock = threading.Lock()
        self._dropped = 0
        self.handler = _DroppingQueueHandler(self._queue, on_drop=self._drop)
        self._thread = threading.Thread(target=self._run, name="pyrmq-log", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Records dropped so far because the queue was full."""
        return self._dropped

    def _drop(self) -> None:
        with self._lock:
            self._dropped += 1

    def _run(self) -> None:
        reported = 0
        while not isinstance(record := self._queue.get(), _Stop):
            dropped = self._dropped
            if dropped > reported:
                self._write(log.makeRecord(
                    log.name, logging.WARNING, __file__, 0,
                    "%d log records dropped: the log's reader did not keep up",
                    (dropped - reported,), None))
                reported = dropped
            self._write(record)

    def _write(self, record: logging.LogRecord) -> None:
        try:
            self._stream.write(self._formatter.format(record) + "\n")
            self._stream.flush()
        except (OSError, ValueError):  # a closed reader (EPIPE) or stream: the line is lost
            pass

    def stop(self) -> None:
        """Write what is queued, for up to STOP_TIMEOUT_S (a reader that does not read must
        not keep the process from exiting)."""
        deadline = time.monotonic() + STOP_TIMEOUT_S
        try:
            self._queue.put(_Stop(), timeout=STOP_TIMEOUT_S)
        except queue.Full:
            return
        self._thread.join(max(0.0, deadline - time.monotonic()))


class _DroppingQueueHandler(QueueHandler):
    """`QueueHandler` (the record's message and traceback made text here, in the logging
    thread) that drops a record the full queue cannot take."""

    def __init__(self, records: queue.Queue[logging.LogRecord | _Stop], *,
                 on_drop: Callable[[], None]) -> None:
        super().__init__(records)
        self._on_drop = on_drop

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self._on_drop()


@contextmanager
def process_log(level: str | int, stream: TextIO | None = None) -> Iterator[LogWriter | None]:
    """The process's logging for the block: the root logger at `level`, its records written to
    `stream` (stderr) by a `LogWriter`, what is queued written out at the end. Like
    `logging.basicConfig`, it does nothing (and yields None) when the root logger already has
    handlers (a test's log capture)."""
    root = logging.getLogger()
    if root.handlers:
        yield None
        return
    writer = LogWriter(sys.stderr if stream is None else stream)
    level_before = root.level
    root.setLevel(level)
    root.addHandler(writer.handler)
    try:
        yield writer
    finally:
        root.removeHandler(writer.handler)
        root.setLevel(level_before)
        writer.stop()
