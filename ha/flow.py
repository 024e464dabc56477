"""FlowMeter: bytes per second over the last whole second (RocketMQ's HA FlowMonitor), the
`transferredByteInSecond` of GET_BROKER_HA_STATUS.

A pure counter: the shell adds bytes as it moves them and reads `per_second(now_ms)`; the rate
is that of the last complete one-second window (0 before one has passed, and for a window in
which nothing moved).
"""

from __future__ import annotations

WINDOW_MS = 1000


class FlowMeter:
    __slots__ = ("_rate", "_window_bytes", "_window_start_ms")

    def __init__(self, now_ms: int) -> None:
        self._window_start_ms = now_ms
        self._window_bytes = 0
        self._rate = 0

    def _roll(self, now_ms: int) -> None:
        elapsed = now_ms - self._window_start_ms
        if elapsed < WINDOW_MS:
            return
        # The window just closed gives the rate; windows after it with nothing moved give 0.
        self._rate = self._window_bytes if elapsed < 2 * WINDOW_MS else 0
        self._window_start_ms = now_ms - elapsed % WINDOW_MS
        self._window_bytes = 0

    def add(self, nbytes: int, now_ms: int) -> None:
        self._roll(now_ms)
        self._window_bytes += nbytes

    def per_second(self, now_ms: int) -> int:
        self._roll(now_ms)
        return self._rate
