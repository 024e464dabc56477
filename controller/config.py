"""`controller.conf`: the typed configuration of `pyrmq-controller`.

Keys are RocketMQ's (NettyServerConfig, ControllerConfig, NamesrvConfig), camelCase on disk,
each mapped to a snake_case field; `brokerChannelExpiredTime` is pyrmq's (a constant in Java):

| key | field | default |
|---|---|---|
| `listenPort` | `listen_port` | 9876 (0: any free port) |
| `bindAddress` | `bind_address` | 0.0.0.0 |
| `controllerStorePath` | `controller_store_path` | `<home>/DLedgerController` |
| `scanNotActiveBrokerInterval` | `scan_not_active_broker_interval_ms` | 5000 |
| `brokerChannelExpiredTime` | `broker_channel_expired_time_ms` | 120000 |
| `serverChannelMaxIdleTimeSeconds` | `server_channel_max_idle_time_seconds` | 120 |
| `serverSocketBacklog` | `server_socket_backlog` | 1024 |
| `enableControllerInNamesrv` | `enable_controller_in_namesrv` | true (Java: false) |
| `controllerListenPort` | `controller_listen_port` | unset: none (0: any free port) |
| `scanInactiveMasterInterval` | `scan_inactive_master_interval_ms` | 5000 |
| `inactiveMasterScanDelay` (pyrmq's) | `inactive_master_scan_delay_ms` | 10000 |
| `electMasterMaxRetryCount` | `elect_master_max_retry_count` | 3 |
| `enableElectUncleanMaster` | `enable_elect_unclean_master` | false |
| `notifyBrokerRoleChanged` | `notify_broker_role_changed` | true |
| `pyrmqAdminAllowlist` (pyrmq's) | `pyrmq_admin_allowlist` | unset: anyone (IPs, networks; `,`) |

With `enableControllerInNamesrv` the controller codes are served on `listenPort` beside the
name-server codes (one address is both `namesrvAddr` and `controllerAddr`), and, if
`controllerListenPort` is set, on that second port alone (like RocketMQ's 9878).
`inactiveMasterScanDelay` keeps the inactive-master scan from running that long after start:
the live-broker table starts empty, and a slave whose first heartbeat beats the master's must
not make the controller replace a healthy master. Its event log
lives in `controllerStorePath`. `scanNotActiveBrokerInterval` paces the name server's expiry scan;
the controller checks its heartbeat table when the first record expires (a hung master is
found at its heartbeat timeout, not up to one scan later as in Java), waiting at most that
interval. `pyrmqAdminAllowlist` restricts the operator's requests
(controller/admin_allowlist.py) to the clients it names.

Values are trimmed (Java trims only strings; a number with a trailing blank is silently ignored
there). A bad value is a `ConfigError` naming the file, the line, the key and the value; an
unknown key is a warning (returned, the caller logs it), since stock RocketMQ files carry keys
pyrmq does not use. A key given twice takes its last value, as in Java.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from controller.admin_allowlist import IPNetwork, parse_allowlist
from controller.errors import ConfigError
from controller.route_info import BROKER_CHANNEL_EXPIRED_TIME_MS_DEFAULT
from remoting.fastjson import java_int
from remoting.properties import PropertiesSyntaxError, parse_properties

CONTROLLER_STORE_DIR_NAME: Final = "DLedgerController"
"""Java's default `controllerStorePath` is `${user.home}/` + controllerType + "Controller"."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Everything `pyrmq-controller` reads from `controller.conf` (see the module table)."""

    listen_port: int = 9876
    bind_address: str = "0.0.0.0"  # noqa: S104 - RocketMQ's default: every interface
    controller_store_path: str = ""
    scan_not_active_broker_interval_ms: int = 5_000
    broker_channel_expired_time_ms: int = BROKER_CHANNEL_EXPIRED_TIME_MS_DEFAULT
    server_channel_max_idle_time_seconds: int = 120
    server_socket_backlog: int = 1024
    enable_controller_in_namesrv: bool = True
    controller_listen_port: int | None = None
    scan_inactive_master_interval_ms: int = 5_000
    inactive_master_scan_delay_ms: int = 10_000
    elect_master_max_retry_count: int = 3
    enable_elect_unclean_master: bool = False
    notify_broker_role_changed: bool = True
    pyrmq_admin_allowlist: tuple[IPNetwork, ...] | None = None

    def properties(self, *, important_only: bool = False) -> list[tuple[str, str]]:
        """(key, value) for every key, in the module table's order, as `-p` prints them;
        `important_only` keeps the ones `-m` prints."""
        return [
            (key.name, _shown(getattr(self, key.attr)))
            for key in _KEYS
            if key.important or not important_only
        ]


