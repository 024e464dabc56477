"""The `epochFileCheckpoint` text file and its `.bak` (docs/store-format.md §5): the epoch cache on
disk.

Format (UTF-8, `\\n` line ends):

    <N>\\n                          number of entries, decimal
    <CRC>\\n                        crc32(all entry lines, each with its \\n) & 0x7FFFFFFF, decimal
    <epoch>-<startOffset>\\n        N times, ascending epochs; end offsets are not stored

e.g. entries (7, 7000), (8, 8000) -> "2\\n773307083\\n7-7000\\n8-8000\\n". CRC 0 disables the check.

Invariants:
- Reading follows Java's `CheckpointFile.read` (§5.2): a main file that is absent, fails its
  count/CRC checks, or lists no entry is replaced by `.bak`'s result. pyrmq is stricter in two
  ways: a non-numeric field (or an empty file), and entries breaking the ordering rules of
  epoch_cache.py, are check failures too (Java crashes on the first and sorts the second); and
  when no trustworthy version exists (main bad and `.bak` bad or absent, or main absent and
  `.bak` bad) it raises `EpochFileUnreadableError` instead of starting with an empty cache
  (docs/reliability.md §7.2 g): an empty cache would silently skip the slave's truncation.
- Writing replaces the main file atomically with `.bak` = the previous content (Java readers
  fall back to `.bak`, so it must stay the previous version), fault prefix "epoch.write". A
  damaged previous main file is not copied: `.bak` then keeps its own, good, content.
- An empty list is written as "0\\n0\\n" after removing `.bak` (durably, first): Java never writes
  an empty list (§5.4), and a reader treats an empty main file as "use .bak", so a `.bak` left
  behind would resurrect the entries just truncated away. Removing `.bak` before replacing the
  main file means a crash in between leaves the old, whole main file.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Final

from store.atomic_file import atomic_replace, bak_path_of, delete_durably, store_error
from store.epoch_cache import EPOCH_MAX, LONG_MAX, EpochEntry, ordering_violation
from store.errors import CorruptFileError, EpochFileUnreadableError

EPOCH_FILE_NAME: Final = "epochFileCheckpoint"
EMPTY_EPOCH_FILE: Final = b"0\n0\n"
# CheckpointFile.NOT_CHECK_CRC_MAGIC_CODE: a stored CRC of 0 means "do not check".
NOT_CHECK_CRC: Final = 0

_I32_MIN: Final = -(2**31)
_I32_MAX: Final = 2**31 - 1
_I64_MIN: Final = -(2**63)
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")
# Java's Integer.parseInt / Long.parseLong on ASCII input: optional sign, then digits.
_JAVA_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")


def epoch_file_crc(entry_lines: bytes) -> int:
    """RocketMQ's `UtilAll.crc32` of the entry lines (each including its line break)."""
    return zlib.crc32(entry_lines) & 0x7FFFFFFF


def serialize_epoch_entries(entries: Sequence[EpochEntry]) -> bytes:
    """The file content for `entries` (ordered as in an `EpochCache`; ends are not stored)."""
    if (violation := ordering_violation((e.epoch, e.start_offset) for e in entries)) is not None:
        raise ValueError(f"epoch file entries: {violation}")
    lines = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries).encode()
    return f"{len(entries)}\n{epoch_file_crc(lines)}\n".encode() + lines


def _java_lines(text: str) -> list[str]:
    """Lines as `BufferedReader.readLine` returns them (\\n, \\r or \\r\\n end a line)."""
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # text ending with a line break has no extra empty line
    return lines


def _java_split(line: str, separator: str) -> list[str]:
    """`String.split(separator)` for a plain one-character separator: trailing empties drop."""
    parts = line.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _java_int(text: str, low: int, high: int, what: str) -> int:
    if _JAVA_DECIMAL.fullmatch(text) is None or not low <= int(text) <= high:
        raise ValueError(f"{what} {text!r} is not a decimal in [{low}, {high}]")
    return int(text)


def _parse_lines(lines: Sequence[str]) -> tuple[int, int, list[tuple[int, int]]]:
    """Count, CRC and `(epoch, start_offset)` pairs; `ValueError` for a non-numeric field."""
    if len(lines) < 2:
        raise ValueError(f"only {len(lines)} line(s); need the count and CRC lines")
    expected_count = _java_int(lines[0], _I32_MIN, _I32_MAX, "count")
    expected_crc = _java_int(lines[1], _I32_MIN, _I32_MAX, "crc")
    pairs: list[tuple[int, int]] = []
    for line in lines[2:]:
        parts = _java_split(line, "-")
        if len(parts) == 2:
            epoch = _java_int(parts[0], _I32_MIN, _I32_MAX, "epoch")
            start_offset = _java_int(parts[1], _I64_MIN, LONG_MAX, "start offset")
            pairs.append((epoch, start_offset))
    return expected_count, expected_crc, pairs


