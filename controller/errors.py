"""Errors of the controller package, grouped by who is at fault.

- `ConfigError`: the operator's `controller.conf` (or command line) is wrong; names the file, the
  line, the key and the value. The process exits non-zero before binding anything.
- `RegisterBrokerRefusedError`: a broker's REGISTER_BROKER is refused (RocketMQ's rule, not a
  protocol violation); the request is answered SYSTEM_ERROR and the connection stays open.
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
    already registered (spec/remoting-protocol.md §7.1, "Quirks").
    """
