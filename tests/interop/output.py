"""The lines that the interop client programs print, parsed; and the bodies Produce sends.

    SENT msgId queueId queueOffset key sendStatus          Produce: acknowledged by the broker
    ONEWAY msgId key                                       Produce: oneway, never acknowledged
    RECEIVED key reconsumeTimes queueId queueOffset bodyBytes bodyCrc32 tags
    REJECTED key reconsumeTimes                            PushConsume --fail-every: RECONSUME_LATER
    DONE distinctKeys | TIMEOUT distinctKeys expected      consumers, last line

Keys and tags never contain spaces ("-" stands for none). Lines of any other shape are ignored:
RocketMQ itself prints a few lines to stdout.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sent:
    """One message from Produce. Oneway messages have no queue, offset or status (None)."""

    msg_id: str
    queue_id: int | None
    queue_offset: int | None
    key: str
    send_status: str | None

    @property
    def acknowledged(self) -> bool:
        return self.send_status is not None


@dataclass(frozen=True, slots=True)
class Received:
    """One successful consumption. For a redelivery, queue_id/queue_offset are the retry topic's."""

    key: str
    reconsume_times: int
    queue_id: int
    queue_offset: int
    body_bytes: int
    body_crc32: int
    tags: str | None


@dataclass(frozen=True, slots=True)
class Rejected:
    """A delivery that PushConsume answered with RECONSUME_LATER on purpose (--fail-every)."""

    key: str
    reconsume_times: int


@dataclass(frozen=True, slots=True)
class ProduceResult:
    sent: tuple[Sent, ...]
    returncode: int
    stdout: str
    stderr: str

    def keys(self, *, acknowledged_only: bool = False) -> list[str]:
        return [s.key for s in self.sent if s.acknowledged or not acknowledged_only]


@dataclass(frozen=True, slots=True)
class ConsumeResult:
    received: tuple[Received, ...]
    rejected: tuple[Rejected, ...]
    done: bool  # DONE printed: the expected number of distinct keys arrived in time
    returncode: int
    stdout: str
    stderr: str

    def key_counts(self) -> Counter[str]:
        """How often each key was consumed successfully (duplicates count more than once)."""
        return Counter(r.key for r in self.received)


def parse_produce_output(stdout: str) -> tuple[Sent, ...]:
    """SENT and ONEWAY lines, in printed order; other lines are ignored."""
    sent = []
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) == 6 and fields[0] == "SENT":
            _, msg_id, queue_id, queue_offset, key, status = fields
            sent.append(Sent(msg_id, int(queue_id), int(queue_offset), key, status))
        elif len(fields) == 3 and fields[0] == "ONEWAY":
            sent.append(Sent(fields[1], None, None, fields[2], None))
    return tuple(sent)


def parse_consume_output(stdout: str, *, returncode: int = 0, stderr: str = "") -> ConsumeResult:
    """RECEIVED, REJECTED and DONE lines of PushConsume or LitePull; other lines are ignored."""
    received = []
    rejected = []
    done = False
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) == 8 and fields[0] == "RECEIVED":
            _, key, reconsume, queue_id, offset, size, crc, tags = fields
            received.append(
                Received(
                    key=key,
                    reconsume_times=int(reconsume),
                    queue_id=int(queue_id),
                    queue_offset=int(offset),
                    body_bytes=int(size),
                    body_crc32=int(crc),
                    tags=None if tags == "-" else tags,
                )
            )
        elif len(fields) == 3 and fields[0] == "REJECTED":
            rejected.append(Rejected(fields[1], int(fields[2])))
        elif len(fields) == 2 and fields[0] == "DONE":
            done = True
    return ConsumeResult(tuple(received), tuple(rejected), done, returncode, stdout, stderr)


def expected_body(key: str, body_bytes: int) -> bytes:
    """The body Produce sends for `key`: "key|" repeated and cut to body_bytes (Common.body)."""
    unit = (key + "|").encode()
    return (unit * (body_bytes // len(unit) + 1))[:body_bytes]


def expected_body_crc32(key: str, body_bytes: int) -> int:
    return zlib.crc32(expected_body(key, body_bytes))


def keys_of(results: Iterable[ProduceResult], *, acknowledged_only: bool = False) -> list[str]:
    """Every key of several Produce runs, in order."""
    return [key for result in results for key in result.keys(acknowledged_only=acknowledged_only)]
