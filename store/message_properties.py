"""A message's PROPERTIES string (docs/store-format.md §3.4): `name 0x01 value 0x02` entries,
RocketMQ's property names (`MessageConst`), the 20-byte `__CRC32#` reservation, and the
consume-queue tagsCode of TAGS (§4.2).

Invariant: with the property CRC on, a stored string ends with the `__CRC32#` property, which
starts a segment of its own (`normalize_properties` makes room for it).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from typing import Final

from store.errors import MessageIllegalError
from store.native import native as _native

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
PROPERTY_CRC_NAME: Final = "__CRC32#"
# "__CRC32#" 0x01 + 10 digits + 0x02, counted in PROPERTIESLENGTH and TOTALSIZE.
PROPERTY_CRC_RESERVED_BYTES: Final = 20
PROPERTY_CRC_DIGITS: Final = 10
MAX_PROPERTIES_BYTES: Final = 32767  # PROPERTIESLENGTH is a signed i16


def encode_properties(props: Mapping[str, str]) -> bytes:
    """`messageProperties2String`: `name 0x01 value 0x02` per entry, in the mapping's order, UTF-8.

    Raises `MessageIllegalError` for a name holding 0x01 or 0x02, or a value holding 0x02: such an
    entry would parse back as something else. Empty names or values are written (as Java does)
    and dropped again by `parse_properties`. A dict of str is encoded in C where built (once per
    send); `encode_properties_python` is the reference, and encodes (or refuses) the rest.
    """
    if _native is not None:
        encoded = _native.encode_properties(props)
        if encoded is not None:
            return encoded
    return encode_properties_python(props)


def encode_properties_python(props: Mapping[str, str]) -> bytes:
    """`encode_properties` in Python: the reference for `_native.encode_properties`."""
    parts: list[str] = []
    for name, value in props.items():
        if NAME_VALUE_SEPARATOR in name or PROPERTY_SEPARATOR in name:
            raise MessageIllegalError(f"property name {name!r} contains a separator (0x01/0x02)")
        if PROPERTY_SEPARATOR in value:
            raise MessageIllegalError(f"property {name!r}: value {value!r} contains 0x02")
        parts.append(f"{name}\x01{value}\x02")
    return "".join(parts).encode()


def parse_properties(raw: bytes) -> dict[str, str]:
    """`string2messageProperties` (§3.4): the property map a Java reader sees.

    Split on 0x02; keep a segment only if its first 0x01 has at least one char before and after
    it (empty names and empty values are dropped); the value is everything after that first 0x01;
    a later duplicate name wins; a missing trailing 0x02 is fine. Invalid UTF-8 is replaced with
    U+FFFD, as Java's decoder does.
    """
    result: dict[str, str] = {}
    for segment in raw.decode("utf-8", "replace").split(PROPERTY_SEPARATOR):
        sep = segment.find(NAME_VALUE_SEPARATOR)
        if 0 < sep < len(segment) - 1:
            result[segment[:sep]] = segment[sep + 1 :]
    return result


def find_property(raw: bytes, key: bytes) -> bytes | None:
    """The raw value `parse_properties(raw).get(name)` would give, without parsing everything.

    `key` is the name followed by 0x01. A match counts only at a segment start (offset 0 or after
    0x02; values never hold 0x02), the last non-empty one wins, and the value runs to the next
    0x02 or the end. Returns None when the property is absent (or only present with empty values).
    """
    at = raw.rfind(key)
    while at >= 0:
        if at == 0 or raw[at - 1] == 2:
            start = at + len(key)
            stop = raw.find(b"\x02", start)
            value = raw[start : stop if stop >= 0 else len(raw)]
            if value:
                return value
        at = raw.rfind(key, 0, at + len(key) - 1)
    return None


CRC_PROPERTY_KEY: Final = PROPERTY_CRC_NAME.encode() + b"\x01"
# What write_record overwrites: the ten placeholder digits before the final 0x02.
CRC_PROPERTY_PLACEHOLDER: Final = CRC_PROPERTY_KEY + b"0" * PROPERTY_CRC_DIGITS + b"\x02"
assert len(CRC_PROPERTY_PLACEHOLDER) == PROPERTY_CRC_RESERVED_BYTES


def normalize_properties(raw: bytes) -> bytes:
    """What the broker stores before the 20-byte CRC reservation when the property CRC is on.

    Drops every `__CRC32#` segment the client sent (`MessageUtils.deleteProperty`: at a segment
    start, with its 0x02), then appends one 0x02 if the string is non-empty and lacks it (§3.4),
    so that the reservation parses as a property of its own.
    """
    if raw.rfind(CRC_PROPERTY_KEY) >= 0:
        segments = raw.split(b"\x02")
        last = segments.pop()
        kept = [s + b"\x02" for s in segments if not s.startswith(CRC_PROPERTY_KEY)]
        if not last.startswith(CRC_PROPERTY_KEY):
            kept.append(last)
        raw = b"".join(kept)
    if raw and raw[-1] != 2:
        raw += b"\x02"
    return raw


def java_string_hash(s: str) -> int:
    """Java `String.hashCode()`: h = 31*h + c over UTF-16 code units, as a signed int32."""
    h = 0
    if s.isascii():
        for unit in s.encode("ascii"):
            h = (31 * h + unit) & 0xFFFFFFFF
    else:
        data = s.encode("utf-16-be")
        for (unit,) in struct.iter_unpack(">H", data):
            h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """The consume-queue tagsCode of a TAGS value (§4.2): its Java hash; 0 for None or empty.

    (The schedule topic's delivery timestamp in place of the hash is the dispatcher's business.)
    """
    return java_string_hash(tags) if tags else 0


@functools.lru_cache(maxsize=4096)
def _tags_code_of_value(raw_value: bytes) -> int:
    return java_string_hash(raw_value.decode("utf-8", "replace"))


_TAGS_KEY: Final = b"TAGS\x01"


def tags_code_of_properties(raw: bytes) -> int:
    value = find_property(raw, _TAGS_KEY)
    return 0 if value is None else _tags_code_of_value(value)