def _int_in(low: int, high: int) -> Callable[[str], int]:
    """A parser for a Java int in low..high; raises ValueError saying why a value is refused."""

    def parse(text: str) -> int:
        value = java_int(text, bits=32)
        if value is None:
            raise ValueError("is not an int")
        if not low <= value <= high:
            raise ValueError(f"is outside {low}..{high}")
        return value

    return parse


def _string(text: str) -> str:
    return text


def _bool(text: str) -> bool:
    """Java's `Boolean.parseBoolean` would read anything but "true" as false; a typo in a
    switch deserves an error instead."""
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError("is not true or false")
    return lowered == "true"


def _shown(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ",".join(str(part) for part in value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@dataclass(frozen=True, slots=True)
class _Key:
    name: str
    attr: str
    parse: Callable[[str], object]
    important: bool = False


_INT32_MAX: Final = 2**31 - 1
_KEYS: Final = (
    _Key("listenPort", "listen_port", _int_in(0, 65_535), important=True),
    _Key("bindAddress", "bind_address", _string),
    _Key("controllerStorePath", "controller_store_path", _string, important=True),
    _Key(
        "scanNotActiveBrokerInterval", "scan_not_active_broker_interval_ms", _int_in(1, _INT32_MAX)
    ),
    _Key("brokerChannelExpiredTime", "broker_channel_expired_time_ms", _int_in(1, _INT32_MAX)),
    _Key(
        "serverChannelMaxIdleTimeSeconds",
        "server_channel_max_idle_time_seconds",
        _int_in(1, _INT32_MAX // 1000),
    ),
    _Key("serverSocketBacklog", "server_socket_backlog", _int_in(1, _INT32_MAX)),
    _Key("enableControllerInNamesrv", "enable_controller_in_namesrv", _bool, important=True),
    _Key("controllerListenPort", "controller_listen_port", _int_in(0, 65_535), important=True),
    _Key(
        "scanInactiveMasterInterval", "scan_inactive_master_interval_ms", _int_in(1, _INT32_MAX)
    ),
    _Key("inactiveMasterScanDelay", "inactive_master_scan_delay_ms", _int_in(0, _INT32_MAX)),
    _Key("electMasterMaxRetryCount", "elect_master_max_retry_count", _int_in(1, 100)),
    _Key("enableElectUncleanMaster", "enable_elect_unclean_master", _bool),
    _Key("notifyBrokerRoleChanged", "notify_broker_role_changed", _bool),
    _Key("pyrmqAdminAllowlist", "pyrmq_admin_allowlist", parse_allowlist),
)
_KEYS_BY_NAME: Final = {key.name: key for key in _KEYS}
assert {key.attr for key in _KEYS} == {f.name for f in dataclasses.fields(ControllerConfig)}


def parse_controller_config(
    text: str, *, source: str, home: str
) -> tuple[ControllerConfig, list[str]]:
    """The config in `text` and the warnings about it (unknown keys, each with its line).

    `source` names the file in messages; `home` is the user's home directory, for the default
    `controllerStorePath`. Raises ConfigError for a bad value (the first one found) or a
    malformed escape.
    """
    values: dict[str, Any] = {}
    warnings: list[str] = []
    try:
        entries = parse_properties(text)
    except PropertiesSyntaxError as err:
        raise ConfigError(f"{source}:{err.line}: {err.detail}") from err
    for entry in entries:
        key = _KEYS_BY_NAME.get(entry.key)
        if key is None:
            warnings.append(f"{source}:{entry.line}: unknown key {entry.key} ignored")
            continue
        text_value = entry.value.strip()
        if not text_value:
            raise ConfigError(f"{source}:{entry.line}: {entry.key} is empty")
        try:
            values[key.attr] = key.parse(text_value)
        except ValueError as err:
            raise ConfigError(f"{source}:{entry.line}: {entry.key}={text_value!r} {err}") from err
    if "controller_store_path" not in values:
        values["controller_store_path"] = f"{home.rstrip('/')}/{CONTROLLER_STORE_DIR_NAME}"
    return dataclasses.replace(ControllerConfig(), **values), warnings