def parse_epoch_file(data: bytes, *, path: Path | str = EPOCH_FILE_NAME) -> tuple[EpochEntry, ...]:
    """Decode and check one epoch file's bytes; `path` only names it in errors.

    Returns the entries with ends derived (last end `LONG_MAX`). Raises `CorruptFileError`
    naming the file and the failed check: bad UTF-8, missing or non-numeric count or CRC line,
    non-numeric entry field, count mismatch, CRC mismatch (unless the stored CRC is 0), or
    entries that break the epoch ordering rules. Lines that do not split into exactly two parts
    on `-` are ignored, as in Java (they still count for the CRC).
    """
    try:
        lines = _java_lines(data.decode("utf-8"))
        expected_count, expected_crc, pairs = _parse_lines(lines)
    except (UnicodeDecodeError, ValueError) as err:
        raise CorruptFileError(f"epoch file {path}: {err}") from err
    if len(pairs) != expected_count:
        raise CorruptFileError(
            f"epoch file {path}: count line says {expected_count}, found {len(pairs)} entries"
        )
    actual_crc = epoch_file_crc("".join(line + "\n" for line in lines[2:]).encode())
    if expected_crc not in (NOT_CHECK_CRC, actual_crc):
        raise CorruptFileError(
            f"epoch file {path}: crc32 {expected_crc:#010x} != {actual_crc:#010x}"
        )
    for epoch, start_offset in pairs:
        if not 0 <= epoch <= EPOCH_MAX or start_offset < 0:
            raise CorruptFileError(
                f"epoch file {path}: entry {epoch}-{start_offset} has a negative value"
            )
    if (violation := ordering_violation(pairs)) is not None:
        raise CorruptFileError(f"epoch file {path}: {violation}")
    entries = [
        EpochEntry(epoch, start, pairs[i + 1][1] if i + 1 < len(pairs) else LONG_MAX)
        for i, (epoch, start) in enumerate(pairs)
    ]
    return tuple(entries)


class EpochFileSource(Enum):
    """Which file `read_epoch_file` took its entries from."""

    MAIN = "main"
    BAK = "bak"
    NONE = "none"  # neither file exists: a store that never had an epoch


@dataclass(frozen=True, slots=True)
class EpochFileLoad:
    """Result of `read_epoch_file`.

    `source` says where `entries` came from; `main_problem` says why the main file was not
    used when `source` is BAK or NONE (None when it was used, or when both files are absent).
    The caller logs a WARNING when `.bak` was used and re-checks the entries against the
    commitlog (recovery: `EpochCache.drop_beyond(max_phy_offset)`).
    """

    entries: tuple[EpochEntry, ...]
    source: EpochFileSource
    main_problem: str | None = None


@dataclass(frozen=True, slots=True)
class _Read:
    entries: tuple[EpochEntry, ...] | None  # None: absent or bad
    problem: str | None  # None: read fine or absent


def _read_one(path: Path) -> _Read:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return _Read(None, None)
    except OSError as err:
        # An I/O error on one copy is a failed check: the other copy may still be readable.
        return _Read(None, str(store_error(path, "read of", err)))
    try:
        return _Read(parse_epoch_file(data, path=path), None)
    except CorruptFileError as err:
        return _Read(None, str(err))


def read_epoch_file(path: Path) -> EpochFileLoad:
    """Load the epoch entries from `path`, falling back to `<path>.bak` (module docstring).

    Raises `EpochFileUnreadableError` (naming both files and why each failed) when the main
    file is bad and `.bak` is bad or absent, or the main file is absent and `.bak` is bad.
    """
    main = _read_one(path)
    if main.entries:
        return EpochFileLoad(main.entries, EpochFileSource.MAIN)
    if main.problem is not None:
        main_problem = main.problem
    elif main.entries is None:
        main_problem = f"epoch file {path}: absent"
    else:
        main_problem = f"epoch file {path}: lists no entry"
    bak_path = bak_path_of(path)
    bak = _read_one(bak_path)
    if bak.entries is not None:
        return EpochFileLoad(bak.entries, EpochFileSource.BAK, main_problem)
    if bak.problem is None:  # .bak absent
        if main.entries is not None:
            return EpochFileLoad((), EpochFileSource.MAIN)  # pyrmq's deliberate empty list
        if main.problem is None:
            return EpochFileLoad((), EpochFileSource.NONE)  # neither file exists
        raise EpochFileUnreadableError(
            f"epoch file unreadable: {main.problem}; and {bak_path} is absent"
        )
    if main.entries is not None:
        # Main valid and empty: pyrmq removes .bak before writing an empty list, so the empty
        # main file is the newest truth and the damaged .bak is an older version.
        return EpochFileLoad((), EpochFileSource.MAIN)
    raise EpochFileUnreadableError(f"epoch file unreadable: {main_problem}; and {bak.problem}")


def write_epoch_file(path: Path, entries: Sequence[EpochEntry]) -> None:
    """Persist `entries` durably (blocking: call it off the event loop).

    Non-empty: `.bak` := the current main content if it is readable (else `.bak` is kept), then
    the main file := the new content.
    Empty: remove `.bak`, then the main file := "0\\n0\\n" (see the module docstring).
    Raises `DiskFullError` / `StoreIOError` naming the file; `ValueError` if `entries` break
    the ordering rules.
    """
    if not entries:
        delete_durably(bak_path_of(path))
        atomic_replace(path, EMPTY_EPOCH_FILE, fault_prefix="epoch.write")
        return
    content = serialize_epoch_entries(entries)
    # A damaged main file (the entries were loaded from `.bak`) must not become the fallback:
    # then `.bak` stays the good version it is.
    keep_bak = _read_one(path).entries is not None
    atomic_replace(path, content, keep_bak=keep_bak, fault_prefix="epoch.write")
