"""Errors of the broker package, grouped by who is at fault.

- `BrokerError` is the root of everything the broker package raises itself.
- `BrokerConfigError`: the operator's `broker.conf` (or command line) is wrong; the broker does
  not start. The message names the file, the line, the key and the value.
- `PortInUseError`: a port the broker must listen on (listenPort, haListenPort, the metrics
  port) cannot be bound; the broker does not start, and says which key to change.
- `ConfigFileError`: a metadata file under `<storePathRootDir>/config` (topics.json, ...) and its
  `.bak` are both unreadable; the broker does not start rather than forget topics or offsets.
"""

from __future__ import annotations


class BrokerError(Exception):
    """Root of every error the broker package raises."""


class BrokerConfigError(BrokerError, ValueError):
    """A `broker.conf` line or a command-line option cannot be used; names key, value and line."""

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None,
        key: str | None = None,
    ) -> None:
        self.detail = message
        self.path = path
        self.line = line
        self.key = key
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        elif line is not None:
            where = f"line {line}: "
        super().__init__(f"{where}{message}")


class PortInUseError(BrokerError):
    """A listening socket cannot be bound: names the broker.conf key, the address and why."""


class ConfigFileError(BrokerError):
    """A config JSON file (topics.json, subscriptionGroup.json, consumerOffset.json) and its
    `.bak` cannot be parsed; names the file and what is wrong."""
