"""Errors of the controller package, grouped by who is at fault.

- `ConfigError`: the operator's `controller.conf` (or command line) is wrong; names the file, the
  line, the key and the value. The process exits non-zero before binding anything.
- `RegisterBrokerRefusedError`: a broker's REGISTER_BROKER is refused (RocketMQ's rule, not a
  protocol violation); the request is answered SYSTEM_ERROR and the connection stays open.
- `EventLogError` and its subclasses: the controller's event log (`event_log`) is unreadable;
  `TruncatedLastRecordError` is handled by dropping that one record, the others stop the start.
- `EventDecodeError`: an event record's JSON is not an event.
"""

from __future__ import annotations


class ControllerError(Exception):
    """Root of every error the controller package raises."""


class ConfigError(ControllerError):
    """A configuration file or value is invalid; the message names where and why."""


class RegisterBrokerRefusedError(ControllerError):
    """RocketMQ refuses this registration; answered with SYSTEM_ERROR "register broker failed".

    The only case: the first registration of a broker id whose topic table holds exactly one
    topic, a shape RocketMQ reserves for incremental single-topic updates of a broker that is
    already registered (docs/remoting-protocol.md §7.1, "Quirks").
    """


class EventDecodeError(ControllerError):
    """A controller event record does not decode (a bug or a damaged log)."""


class EventLogError(ControllerError):
    """The controller's event log cannot be read or written."""


class EventLogCorruptError(EventLogError):
    """A record before the last one is damaged: the log cannot be trusted, start refused."""


class TruncatedLastRecordError(EventLogError):
    """The last record is incomplete or fails its CRC: a write cut by a crash before its fsync
    returned, so it was never acknowledged. `valid_bytes` is where the good records end; the log
    drops only that record."""

    def __init__(self, message: str, *, valid_bytes: int) -> None:
        self.valid_bytes = valid_bytes
        super().__init__(message)
