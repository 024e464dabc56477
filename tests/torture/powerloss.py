"""A simulated power loss: the disk image a store could find after the power went off.

Built from the store's durability journal (store/testhooks.py, docs/reliability.md §6.11) and the
files
as they are at the moment of the power-off (their "new" content), per docs/reliability.md §7.3:

- Append-only mapped files (commitlog, consume queues): the durable prefix is the last `S` end,
  or exactly the offset of a later `T` (a truncation ends with an fsync of the whole file: the
  bytes before its offset and the zeros after it are both durable). Each 4 KiB page after the
  prefix independently keeps its new content (p = 0.4), reverts to its old content (p = 0.4), or
  is torn: the first j x 512 bytes new, the rest old (p = 0.2). The old content past the durable
  prefix is always zeros: files are fallocated fresh, and the only way bytes past a synced
  prefix ever held data is before a truncation, which zeroes them durably.
- Small metadata files (checkpoint, epoch file and `.bak`, abort and `.bak`): the content of the
  last `A` (atomic replace completed, directory fsynced); absent if there was none.
- Files that exist now without any event (the lock file, a leftover `.tmp`) may vanish.
- A file that no longer exists stays gone: the store removes files durably (directory fsync after
  the unlink), and the journal has no event for a removal.

The image is written to a new directory; the live store is not touched.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

PAGE_BYTES: Final = 4096
SECTOR_BYTES: Final = 512
KEEP_NEW: Final = 0.4
REVERT_OLD: Final = 0.4  # the rest (0.2) tears the page
APPEND_ONLY_DIRS: Final = ("commitlog", "consumequeue")
NEVER_COPIED: Final = frozenset({"lock"})


@dataclass(slots=True)
class Journal:
    """The journal's events by path (relative to the store root)."""

    synced: dict[str, int] = field(default_factory=dict)  # durable prefix of append-only files
    created: set[str] = field(default_factory=set)  # `N`: directory entry durable
    replaced: dict[str, bytes] = field(default_factory=dict)  # last `A` content
    replace_history: dict[str, list[bytes]] = field(default_factory=dict)


def parse_journal(lines: Sequence[str]) -> Journal:
    journal = Journal()
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "S":
            path, end = rest.rsplit(" ", 1)
            journal.synced[path] = max(journal.synced.get(path, 0), int(end))
        elif kind == "T":
            path, offset = rest.rsplit(" ", 1)
            journal.synced[path] = int(offset)
        elif kind == "N":
            journal.created.add(rest)
        elif kind == "A":
            path, length, encoded = rest.rsplit(" ", 2)
            data = base64.b64decode(encoded)
            assert len(data) == int(length), f"journal line for {path}: length {length}"
            journal.replaced[path] = data
            journal.replace_history.setdefault(path, []).append(data)
        else:
            raise AssertionError(f"unknown journal line {line!r}")
    return journal


@dataclass(frozen=True, slots=True)
class PowerLossImage:
    """What the image holds, for the checks: which files, how much was durable."""

    journal: Journal
    durable: dict[str, int]  # append-only file -> durable prefix (bytes)
    files: tuple[str, ...]  # paths written to the image
    vanished: tuple[str, ...]  # paths dropped (no journal event)
    torn_pages: int


def _page_model(new: bytes, durable: int, rng: random.Random) -> tuple[bytes, int]:
    """One append-only file's content after the power loss; returns it and the torn pages."""
    image = bytearray(len(new))
    image[:durable] = new[:durable]
    last_data = len(new.rstrip(b"\0"))  # past it new and old content are both zeros
    torn = 0
    for page in range(durable - durable % PAGE_BYTES, last_data, PAGE_BYTES):
        end = min(page + PAGE_BYTES, len(new))
        draw = rng.random()
        if draw < KEEP_NEW:
            keep = end
        elif draw < KEEP_NEW + REVERT_OLD:
            keep = page
        else:
            keep = min(end, page + rng.randint(1, PAGE_BYTES // SECTOR_BYTES - 1) * SECTOR_BYTES)
            torn += 1
        keep = max(keep, min(durable, end))  # the durable prefix is never lost
        image[page:keep] = new[page:keep]
    return bytes(image), torn


def build_power_loss_image(root: Path, lines: Sequence[str], target: Path,
                           rng: random.Random) -> PowerLossImage:
    """Write to `target` the disk a power loss could leave of the store at `root` (see module)."""
    journal = parse_journal(lines)
    written: list[str] = []
    vanished: list[str] = []
    durable: dict[str, int] = {}
    torn = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = str(path.relative_to(root))
        out = target / rel
        if rel in journal.replaced:
            current = path.read_bytes()
            assert current == journal.replaced[rel], (
                f"{rel}: content differs from its last journaled atomic replace")
            data = journal.replaced[rel]
        elif rel.split("/", 1)[0] in APPEND_ONLY_DIRS and rel in journal.created:
            durable[rel] = journal.synced.get(rel, 0)
            data, pages = _page_model(path.read_bytes(), durable[rel], rng)
            torn += pages
        elif rel in NEVER_COPIED or rng.random() < 0.5:
            vanished.append(rel)
            continue
        else:
            data = path.read_bytes()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        written.append(rel)
    target.mkdir(parents=True, exist_ok=True)
    return PowerLossImage(journal, durable, tuple(written), tuple(vanished), torn)


def durable_log_end(image: PowerLossImage, *, file_size: int, log_end: int) -> int:
    """The end of the commitlog's durable prefix in global offsets (every byte below it was
    synced), capped at the log's end at the power-off."""
    end = 0
    starts = sorted(int(rel.split("/")[1]) for rel in image.durable if rel.startswith("commitlog/"))
    for start in starts:
        if start != end:
            break
        prefix = image.durable[f"commitlog/{start:020d}"]
        end = start + prefix
        if prefix < file_size:
            break
    return min(end, log_end)
