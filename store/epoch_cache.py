"""The epoch cache: which master epoch wrote which range of the commitlog (docs/ha-protocol.md §6,
§8).

A pure core. `EpochCache` is an immutable list of `EpochEntry(epoch, start_offset, end_offset)`;
every operation returns a new cache, so a shell can persist the new list (epoch_file.py) *before*
it makes it current ("persist the epoch entry before accepting writes"). `find_consistent_point`
is the slave's truncation rule of the HA handshake.

Invariants of an `EpochCache`:
- Epochs strictly increase; start offsets never decrease (docs/reliability.md M8). Breaking either
in
  `append` or at construction raises `DataInvariantError`.
- Ends are derived, never stored: entry i ends where entry i+1 starts; the last entry ends at
  `LONG_MAX` (Java's `Long.MAX_VALUE`, "still open"). Suffix truncations reset the new last end to
  `LONG_MAX`, as Java intends (its in-memory copy quirk, docs/ha-protocol.md §8.2, is not
  reproduced).
- Epochs fit an i32 and offsets an i64, both non-negative (the file cannot store a `-`).

Differences from Java's `EpochFileCache`, on purpose:
- `append` with a start offset *equal* to the last entry's start is accepted (the previous epoch
  then owns an empty range); Java refuses it and serves the new epoch without an entry (§8.3).
  A caller that wants Java's behaviour checks `last_entry().start_offset == start_offset` first.
- A refused append raises instead of returning false: validate remote input (HA TRANSFER headers)
  with `append_allowed` before calling `append`.
- "None" replaces Java's `-1` / `null` results.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from store.errors import DataInvariantError

LONG_MAX: Final = 2**63 - 1
EPOCH_MAX: Final = 2**31 - 1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """One epoch: its number and the commitlog range `[start_offset, end_offset)` it wrote.

    `end_offset` is `LONG_MAX` for an open (last) entry. Raises `ValueError` for a negative or
    oversized epoch or offset, or an end before the start; decoders of remote input must check
    those limits themselves first and raise their own protocol error.
    """

    epoch: int
    start_offset: int
    end_offset: int = LONG_MAX

    def __post_init__(self) -> None:
        if not 0 <= self.epoch <= EPOCH_MAX:
            raise ValueError(f"epoch entry: epoch={self.epoch} outside [0, {EPOCH_MAX}]")
        if not 0 <= self.start_offset <= self.end_offset <= LONG_MAX:
            raise ValueError(
                f"epoch entry {self.epoch}: need 0 <= start_offset={self.start_offset}"
                f" <= end_offset={self.end_offset} <= {LONG_MAX}"
            )

    def contains(self, phy_offset: int) -> bool:
        """`start_offset <= phy_offset < end_offset` (Java `findEpochEntryByOffset`'s test)."""
        return self.start_offset <= phy_offset < self.end_offset


def ordering_violation(pairs: Iterable[tuple[int, int]]) -> str | None:
    """The first broken ordering rule in `(epoch, start_offset)` pairs, or None if they are fine.

    Rules: epochs strictly increase, start offsets never decrease. Used by readers to reject a
    file (and fall back to `.bak`) without raising `DataInvariantError`.
    """
    previous: tuple[int, int] | None = None
    for epoch, start_offset in pairs:
        if previous is not None:
            if epoch <= previous[0]:
                return f"epoch {epoch} after epoch {previous[0]}: epochs must strictly increase"
            if start_offset < previous[1]:
                return (
                    f"epoch {epoch} starts at {start_offset}, before epoch {previous[0]}'s "
                    f"start {previous[1]}: start offsets must not decrease"
                )
        previous = (epoch, start_offset)
    return None


def _with_derived_ends(pairs: Sequence[tuple[int, int]], last_end: int) -> tuple[EpochEntry, ...]:
    entries = []
    for i, (epoch, start_offset) in enumerate(pairs):
        end_offset = pairs[i + 1][1] if i + 1 < len(pairs) else last_end
        entries.append(EpochEntry(epoch, start_offset, end_offset))
    return tuple(entries)


class EpochCache:
    """An immutable, ordered list of epoch entries (see the module docstring for the rules)."""

    __slots__ = ("_entries",)

    _entries: tuple[EpochEntry, ...]

    def __init__(self, entries: Iterable[EpochEntry | tuple[int, int]] = ()) -> None:
        """Build from entries or `(epoch, start_offset)` pairs; given end offsets are ignored
        and re-derived. Raises `DataInvariantError` if the ordering rules are broken."""
        pairs = [
            (e.epoch, e.start_offset) if isinstance(e, EpochEntry) else (e[0], e[1])
            for e in entries
        ]
        if (violation := ordering_violation(pairs)) is not None:
            raise DataInvariantError(f"epoch cache: {violation}")
        self._entries = _with_derived_ends(pairs, LONG_MAX)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[EpochEntry]:
        return iter(self._entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EpochCache):
            return NotImplemented
        return self._entries == other._entries

    def __hash__(self) -> int:
        return hash(self._entries)

    def __repr__(self) -> str:
        inner = " ".join(f"{e.epoch}:{e.start_offset}" for e in self._entries)
        return f"EpochCache({inner})"

    # -- queries -----------------------------------------------------------------------------

    def first_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def last_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def last_epoch(self) -> int | None:
        """The newest epoch, or None when empty (Java's `lastEpoch()` returns -1)."""
        return self._entries[-1].epoch if self._entries else None

    def entry_for_epoch(self, epoch: int) -> EpochEntry | None:
        """The entry of exactly `epoch`, or None (Java `getEntry`)."""
        return next((e for e in self._entries if e.epoch == epoch), None)

    def entry_for_offset(self, phy_offset: int) -> EpochEntry | None:
        """The first entry with `start <= phy_offset < end`, or None (Java
        `findEpochEntryByOffset`). Empty ranges never match."""
        return next((e for e in self._entries if e.contains(phy_offset)), None)

    def next_entry(self, epoch: int) -> EpochEntry | None:
        """The entry with the smallest epoch greater than `epoch`, or None."""
        return next((e for e in self._entries if e.epoch > epoch), None)

    def append_allowed(self, epoch: int, start_offset: int) -> bool:
        """Whether `append(epoch, start_offset)` would keep the ordering rules."""
        last = self.last_entry()
        return last is None or (epoch > last.epoch and start_offset >= last.start_offset)

    # -- changes (each returns a new cache; persist it before using it) ------------------------

    def append(self, epoch: int, start_offset: int) -> EpochCache:
        """Add `(epoch, start_offset)` as the new open last entry; the old last now ends at
        `start_offset`. Raises `DataInvariantError` unless `epoch` is greater than the last epoch
        and `start_offset` is not below the last start."""
        last = self.last_entry()
        if last is not None and not self.append_allowed(epoch, start_offset):
            raise DataInvariantError(
                f"epoch cache: cannot append epoch={epoch} start_offset={start_offset} after "
                f"epoch={last.epoch} start_offset={last.start_offset} (epochs must increase, "
                "start offsets must not decrease)"
            )
        return EpochCache((*self._entries, EpochEntry(epoch, start_offset)))

    def truncate_suffix_by_offset(self, phy_offset: int) -> EpochCache:
        """Drop entries with `start_offset >= phy_offset`; the new last entry is open again
        (Java `truncateSuffixByOffset`, used after cutting the commitlog to `phy_offset`)."""
        return EpochCache(e for e in self._entries if e.start_offset < phy_offset)

    def truncate_suffix_by_epoch(self, epoch: int) -> EpochCache:
        """Drop entries with `epoch >= epoch` (Java `truncateSuffixByEpoch`)."""
        return EpochCache(e for e in self._entries if e.epoch < epoch)

    def truncate_prefix_by_offset(self, phy_offset: int) -> EpochCache:
        """Drop entries with `end_offset <= phy_offset` (Java `truncatePrefixByOffset`).

        Java calls it with `new commitlog min offset - 1` after old files were deleted, so an
        entry ending exactly at the new min offset is kept; the last (open) entry is never
        dropped. Start offsets are not moved (Java's attempt to move the first start acts on a
        copy and has no effect).
        """
        return EpochCache(e for e in self._entries if e.end_offset > phy_offset)

    def drop_beyond(self, max_phy_offset: int) -> EpochCache:
        """Drop entries that start after `max_phy_offset` (recovery, docs/reliability.md M8).

        Such entries describe data the commitlog no longer has (a power loss took the tail after
        the epoch file was written). An entry starting exactly at `max_phy_offset` is kept: a new
        master persists its entry before writing anything.
        """
        return EpochCache(e for e in self._entries if e.start_offset <= max_phy_offset)


def with_end_offset(entries: Sequence[EpochEntry], end_offset: int) -> tuple[EpochEntry, ...]:
    """Entries with ends derived for the consistent-point search (docs/ha-protocol.md §6 step 2).

    Entry i ends at entry i+1's start; the last ends at `end_offset` (the owner's max phy
    offset: the handshake `offset` for the master's list, the local commitlog end for the
    slave's) only if its start is not beyond it, else it stays open (`LONG_MAX`).
    """
    if not entries:
        return ()
    last_start = entries[-1].start_offset
    last_end = end_offset if last_start <= end_offset else LONG_MAX
    return _with_derived_ends([(e.epoch, e.start_offset) for e in entries], last_end)


class NoTruncation(enum.Enum):
    """A consistent-point search that keeps all local data (docs/ha-protocol.md §6 step 1)."""

    # The slave has no epoch entries: Java does not truncate anything and resumes at the local
    # end, even if that data diverges from the master (docs/ha-protocol.md §14 quirk 5).
    LOCAL_EPOCH_CACHE_EMPTY = "local epoch cache empty"


def find_consistent_point(
    local: Sequence[EpochEntry], master: Sequence[EpochEntry]
) -> int | NoTruncation | None:
    """Where the slave's log stops agreeing with the master's (docs/ha-protocol.md §6 steps 1-4).

    Both lists must carry the end offsets of §6 step 2 (see `with_end_offset`). Walks `local`
    from the highest epoch down; the first local entry whose epoch the master also has, with the
    same start offset, gives `min(local.end_offset, master.end_offset)`.

    Returns that offset; `NoTruncation.LOCAL_EPOCH_CACHE_EMPTY` when `local` is empty (truncate
    nothing); None when no epoch matches (no consistent point: truncate nothing, drop the
    connection and retry, as Java does).
    """
    if not local:
        return NoTruncation.LOCAL_EPOCH_CACHE_EMPTY
    master_by_epoch = {m.epoch: m for m in master}
    for entry in sorted(local, key=lambda e: e.epoch, reverse=True):
        match = master_by_epoch.get(entry.epoch)
        if match is not None and match.start_offset == entry.start_offset:
            return min(entry.end_offset, match.end_offset)
    return None
