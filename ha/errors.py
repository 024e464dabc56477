"""Errors of the ha package (AutoSwitchHA replication), grouped by who is at fault.

- `HAError` is the root of every AutoSwitchHA failure.
- `HAProtocolError`: the peer broke the HA protocol (a bad frame, a wrong offset, an ack beyond
  the bytes sent). It closes that one connection; the slave reconnects and re-runs its handshake.
- `NoConsistentPointError`: master and slave share no epoch; nothing was truncated.
- Broken data rules are `store.errors.DataInvariantError`, never an `HAError`.
"""

from __future__ import annotations


class HAError(Exception):
    """Root of all AutoSwitchHA failures."""


class HAProtocolError(HAError):
    """The peer broke the HA protocol; closes this connection only."""


class FrameTooLargeError(HAProtocolError):
    """A declared size is above its `*_BYTES_MAX` (checked before buffering the body)."""


class NoConsistentPointError(HAError):
    """Master and slave share no epoch (docs/ha-protocol.md §6 step 4); nothing is truncated."""


class HandshakeRefusedError(HAProtocolError):
    """A slave handshake from a broker id outside the master's replica set (docs/reliability.md
    §5)."""


class MasterDisconnectedError(HAError):
    """The HA connection to the master closed or timed out."""
