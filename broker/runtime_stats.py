"""Messages per second over the last 10, 60 and 600 s, as GET_BROKER_RUNTIME_INFO reports them
(`StoreStatsService.getPutTps` and friends: `putTps`, `getTransferredTps`, ...).

`TpsWindows` is the pure core: it keeps one snapshot of a counter per sample (one per second, at
most 601) and answers "`tps10` `tps60` `tps600`" as Java prints them (a window with too few
samples yet is an empty string, as in Java). `run()` is the shell that samples every second.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Final

WINDOWS_S: Final = (10, 60, 600)
SAMPLE_INTERVAL_S: Final = 1.0


class TpsWindows:
    """Snapshots of one monotonically growing counter, and its rates over Java's windows."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque(maxlen=WINDOWS_S[-1] + 1)

    def sample(self, now_s: float, count: int) -> None:
        self._samples.append((now_s, count))

    def tps(self, window: int) -> str:
        """The rate over the last `window` samples (Java's `CallSnapshot.getTPS`), or ""."""
        if len(self._samples) <= window:
            return ""
        before_s, before = self._samples[-(window + 1)]
        last_s, last = self._samples[-1]
        elapsed = last_s - before_s
        return str(0.0 if elapsed <= 0 else (last - before) / elapsed)

    def text(self) -> str:
        """`"<10 s> <60 s> <600 s>"`, Java's three-window format."""
        return " ".join(self.tps(window) for window in WINDOWS_S)


class RuntimeStats:
    """Put and get TPS of this broker, sampled from counters every second."""

    def __init__(self, *, put_count: Callable[[], int], get_count: Callable[[], int]) -> None:
        self._put_count = put_count
        self._get_count = get_count
        self.put = TpsWindows()
        self.get = TpsWindows()

    def sample(self, now_s: float) -> None:
        self.put.sample(now_s, self._put_count())
        self.get.sample(now_s, self._get_count())

    async def run(self) -> None:
        """Sample every second, until cancelled."""
        while True:
            self.sample(time.monotonic())
            await asyncio.sleep(SAMPLE_INTERVAL_S)
