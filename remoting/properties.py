"""Java `.properties` text (`java.util.Properties.load`): `broker.conf`, `controller.conf`, and the
bodies of UPDATE/GET_CONTROLLER_CONFIG. The one reader of the project (broker/ and controller/
both import it; it imports nothing of ours).

A pure core: text in, `(key, value, line)` entries out. The rules are Java's:
- natural lines end at `\\n`, `\\r` or `\\r\\n`; leading spaces, tabs and form feeds are skipped;
- a line whose first other character is `#` or `!` is a comment (even if it ends with `\\`);
- a line ending in an odd number of backslashes continues on the next natural line, whose
  leading whitespace is dropped (a continuation line is never a comment);
- the key ends at the first unescaped `=`, `:` or whitespace; then whitespace, at most one `=`
  or `:`, and whitespace again are skipped; the value is the rest of the logical line;
- escapes in keys and values: `\\t \\n \\r \\f`, `\\uXXXX` (exactly four hex digits), and
  `\\` before any other character stands for that character.

Differences from Java, on purpose: the caller decodes the bytes (Java reads ISO-8859-1, which only
matters for non-ASCII bytes), and a malformed `\\uXXXX` raises `PropertiesSyntaxError` naming the
line (Java throws too, without a line number).

Invariants:
- Every entry carries the natural line number (1-based) where its logical line starts.
- Entries come in file order; a key may repeat (the caller decides: Java keeps the last one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

_NATURAL_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")
_WHITESPACE: Final = " \t\f"
_SEPARATORS: Final = "=:"
_SIMPLE_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")


class PropertiesSyntaxError(ValueError):
    """The text is not valid `.properties` syntax; `line` is the 1-based line, `detail` the why."""

    def __init__(self, detail: str, *, line: int) -> None:
        self.detail = detail
        self.line = line
        super().__init__(f"line {line}: {detail}")


@dataclass(frozen=True, slots=True)
class PropertyEntry:
    """One `key=value` of a properties file, unescaped; `line` is 1-based."""

    key: str
    value: str
    line: int


def _ends_with_odd_backslashes(text: str) -> bool:
    count = len(text) - len(text.rstrip("\\"))
    return count % 2 == 1


def _logical_lines(text: str) -> list[tuple[str, int]]:
    """(logical line with continuations joined and the joining backslashes removed, line no)."""
    natural = _NATURAL_LINE_BREAK.split(text)
    result: list[tuple[str, int]] = []
    index = 0
    while index < len(natural):
        start_line = index + 1
        line = natural[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _ends_with_odd_backslashes(line):
            line = line[:-1]
            if index >= len(natural):
                break  # a continuation at end of file: Java ends the line there too
            line += natural[index].lstrip(_WHITESPACE)
            index += 1
        result.append((line, start_line))
    return result


def _unescape(raw: str, *, line: int, what: str) -> str:
    """Java's `loadConvert`: resolve backslash escapes in a key or value."""
    if "\\" not in raw:
        return raw
    out: list[str] = []
    pos = 0
    while pos < len(raw):
        char = raw[pos]
        pos += 1
        if char != "\\":
            out.append(char)
            continue
        if pos >= len(raw):
            break  # a lone trailing backslash stands for nothing
        char = raw[pos]
        pos += 1
        if char == "u":
            digits = raw[pos : pos + 4]
            if len(digits) != 4 or not set(digits) <= _HEX_DIGITS:
                raise PropertiesSyntaxError(
                    f"{what}: malformed \\uxxxx escape \\u{digits!s}", line=line
                )
            out.append(chr(int(digits, 16)))
            pos += 4
        else:
            out.append(_SIMPLE_ESCAPES.get(char, char))
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of one logical line."""
    key_end = 0
    value_start = len(line)
    has_separator = False
    escaped = False
    while key_end < len(line):
        char = line[key_end]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in _SEPARATORS:
            value_start = key_end + 1
            has_separator = True
            break
        elif char in _WHITESPACE:
            value_start = key_end + 1
            break
        key_end += 1
    while value_start < len(line):
        char = line[value_start]
        if char in _WHITESPACE:
            value_start += 1
        elif not has_separator and char in _SEPARATORS:
            has_separator = True
            value_start += 1
        else:
            break
    return line[:key_end], line[value_start:]


def parse_properties(text: str) -> list[PropertyEntry]:
    """Parse `.properties` text into entries in file order.

    Raises `PropertiesSyntaxError` (with the line) for a malformed `\\uXXXX` escape.
    """
    entries: list[PropertyEntry] = []
    for line, number in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        key = _unescape(raw_key, line=number, what="key")
        value = _unescape(raw_value, line=number, what=f"value of {key}")
        entries.append(PropertyEntry(key, value, number))
    return entries
