"""HAConnectionState (docs/ha-protocol.md §2): the wire value is Java's enum ordinal.

Only HANDSHAKE (1) and TRANSFER (2) ever appear in frames; the others are local states.
"""

from __future__ import annotations

import enum


class HAConnectionState(enum.IntEnum):
    READY = 0  # slave only: not connected
    HANDSHAKE = 1  # epoch exchange and slave truncation
    TRANSFER = 2  # log shipping and offset acks
    SUSPEND = 3  # never on the wire
    SHUTDOWN = 4  # local only
