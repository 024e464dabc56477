"""Long polling: pulls that found nothing wait here until messages arrive or their deadline.

RocketMQ's PullRequestHoldService. A pull with the SUSPEND flag that finds no new message
(PULL_NOT_FOUND) is parked on its queue instead of answered. It is woken when:
- a message arrives on that queue beyond the pull's offset and passes its tag filter
  (`notify_message_arriving`, called by the send path right after the append), or
- the periodic check (`run()`, every 5 s with long polling, Java's interval) sees the queue's
  max offset beyond the pull's offset (a safety net for messages dispatched by other paths), or
- its deadline passes (the waiter's own timeout), or the broker shuts down (`close`).
A woken pull is executed once more without suspension, which answers it either way.

`ParkedPulls` is the pure core (which waiters an arrival wakes); `PullHold` is the shell that owns
the futures and the periodic check.

Invariants:
- A parked pull is woken at most once; its future is removed from the table when it is woken
  or when its waiter gives up (deadline, cancellation).
- No more than `parked_max` pulls wait at once; beyond that a pull is answered at once (the
  caller sees `None` from `park` and answers PULL_NOT_FOUND), so memory stays bounded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from store.tag_filter import TagFilter

log = logging.getLogger(__name__)

CHECK_INTERVAL_LONG_POLLING_MS: Final = 5_000
CHECK_INTERVAL_SHORT_POLLING_MS: Final = 1_000
PARKED_MAX_DEFAULT: Final = 100_000


@dataclass(eq=False, slots=True)
class ParkedPull:
    """One parked pull: it wants messages of its queue from `offset` on that pass `tag_filter`."""

    topic: str
    queue_id: int
    offset: int
    tag_filter: TagFilter
    woken: bool = field(default=False)


class ParkedPulls:
    """Parked pulls per (topic, queue id). Pure: tells which to wake, never waits."""

    def __init__(self) -> None:
        self._by_queue: dict[tuple[str, int], list[ParkedPull]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, pull: ParkedPull) -> None:
        self._by_queue.setdefault((pull.topic, pull.queue_id), []).append(pull)
        self._count += 1

    def remove(self, pull: ParkedPull) -> None:
        """Forget `pull` (woken or given up); absent is fine."""
        key = (pull.topic, pull.queue_id)
        pulls = self._by_queue.get(key)
        if pulls is None:
            return
        try:
            pulls.remove(pull)
        except ValueError:
            return
        self._count -= 1
        if not pulls:
            del self._by_queue[key]

    def arrivals(self, topic: str, queue_id: int, max_offset: int,
                 tags_code: int | None) -> list[ParkedPull]:
        """The pulls a message arrival wakes: the queue now ends at `max_offset` (exclusive)
        beyond their offset, and `tags_code` (None: unknown) passes their filter. They are
        marked woken and removed."""
        pulls = self._by_queue.get((topic, queue_id))
        if not pulls:
            return []
        woken = [
            pull for pull in pulls
            if max_offset > pull.offset and pull.tag_filter.matches(tags_code)
        ]
        for pull in woken:
            pull.woken = True
            self.remove(pull)
        return woken

    def queues(self) -> list[tuple[str, int]]:
        return list(self._by_queue)

    def all(self) -> list[ParkedPull]:
        return [pull for pulls in self._by_queue.values() for pull in pulls]


class PullHold:
    """Parks pulls and wakes them (see the module docstring)."""

    def __init__(
        self,
        *,
        max_offset: Callable[[str, int], int],
        check_interval_ms: int = CHECK_INTERVAL_LONG_POLLING_MS,
        parked_max: int = PARKED_MAX_DEFAULT,
    ) -> None:
        self._max_offset = max_offset
        self._check_interval_ms = check_interval_ms
        self._parked_max = parked_max
        self._parked = ParkedPulls()
        self._futures: dict[ParkedPull, asyncio.Future[None]] = {}
        self._closed = False

    def __len__(self) -> int:
        return len(self._parked)

    async def park(self, topic: str, queue_id: int, offset: int, tag_filter: TagFilter, *,
                   timeout_ms: int) -> bool | None:
        """Wait until woken (True) or `timeout_ms` passes (False). None: not parked, the hold
        is full (`parked_max`) or closed."""
        if self._closed:
            return None
        if len(self._parked) >= self._parked_max:
            log.warning("pull hold full, answering at once parked=%d", len(self._parked))
            return None
        pull = ParkedPull(topic, queue_id, offset, tag_filter)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parked.add(pull)
        self._futures[pull] = future
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await future
        except TimeoutError:
            return False
        finally:
            self._parked.remove(pull)
            self._futures.pop(pull, None)
        return True

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int,
                                tags_code: int | None = None) -> None:
        """A message was appended to (topic, queue_id), which now ends at `max_offset`."""
        for pull in self._parked.arrivals(topic, queue_id, max_offset, tags_code):
            self._wake(pull)

    def close(self) -> None:
        """Shutdown: wake every parked pull (each is answered once more, without waiting) and
        park none from now on."""
        self._closed = True
        for pull in self._parked.all():
            self._parked.remove(pull)
            self._wake(pull)

    def _wake(self, pull: ParkedPull) -> None:
        future = self._futures.pop(pull, None)
        if future is not None and not future.done():
            future.set_result(None)

    def check_all(self) -> None:
        """Wake pulls whose queue has grown beyond their offset (tags unknown: the re-executed
        pull filters)."""
        for topic, queue_id in self._parked.queues():
            self.notify_message_arriving(topic, queue_id, self._max_offset(topic, queue_id))

    async def run(self) -> None:
        """The periodic check, until cancelled."""
        while True:
            await asyncio.sleep(self._check_interval_ms / 1000)
            self.check_all()
