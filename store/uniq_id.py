"""Message ids in the `UNIQ_KEY` property, shaped like Java's `MessageClientIDSetter`.

A pure core. An id is 16 bytes written as 32 upper-case hex digits:

    0      4     6            10                       14        16
    | ip   | pid | random     | ms since month start   | counter |
    | 4 B  | i16 | 4 B        | u32                    | u16     |

Java puts its class loader's hash where pyrmq puts 4 random bytes (both only make the prefix
unique per process). The broker adds such an id to a message that arrives without one.

Invariants:
- Ids from one generator differ unless 65536 ids are made within one millisecond (the counter
  is 16 bits, as in Java).
"""

from __future__ import annotations

import os
import struct
import time
from datetime import UTC, datetime
from typing import Final

_TAIL: Final = struct.Struct(">IH")
assert _TAIL.size == 6


def _month_start_ms(now_ms: int) -> int:
    now = datetime.fromtimestamp(now_ms / 1000, tz=UTC).astimezone()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


class UniqIdGenerator:
    """Produces UNIQ_KEY values for one process and host address."""

    def __init__(self, ip: bytes, *, pid: int | None = None, salt: bytes | None = None) -> None:
        if len(ip) not in (4, 16):
            raise ValueError(f"ip must be 4 or 16 bytes, got {len(ip)}")
        pid = os.getpid() if pid is None else pid
        salt = os.urandom(4) if salt is None else salt
        self._prefix = (ip[-4:] + struct.pack(">H", pid & 0xFFFF) + salt[:4]).hex().upper()
        self._counter = 0
        self._month_start_ms = 0
        self._next_month_start_ms = 0

    def next_id(self, now_ms: int | None = None) -> str:
        """A new 32-hex-digit id; `now_ms` is wall-clock ms (default: now)."""
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        if not self._month_start_ms <= now_ms < self._next_month_start_ms:
            self._month_start_ms = _month_start_ms(now_ms)
            self._next_month_start_ms = _month_start_ms(self._month_start_ms + 32 * 86_400_000)
        self._counter = (self._counter + 1) & 0xFFFF
        tail = _TAIL.pack((now_ms - self._month_start_ms) & 0xFFFFFFFF, self._counter)
        return self._prefix + tail.hex().upper()
