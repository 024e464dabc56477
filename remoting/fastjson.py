"""JSON text as Java's fastjson 1.2.83 writes and reads it (spec/remoting-protocol.md §2, §11).

Writing (`quote_fastjson`, `dump_fastjson`): compact, keys in the order given (callers order bean
properties alphabetically, as fastjson does), strings escaped as fastjson escapes them: `"` and
`\\` with a backslash; `\\b \\t \\n \\f \\r` short; other U+0000-U+001F, U+007F-U+009F and
U+2028/U+2029 as `\\uXXXX` with upper-case hex; `/` and every other character raw (UTF-8).
Lone surrogates, which UTF-8 cannot carry, are escaped the same way.

Reading (`parse_fastjson`): standard JSON, plus fastjson's unquoted integer map keys
(`{0:"addr",1:"addr"}`), which become string keys ("0") exactly like their quoted form; callers
convert keys to numbers where the Java map has Long or Integer keys. Work is linear in the input.

Invariants:
- `parse_fastjson(dump_fastjson(v)) == v` for every `JSONValue` without floats.
- Nothing but `BodyDecodeError` escapes `parse_fastjson` for any input text or bytes.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Final, TypeAlias

from remoting.errors import BodyDecodeError

JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"


# Java's Integer.parseInt / Long.parseLong: an optional sign, then one or more characters that
# `Character.digit(ch, 10)` reads, i.e. any Unicode decimal digit (Nd) of the BMP (Java works on
# UTF-16 units, so a supplementary-plane digit is two non-digits), leading zeros unlimited.
# Python's `\d` is the same Nd class; `int()` reads those digits but also `_` and blanks, which
# the regex keeps out. Java's and Python's Unicode versions differ by a few scripts' digits.
_JAVA_INTEGER: Final = re.compile(r"([+-]?)(\d*)")
_JAVA_SIGNIFICANT_DIGITS_MAX: Final = 19  # 2**63 has 19 digits; keeps int() far from its limit


def java_int(text: str, *, bits: int) -> int | None:
    """`text` as Java's `Integer.parseInt` (bits=32) or `Long.parseLong` (bits=64) reads it,
    or None if Java would throw NumberFormatException (empty, not decimal, out of range)."""
    if text.isascii() and text.isdigit() and len(text) <= _JAVA_SIGNIFICANT_DIGITS_MAX:
        value = int(text)  # the common case: plain ASCII digits, no regex
    else:
        match = _JAVA_INTEGER.fullmatch(text)
        if (
            match is None
            or match.end(1) == len(text)
            or (not text.isascii() and not all(ord(char) < 0x10000 for char in text))
        ):
            return None
        sign, digits = match.groups()
        significant = "".join(str(unicodedata.decimal(char)) for char in digits).lstrip("0")
        if len(significant) > _JAVA_SIGNIFICANT_DIGITS_MAX:
            return None
        value = int(sign + significant) if significant else 0
    limit = 1 << (bits - 1)
    return value if -limit <= value < limit else None


def _escape_table() -> dict[int, str]:
    short = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
    table = {ord('"'): '\\"', ord("\\"): "\\\\"}
    escaped = [*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0xD800, 0xE000)]
    for code_point in escaped:
        table[code_point] = short.get(code_point, f"\\u{code_point:04X}")
    return table


_ESCAPES: Final = _escape_table()
_NEEDS_ESCAPE: Final = re.compile(r'["\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]')


def quote_fastjson(text: str) -> str:
    """`text` as a JSON string literal, quotes included, escaped the way fastjson escapes."""
    if _NEEDS_ESCAPE.search(text) is None:
        return f'"{text}"'
    return f'"{text.translate(_ESCAPES)}"'


# Python's C encoder writes the same text as fastjson except for the characters it escapes
# differently: lower-case hex in \u000b, \u000e-\u000f, \u001a-\u001f, and U+007F-U+009F,
# U+2028/9 and lone surrogates left raw. Seeing any of them (or something that looks like one)
# in its output sends the value down the slow, exact path.
_STANDARD_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
)
_ESCAPED_DIFFERENTLY: Final = re.compile(
    r"\\u00(?:0[b-f]|1[a-f])|[\x7f-\x9f\u2028\u2029\ud800-\udfff]"
)


def dump_fastjson(value: JSONValue) -> str:
    """Compact JSON text for `value`, as fastjson writes it; dict keys keep their order.
    Raises ValueError for a float that is not finite (JSON has no NaN or infinity)."""
    text: str = _STANDARD_ENCODER.encode(value)
    if _ESCAPED_DIFFERENTLY.search(text) is None:
        return text
    parts: list[str] = []
    _dump_into(value, parts)
    return "".join(parts)


def _dump_into(value: JSONValue, parts: list[str]) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(quote_fastjson(value))
    elif isinstance(value, int):
        parts.append(str(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"JSON cannot carry the float {value!r}")
        parts.append(repr(value))
    elif isinstance(value, list):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _dump_into(item, parts)
        parts.append("]")
    else:
        parts.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                parts.append(",")
            parts.append(quote_fastjson(key))
            parts.append(":")
            _dump_into(item, parts)
        parts.append("}")


# A string token, or an unquoted integer key after `{` or `,`. Possessive quantifiers and the
# end-of-text alternative make every string attempt succeed in one pass, so a hostile body of
# unterminated strings costs linear time, not quadratic.
_STRING_OR_NUMERIC_KEY: Final = re.compile(
    r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|([{,]\s*+)(-?[0-9]++)(\s*+:)', re.DOTALL
)


def _quote_numeric_key(match: re.Match[str]) -> str:
    if match.group(2) is None:
        return match.group(0)
    return f'{match.group(1)}"{match.group(2)}"{match.group(3)}'


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_STANDARD_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


def loads_json(text: str) -> JSONValue:
    """Standard JSON (remoting headers), NaN and Infinity refused. Raises ValueError
    (JSONDecodeError among others) or RecursionError for input nested too deep."""
    value: JSONValue = _STANDARD_DECODER.decode(text)
    return value


def parse_fastjson(text: str | bytes) -> JSONValue:
    """Parse a JSON body as fastjson writes it (UTF-8 when given bytes).

    Raises BodyDecodeError for invalid UTF-8, invalid JSON, NaN/Infinity, numbers beyond
    Python's int-string limit, or nesting deeper than the interpreter's recursion limit.
    """
    try:
        decoded = text.decode("utf-8") if isinstance(text, bytes) else text
    except UnicodeDecodeError as err:
        raise BodyDecodeError(f"JSON body is not UTF-8: {err}") from err
    try:
        return loads_json(decoded)
    except json.JSONDecodeError:
        pass  # maybe fastjson's unquoted numeric keys: rewrite and try once more below
    except (ValueError, RecursionError) as err:
        raise BodyDecodeError(f"JSON body rejected: {err}") from err
    rewritten = _STRING_OR_NUMERIC_KEY.sub(_quote_numeric_key, decoded)
    try:
        return loads_json(rewritten)
    except (ValueError, RecursionError) as err:
        raise BodyDecodeError(f"JSON body rejected: {err}") from err
