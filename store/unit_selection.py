"""Which consume-queue units one pull takes: a pure, I/O-free core of `MessageStore.get_messages`.

The rule, per unit in queue order (as RocketMQ's getMessage): a filler, a unit whose record is
below the commitlog's minimum (deleted) and one the tag filter rejects are passed over; a record
is taken unless it would bring the pull past `max_bytes`, which stops the pull there (the first
record of a pull is always taken, whatever its size).

A block of plain units (the usual pull: records only, none deleted, no filter, within the
bytes) is decided with a few calls on whole lists; only other blocks take the per-unit loop.
Python lists rather than numpy: for a pull's few dozen units a numpy call costs more (1-2 µs
each here) than the list built-ins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from store.consume_queue import FILLER_SIZE


class UnitSelection(NamedTuple):
    phys: list[int]  # the records taken, in order
    sizes: list[int]
    picked: Sequence[int]  # their indices in the units given
    passed: int  # units the pull is done with: taken or passed over, before any stop
    total_bytes: int  # the pull's bytes after the records taken
    full: bool  # stopped: the next record would pass `max_bytes`


def select_units(
    phys: list[int],
    sizes: list[int],
    tags: list[int] | None,
    *,
    min_phy_offset: int,
    tags_codes: frozenset[int] | None,
    total_bytes: int,
    max_bytes: int,
    first_of_pull: bool,
) -> UnitSelection:
    """The units (consecutive, in queue order: phyOffset, size and, with `tags_codes`, tagsCode
    of each) a pull takes after `total_bytes` already taken; `first_of_pull` when it has taken
    nothing yet."""
    count = len(phys)
    if tags_codes is None and count:
        block = sum(sizes)
        if block < FILLER_SIZE and total_bytes + block <= max_bytes and min(sizes) > 0 and \
                min(phys) >= min_phy_offset:
            return UnitSelection(phys, sizes, range(count), count, total_bytes + block, False)
    taken_phys: list[int] = []
    taken_sizes: list[int] = []
    picked: list[int] = []
    total = total_bytes
    for index, (phy, size) in enumerate(zip(phys, sizes, strict=True)):
        if size == FILLER_SIZE or phy < min_phy_offset:
            continue
        if tags_codes is not None and tags is not None and tags[index] not in tags_codes:
            continue
        if (picked or not first_of_pull) and total + size > max_bytes:
            return UnitSelection(taken_phys, taken_sizes, picked, index, total, True)
        taken_phys.append(phy)
        taken_sizes.append(size)
        picked.append(index)
        total += size
    return UnitSelection(taken_phys, taken_sizes, picked, count, total, False)
