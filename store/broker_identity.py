"""The persistent controller broker id: `brokerIdentity`, `brokerIdentity-temp`
(docs/store-format.md §6).

    brokerIdentity        <clusterName>#<brokerName>#<brokerId>
    brokerIdentity-temp   <clusterName>#<brokerName>#<brokerId>#<registerCheckCode>

UTF-8, no trailing newline, no checksum, no `.bak`. e.g. `DefaultCluster#broker-a#1` and
`DefaultCluster#broker-a#2#192.168.0.11:10911;1700000000123`. How the two files are used (temp
first, then the final file, then delete temp) is docs/replicas-manager.md §4.

Invariants:
- Writes produce exactly those bytes (a trailing newline makes Java reject `brokerIdentity`), via
  `atomic_replace`, so a crash leaves the old or the new file, never a torn one.
- Reads are tolerant (trailing whitespace is stripped) and follow Java's decoding: split on `#`
  with trailing empty parts dropped, extra parts ignored, the id parsed as a Java long. A file
  that is absent, undecodable, or not "loaded" (a name empty, id missing or not a number; temp:
  also check code empty) loads as None, as Java then behaves as if it were absent.
- Names and the check code never contain `#` or surrounding whitespace (refused on write).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from store.atomic_file import atomic_replace, delete_durably, store_error

log = logging.getLogger(__name__)

BROKER_IDENTITY_FILE_NAME: Final = "brokerIdentity"
TEMP_SUFFIX: Final = "-temp"
SEPARATOR: Final = "#"

_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1
# Java's Long.valueOf on ASCII input: optional sign, then digits.
_JAVA_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")


def temp_path_of(path: Path) -> Path:
    """`<path>-temp`: RocketMQ derives the temp file name from the final one."""
    return path.with_name(path.name + TEMP_SUFFIX)


def _check_field(what: str, value: str) -> None:
    if not value or SEPARATOR in value or value != value.strip():
        raise ValueError(
            f"broker identity {what}={value!r}: must be non-empty, without {SEPARATOR!r} and "
            "without surrounding whitespace"
        )


def _check_broker_id(broker_id: int) -> None:
    if not 1 <= broker_id <= _LONG_MAX:
        raise ValueError(f"broker identity broker_id={broker_id}: must be in [1, {_LONG_MAX}]")


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """The broker id the controller assigned, for good (`brokerIdentity`)."""

    cluster_name: str
    broker_name: str
    broker_id: int

    def encode(self) -> bytes:
        """Exactly the file's bytes. Raises `ValueError` for a field the format cannot hold."""
        _check_field("cluster_name", self.cluster_name)
        _check_field("broker_name", self.broker_name)
        _check_broker_id(self.broker_id)
        return f"{self.cluster_name}#{self.broker_name}#{self.broker_id}".encode()


@dataclass(frozen=True, slots=True)
class TempBrokerIdentity:
    """An id applied for but not yet confirmed (`brokerIdentity-temp`).

    `register_check_code` is `<brokerIP1>:<listenPort>;<currentTimeMillis>`.
    """

    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str

    def encode(self) -> bytes:
        """Exactly the file's bytes. Raises `ValueError` for a field the format cannot hold."""
        _check_field("cluster_name", self.cluster_name)
        _check_field("broker_name", self.broker_name)
        _check_broker_id(self.broker_id)
        _check_field("register_check_code", self.register_check_code)
        return (
            f"{self.cluster_name}#{self.broker_name}#{self.broker_id}#{self.register_check_code}"
        ).encode()


def _split_fields(data: bytes, count: int) -> list[str] | None:
    """The first `count` `#`-separated fields as Java's decoder sees them, or None."""
    try:
        text = data.decode("utf-8").rstrip()
    except UnicodeDecodeError:
        return None
    parts = text.split(SEPARATOR)
    while parts and parts[-1] == "":
        parts.pop()  # String.split drops trailing empty strings
    if len(parts) < count:
        return None
    return parts[:count]


def _java_long(text: str) -> int | None:
    if _JAVA_DECIMAL.fullmatch(text) is None or not _LONG_MIN <= int(text) <= _LONG_MAX:
        return None
    return int(text)


def decode_broker_identity(data: bytes) -> BrokerIdentity | None:
    """The identity in `brokerIdentity`'s bytes, or None when Java would not consider it loaded."""
    fields = _split_fields(data, 3)
    if fields is None:
        return None
    cluster_name, broker_name, id_text = fields
    broker_id = _java_long(id_text)
    if not cluster_name or not broker_name or broker_id is None:
        return None
    return BrokerIdentity(cluster_name, broker_name, broker_id)


def decode_temp_broker_identity(data: bytes) -> TempBrokerIdentity | None:
    """The identity in `brokerIdentity-temp`'s bytes, or None when not loaded."""
    fields = _split_fields(data, 4)
    if fields is None:
        return None
    cluster_name, broker_name, id_text, register_check_code = fields
    broker_id = _java_long(id_text)
    if not cluster_name or not broker_name or broker_id is None or not register_check_code:
        return None
    return TempBrokerIdentity(cluster_name, broker_name, broker_id, register_check_code)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise store_error(path, "read of", err) from err


def load_broker_identity(path: Path) -> BrokerIdentity | None:
    """`brokerIdentity` at `path`, or None if absent or not loaded (logged as a WARNING).

    Raises `StoreIOError` on a read error other than "absent".
    """
    data = _read(path)
    if data is None:
        return None
    identity = decode_broker_identity(data)
    if identity is None:
        log.warning("broker identity file not loaded path=%s content=%r", path, data[:200])
    return identity


def load_temp_broker_identity(path: Path) -> TempBrokerIdentity | None:
    """`brokerIdentity-temp` at `path` (the temp file itself), or None if absent or not loaded.

    Raises `StoreIOError` on a read error other than "absent".
    """
    data = _read(path)
    if data is None:
        return None
    identity = decode_temp_broker_identity(data)
    if identity is None:
        log.warning("temp broker identity file not loaded path=%s content=%r", path, data[:200])
    return identity


def write_broker_identity(path: Path, identity: BrokerIdentity) -> None:
    """Replace `brokerIdentity` atomically. Raises `ValueError` (bad field), `DiskFullError`,
    `StoreIOError`."""
    atomic_replace(path, identity.encode())


def write_temp_broker_identity(path: Path, identity: TempBrokerIdentity) -> None:
    """Replace `brokerIdentity-temp` (`path` is the temp file itself) atomically."""
    atomic_replace(path, identity.encode())


def delete_temp_broker_identity(path: Path) -> None:
    """Remove `brokerIdentity-temp` (`path` is the temp file itself) durably; absent is fine."""
    delete_durably(path)
