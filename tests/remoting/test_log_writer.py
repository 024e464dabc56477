"""remoting/log_writer.py: records written by a thread of their own; a full queue drops, counted."""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from remoting.log_writer import LogWriter, process_log


class BlockedStream(io.StringIO):
    """A log reader that stops reading: each write waits until `resume` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.resume = threading.Event()
        self.writing = threading.Event()

    def write(self, text: str) -> int:
        self.writing.set()
        assert self.resume.wait(30), "never resumed"
        return super().write(text)


@pytest.fixture
def logger() -> logging.Logger:
    logger = logging.getLogger("test_log_writer")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


@contextmanager
def stuck_writer(logger: logging.Logger, queue_records: int,
                 first: str) -> Iterator[tuple[BlockedStream, LogWriter]]:
    """A `LogWriter` of `logger` whose thread is stuck writing `first` to a reader that stopped
    reading; the reader resumes (at the latest) on the way out."""
    stream = BlockedStream()
    writer = LogWriter(stream, queue_records=queue_records)
    logger.addHandler(writer.handler)
    try:
        logger.info(first)
        assert stream.writing.wait(10)  # the writer thread is stuck in its write
        yield stream, writer
    finally:
        logger.removeHandler(writer.handler)
        stream.resume.set()


def test_a_reader_that_stops_reading_blocks_no_caller_and_drops_are_counted(
    logger: logging.Logger,
) -> None:
    with stuck_writer(logger, 5, "record 0") as (stream, writer):

        def flood() -> None:
            for index in range(1, 21):
                logger.info("record %d", index)

        caller = threading.Thread(target=flood)
        caller.start()
        caller.join(10)
        assert not caller.is_alive(), "a log call waited for the reader"
        assert writer.dropped == 15  # 5 queued behind the write in progress
        stream.resume.set()
        writer.stop()
    lines = stream.getvalue().splitlines()
    assert [line.split(" INFO test_log_writer ")[-1] for line in lines if " INFO " in line] == \
        [f"record {index}" for index in range(6)]
    dropped = [line for line in lines if " WARNING " in line]
    assert len(dropped) == 1
    assert dropped[0].endswith("15 log records dropped: the log's reader did not keep up")
    assert lines.index(dropped[0]) == 1  # reported at the writer's first chance


def test_stop_does_not_wait_for_ever_on_a_reader_that_never_reads(
    logger: logging.Logger,
) -> None:
    with stuck_writer(logger, 1, "stuck") as (_, writer):
        logger.info("queued")  # the queue is full now: stop's own item cannot go in
        stopper = threading.Thread(target=writer.stop)
        stopper.start()
        stopper.join(30)
        assert not stopper.is_alive()


def test_process_log_writes_through_the_thread_and_restores_the_root_logger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.WARNING)
    stream = io.StringIO()
    with process_log("INFO", stream) as writer:
        assert writer is not None
        logging.getLogger("pyrmq.test").info("hello %s", "log")
        try:
            int("boom")
        except ValueError:
            logging.getLogger("pyrmq.test").exception("failed")
    assert root.handlers == []
    assert root.level == logging.WARNING
    out = stream.getvalue()
    assert " INFO pyrmq.test hello log\n" in out
    assert " ERROR pyrmq.test failed\nTraceback" in out
    assert "ValueError: invalid literal for int() with base 10: 'boom'" in out


def test_process_log_leaves_a_configured_root_logger_alone() -> None:
    root = logging.getLogger()
    handlers = list(root.handlers)
    assert handlers  # pytest's log capture
    with process_log("DEBUG", io.StringIO()) as writer:
        assert writer is None
        assert root.handlers == handlers
