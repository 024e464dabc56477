"""JSON text as Java's fastjson 1.2.83 writes and reads it (docs/remoting-protocol.md §2, §11).

Writing (`quote_fastjson`, `dump_fastjson`): compact, keys in the order given (callers order bean
properties alphabetically, as fastjson does), strings escaped as fastjson escapes them: `"` and
`\\` with a backslash; `\\b \\t \\n \\f \\r` short; other U+0000-U+001F, U+007F-U+009F and
U+2028/U+2029 as `\\uXXXX` with upper-case hex; `/` and every other character raw (UTF-8).
Lone surrogates, which UTF-8 cannot carry, are escaped the same way.

Reading (`parse_fastjson`): standard JSON first (the C decoder: what every client sends); text
it refuses goes through `_LenientParser`, the syntax fastjson 1.2.83 accepts by default (its
`AllowSingleQuotes`, `AllowUnQuotedFieldNames`, `AllowArbitraryCommas` features and its lexer):
single-quoted strings, unquoted names (`{0:"addr"}`, `{topicName:"T"}`), stray commas in
objects, `/* */` and `//` comments, `\\x41` and `\\v` escapes, number suffixes `L S B F D`, a
leading `+` or zeros, and `NaN`/`undefined` as null. Keys become strings (callers convert them
where the Java map has Long or Integer keys). A JSON float is a `JavaDecimal`: a float that
keeps the text `BigDecimal.toString()` gives it, which fastjson uses when a float reaches a
string property. Work is linear in the input; nesting is bounded.

RocketMQ 5.5.0 reads bodies and headers with fastjson2, which refuses unquoted names, stray
commas, comments and `NaN`; pyrmq keeps 1.2.83's rules (tests/interop/test_java_leniency_oracle.py
pins every difference).

Invariants:
- `parse_fastjson(dump_fastjson(v)) == v` for every `JSONValue` without floats.
- Nothing but `BodyDecodeError` escapes `parse_fastjson` for any input text or bytes.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from decimal import Decimal
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
    # The regex scans at some 8 ns a character, as long as the encoding itself for a header:
    # in ASCII text (nearly every header) only a `\u00` escape or a raw DEL (U+007F, ASCII and
    # left raw by the standard encoder) can match, and two substring searches rule those out in
    # a fraction of the time.
    if (text.isascii() and "\\u00" not in text and "\x7f" not in text) \
            or _ESCAPED_DIFFERENTLY.search(text) is None:
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


class JavaDecimal(float):
    """A JSON float literal: a float, plus `java_text`, what `BigDecimal.toString()` prints for
    it ("1.50" stays "1.50", 1e3 is "1E+3", no negative zero)."""

    java_text: str

    def __new__(cls, literal: str) -> JavaDecimal:
        number = super().__new__(cls, literal)
        decimal = Decimal(literal)
        text = str(decimal.copy_abs() if decimal.is_zero() else decimal)
        number.java_text = text
        return number


_BIG_DIGITS_MAX: Final = 4000  # below Python's int-string limit; longer numbers are refused


def big_decimal_value(number: float, bits: int) -> int:
    """fastjson's `TypeUtils.intValue` / `longValue` of a JSON float (bits 32 / 64): for a
    scale within -100..100 `BigDecimal.intValue()`, the integer part (truncated toward zero)
    wrapped to `bits` bits, computed in time independent of the exponent; for a larger scale
    `intValueExact()`, so only an integral value in range is read. Raises ValueError where
    Java throws, for NaN or infinity (a plain float), and beyond `_BIG_DIGITS_MAX` digits."""
    text = number.java_text if isinstance(number, JavaDecimal) else repr(number)
    decimal = Decimal(text)
    if not decimal.is_finite():
        raise ValueError(f"{text} is not a number Java reads")
    sign, digit_tuple, exponent = decimal.as_tuple()
    assert isinstance(exponent, int)  # finite
    if len(digit_tuple) > _BIG_DIGITS_MAX:
        raise ValueError(f"a number of {len(digit_tuple)} digits")
    digits = "".join(map(str, digit_tuple))
    modulus = 1 << bits
    if not -_SCALE_WRAPPED_MAX <= exponent <= _SCALE_WRAPPED_MAX:
        exact = _exact_integer(int(digits), exponent, bits)
        if exact is None:
            raise ValueError(f"{text} is not an exact int{bits} (scale {-exponent})")
        return -exact if sign else exact
    if exponent >= 0:
        magnitude = int(digits) * pow(10, exponent, modulus)
    else:
        kept = len(digits) + exponent
        magnitude = int(digits[:kept]) if kept > 0 else 0
    value = (-magnitude if sign else magnitude) % modulus
    return value - modulus if value >> (bits - 1) else value


_SCALE_WRAPPED_MAX: Final = 100  # TypeUtils: beyond this scale, intValueExact()/longValueExact()


def _exact_integer(unscaled: int, exponent: int, bits: int) -> int | None:
    """unscaled * 10**exponent if it is an integer below 2**(bits-1) (the sign aside)."""
    if unscaled == 0:
        return 0
    if exponent > 0:
        return None  # at least 10**101: beyond every long
    if len(str(unscaled)) <= -exponent:
        return None  # a fraction (unscaled < 10**-exponent)
    whole, fraction = divmod(unscaled, 10**-exponent)
    return whole if fraction == 0 and whole < 1 << (bits - 1) else None


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_STANDARD_DECODER: Final = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=JavaDecimal
)


def loads_json(text: str) -> JSONValue:
    """Standard JSON, NaN and Infinity refused. Raises ValueError (JSONDecodeError among
    others) or RecursionError for input nested too deep."""
    value: JSONValue = _STANDARD_DECODER.decode(text)
    return value


def loads_lenient(text: str) -> JSONValue:
    """JSON as fastjson 1.2.83 reads it (the module docstring lists the syntax); raises
    ValueError naming the position of the first thing it cannot read."""
    try:
        return loads_json(text)
    except ValueError:
        pass  # JSONDecodeError, or NaN / Infinity (fastjson: NaN is null, Infinity refused)
    return _LenientParser(text).document()


def parse_fastjson(text: str | bytes) -> JSONValue:
    """Parse a JSON body as fastjson reads it (UTF-8 when given bytes).

    Raises BodyDecodeError for invalid UTF-8, text fastjson refuses, numbers beyond Python's
    int-string limit, or nesting deeper than `_DEPTH_MAX` / the recursion limit.
    """
    try:
        decoded = text.decode("utf-8") if isinstance(text, bytes) else text
    except UnicodeDecodeError as err:
        raise BodyDecodeError(f"JSON body is not UTF-8: {err}") from err
    try:
        return loads_lenient(decoded)
    except (ValueError, RecursionError) as err:
        raise BodyDecodeError(f"JSON body rejected: {err}") from err


_DEPTH_MAX: Final = 256
_WHITESPACE: Final = frozenset(" \t\n\r\f\b\v")
_NAME: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*+|-?[0-9]++")
_NUMBER: Final = re.compile(
    r"([+-]?[0-9]++)(\.[0-9]++)?+([eE][+-]?[0-9]++)?+([LSBFD])?+(?![A-Za-z0-9_$.])"
)
_PLAIN_RUN: Final = {'"': re.compile(r'[^"\\]++'), "'": re.compile(r"[^'\\]++")}
_SHORT_ESCAPES: Final = {
    '"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n",
    "r": "\r", "t": "\t", "v": "\v", "0": "\0",
}
_NULL_WORDS: Final = {"null": None, "NaN": None, "undefined": None, "true": True,
                      "false": False}
_WORD: Final = re.compile(r"[A-Za-z]++")


class _LenientParser:
    """One pass over `text`; every method starts at `self.at` and leaves it after what it read."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self, what: str) -> ValueError:
        shown = self.text[self.at : self.at + 16]
        return ValueError(f"{what} at char {self.at} ({shown!r})")

    def skip(self) -> None:
        """Whitespace and comments."""
        text, at = self.text, self.at
        while at < len(text):
            if text[at] in _WHITESPACE:
                at += 1
            elif text.startswith("/*", at):
                end = text.find("*/", at + 2)
                if end < 0:
                    self.at = at
                    raise self.fail("unterminated comment")
                at = end + 2
            elif text.startswith("//", at):
                end = text.find("\n", at + 2)
                at = len(text) if end < 0 else end + 1
            else:
                break
        self.at = at

    def peek(self) -> str:
        self.skip()
        return self.text[self.at] if self.at < len(self.text) else ""

    def document(self) -> JSONValue:
        value = self.value(0)
        if self.peek():
            raise self.fail("text after the JSON value")
        return value

    def value(self, depth: int) -> JSONValue:
        if depth > _DEPTH_MAX:
            raise self.fail(f"nesting deeper than {_DEPTH_MAX}")
        char = self.peek()
        if char == "{":
            return self.object(depth + 1)
        if char == "[":
            return self.array(depth + 1)
        if char and char in "\"'":
            return self.string()
        number = _NUMBER.match(self.text, self.at)
        if number is not None:
            self.at = number.end()
            whole, fraction, exponent, suffix = number.groups()
            if fraction is None and exponent is None and suffix not in ("F", "D"):
                return int(whole)
            return JavaDecimal(whole + (fraction or "") + (exponent or ""))
        word = _WORD.match(self.text, self.at)
        if word is not None and word.group() in _NULL_WORDS:
            self.at = word.end()
            return _NULL_WORDS[word.group()]
        raise self.fail("no JSON value")

    def object(self, depth: int) -> dict[str, JSONValue]:
        self.at += 1  # "{"
        result: dict[str, JSONValue] = {}
        while True:
            char = self.peek()
            if char == ",":
                self.at += 1  # AllowArbitraryCommas
                continue
            if char == "}":
                self.at += 1
                return result
            if char and char in "\"'":
                key = self.string()
            else:
                name = _NAME.match(self.text, self.at)
                if name is None:
                    raise self.fail("no property name")
                self.at = name.end()
                key = name.group()
            if self.peek() != ":":
                raise self.fail("no ':' after a property name")
            self.at += 1
            result[key] = self.value(depth)
            if self.peek() not in (",", "}"):
                raise self.fail("no ',' or '}' after a property")

    def array(self, depth: int) -> list[JSONValue]:
        self.at += 1  # "["
        result: list[JSONValue] = []
        if self.peek() == "]":
            self.at += 1
            return result
        while True:
            result.append(self.value(depth))
            char = self.peek()
            self.at += 1
            if char == "]":
                return result
            if char != ",":
                self.at -= 1
                raise self.fail("no ',' or ']' in an array")
            if self.peek() == "]":
                self.at += 1  # a trailing comma
                return result

    def string(self) -> str:
        text = self.text
        quote = text[self.at]
        plain = _PLAIN_RUN[quote]
        self.at += 1
        parts: list[str] = []
        surrogates = False
        while True:
            run = plain.match(text, self.at)
            if run is not None:
                parts.append(run.group())
                self.at = run.end()
            if self.at >= len(text):
                raise self.fail("unterminated string")
            char = text[self.at]
            if char == quote:
                self.at += 1
                if surrogates:  # \\uD83D\\uDE00 is one character, as in Java's UTF-16
                    utf16 = "".join(parts).encode("utf-16-le", "surrogatepass")
                    return utf16.decode("utf-16-le", "surrogatepass")
                return "".join(parts)
            escape = text[self.at + 1 : self.at + 2]  # char is a backslash
            if escape in _SHORT_ESCAPES:
                parts.append(_SHORT_ESCAPES[escape])
                self.at += 2
            elif escape in ("x", "u"):
                width = 2 if escape == "x" else 4
                digits = text[self.at + 2 : self.at + 2 + width]
                if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                    raise self.fail(f"bad \\{escape} escape")
                code = int(digits, 16)
                surrogates = surrogates or 0xD800 <= code < 0xE000
                parts.append(chr(code))
                self.at += 2 + width
            else:
                raise self.fail("unknown escape")
