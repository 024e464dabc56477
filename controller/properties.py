"""Java `.properties` text (`controller.conf`), read as `java.util.Properties.load` reads it.

- A natural line ends at `\\n`, `\\r` or `\\r\\n`. Lines that are blank, or whose first
  non-blank character is `#` or `!`, are skipped.
- A line ending in an odd number of backslashes continues on the next one (the backslash, the
  line break and the next line's leading blanks are dropped).
- The key runs up to the first unescaped `=`, `:` or blank (space, tab, form feed); then blanks,
  at most one `=` or `:`, and blanks again are skipped; the rest of the line is the value.
- Escapes in keys and values: `\\t \\n \\r \\f`, `\\uXXXX`, and `\\` before any other character
  stands for that character.

Unlike Java (which throws away a malformed `\\uXXXX` with an IllegalArgumentException for the
whole file), the error names the file and the line. Every entry is kept, in file order with its
line number, so a caller can report duplicates and unknown keys where they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from controller.errors import ConfigError

_BLANKS: Final = " \t\f"
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")
_SIMPLE_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


@dataclass(frozen=True, slots=True)
class Property:
    """One `key=value` entry; `line` is the 1-based line where it starts."""

    line: int
    key: str
    value: str


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, logical line) for every non-blank, non-comment logical line."""
    natural = _LINE_BREAK.split(text)
    result: list[tuple[int, str]] = []
    index = 0
    while index < len(natural):
        start = index
        line = natural[index].lstrip(_BLANKS)
        index += 1
        if not line or line[0] in "#!":
            continue
        parts: list[str] = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 0 or index >= len(natural):
                parts.append(line[:-1] if trailing % 2 else line)
                break
            parts.append(line[:-1])
            line = natural[index].lstrip(_BLANKS)
            index += 1
        result.append((start + 1, "".join(parts)))
    return result


def _unescape(raw: str, *, where: str) -> str:
    if "\\" not in raw:
        return raw
    out: list[str] = []
    index = 0
    while index < len(raw):
        char = raw[index]
        index += 1
        if char != "\\" or index >= len(raw):
            out.append(char)
            continue
        escaped = raw[index]
        index += 1
        if escaped == "u":
            digits = raw[index : index + 4]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"{where}: malformed \\uXXXX escape \\u{digits}")
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append(_SIMPLE_ESCAPES.get(escaped, escaped))
    return "".join(out)


def _split_key(line: str) -> tuple[str, str]:
    """(raw key, raw value) of a logical line that starts with a non-blank character."""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=:" or char in _BLANKS:
            break
        index += 1
    key, rest = line[:index], line[index:]
    rest = rest.lstrip(_BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def parse_properties(text: str, *, source: str) -> list[Property]:
    """Every entry of `text`, in order (a later duplicate key wins in Java; both are kept here).

    `source` names the text in errors (a path). Raises ConfigError for a malformed `\\uXXXX`.
    """
    entries: list[Property] = []
    for line_number, line in _logical_lines(text):
        raw_key, raw_value = _split_key(line)
        where = f"{source}:{line_number}"
        entries.append(
            Property(
                line=line_number,
                key=_unescape(raw_key, where=where),
                value=_unescape(raw_value, where=where),
            )
        )
    return entries
