"""The epoch cache core: ordering rules, truncations, and the consistent-point search.

Entries are drawn as `epoch:start..end` (`MAX` = Long.MAX_VALUE); a cache is drawn by starts
only (`epoch:start`), its ends being derived.
"""

from __future__ import annotations

import pytest

from store.epoch_cache import (
    LONG_MAX,
    EpochCache,
    EpochEntry,
    NoTruncation,
    find_consistent_point,
    ordering_violation,
    with_end_offset,
)
from store.errors import DataInvariantError


def epochs(drawing: str) -> list[EpochEntry]:
    """`"1:0..100 2:100..MAX"` -> entries with exactly those ends."""
    entries = []
    for item in drawing.split():
        epoch, _, span = item.partition(":")
        start, _, end = span.partition("..")
        entries.append(EpochEntry(int(epoch), int(start), LONG_MAX if end == "MAX" else int(end)))
    return entries


def cache(drawing: str) -> EpochCache:
    """`"1:0 2:100"` -> a cache with those (epoch, start) pairs."""
    pairs = []
    for item in drawing.split():
        epoch, _, start = item.partition(":")
        pairs.append((int(epoch), int(start)))
    return EpochCache(pairs)


def test_cache_derives_ends_from_the_next_start_and_leaves_the_last_open() -> None:
    assert cache("1:0 2:100 3:250").entries == tuple(epochs("1:0..100 2:100..250 3:250..MAX"))


def test_cache_ignores_given_end_offsets() -> None:
    assert EpochCache(epochs("1:0..5 2:100..700")) == cache("1:0 2:100")


@pytest.mark.parametrize(
    "drawing",
    [
        pytest.param("2:0 1:100", id="epoch-goes-back"),
        pytest.param("1:0 1:100", id="epoch-repeats"),
        pytest.param("1:100 2:50", id="start-goes-back"),
    ],
)
def test_cache_refuses_broken_ordering(drawing: str) -> None:
    with pytest.raises(DataInvariantError, match="epoch cache"):
        cache(drawing)


def test_ordering_violation_names_the_rule() -> None:
    assert ordering_violation([(1, 0), (2, 100)]) is None
    assert "strictly increase" in (ordering_violation([(2, 0), (2, 5)]) or "")
    assert "must not decrease" in (ordering_violation([(1, 10), (2, 5)]) or "")


@pytest.mark.parametrize(
    ("before", "epoch", "start", "after"),
    [
        pytest.param("", 5, 0, "5:0", id="first-entry"),
        pytest.param("1:0 2:100", 3, 300, "1:0 2:100 3:300", id="normal"),
        pytest.param("1:0 2:100", 7, 300, "1:0 2:100 7:300", id="epochs-may-skip"),
        pytest.param("1:0 2:100", 3, 100, "1:0 2:100 3:100", id="equal-start-allowed"),
    ],
)
def test_append(before: str, epoch: int, start: int, after: str) -> None:
    assert cache(before).append(epoch, start) == cache(after)


@pytest.mark.parametrize(
    ("epoch", "start"),
    [
        pytest.param(2, 200, id="same-epoch"),
        pytest.param(1, 200, id="older-epoch"),
        pytest.param(3, 99, id="start-before-last-start"),
    ],
)
def test_append_breaking_the_order_raises_and_changes_nothing(epoch: int, start: int) -> None:
    before = cache("1:0 2:100")
    assert not before.append_allowed(epoch, start)
    with pytest.raises(DataInvariantError, match=f"epoch={epoch} start_offset={start}"):
        before.append(epoch, start)
    assert before == cache("1:0 2:100")


def test_append_closes_the_previous_last_entry() -> None:
    after = cache("1:0").append(2, 100)
    assert after.entries[0] == EpochEntry(1, 0, 100)
    assert after.last_entry() == EpochEntry(2, 100, LONG_MAX)


@pytest.mark.parametrize(
    ("offset", "after"),
    [
        pytest.param(251, "1:0 2:100 3:250", id="beyond-every-start"),
        pytest.param(250, "1:0 2:100", id="at-last-start"),
        pytest.param(101, "1:0 2:100", id="inside-epoch-2"),
        pytest.param(100, "1:0", id="at-epoch-2-start"),
        pytest.param(0, "", id="everything"),
    ],
)
def test_truncate_suffix_by_offset(offset: int, after: str) -> None:
    result = cache("1:0 2:100 3:250").truncate_suffix_by_offset(offset)
    assert result == cache(after)
    last = result.last_entry()
    # The new last entry is open again (Java intends this; its copy quirk is not reproduced).
    assert last is None or last.end_offset == LONG_MAX


@pytest.mark.parametrize(
    ("epoch", "after"),
    [
        pytest.param(4, "1:0 2:100 3:250", id="newer-than-all"),
        pytest.param(3, "1:0 2:100", id="last"),
        pytest.param(2, "1:0", id="middle"),
        pytest.param(1, "", id="all"),
    ],
)
def test_truncate_suffix_by_epoch(epoch: int, after: str) -> None:
    assert cache("1:0 2:100 3:250").truncate_suffix_by_epoch(epoch) == cache(after)


@pytest.mark.parametrize(
    ("offset", "after"),
    [
        pytest.param(99, "1:0 2:100 3:250", id="min-offset-100-keeps-epoch-1"),
        pytest.param(100, "2:100 3:250", id="epoch-1-ends-at-offset"),
        pytest.param(249, "2:100 3:250", id="inside-epoch-2"),
        pytest.param(250, "3:250", id="epoch-2-ends-at-offset"),
        pytest.param(10**15, "3:250", id="open-last-entry-stays"),
    ],
)
def test_truncate_prefix_by_offset(offset: int, after: str) -> None:
    assert cache("1:0 2:100 3:250").truncate_prefix_by_offset(offset) == cache(after)


@pytest.mark.parametrize(
    ("max_phy_offset", "after"),
    [
        pytest.param(10**9, "1:0 2:100 3:250", id="all-data-present"),
        pytest.param(250, "1:0 2:100 3:250", id="entry-at-max-phy-kept"),
        pytest.param(249, "1:0 2:100", id="power-loss-took-epoch-3"),
        pytest.param(0, "1:0", id="empty-commitlog"),
    ],
)
def test_drop_beyond(max_phy_offset: int, after: str) -> None:
    assert cache("1:0 2:100 3:250").drop_beyond(max_phy_offset) == cache(after)


def test_queries() -> None:
    c = cache("1:0 2:100 3:100 4:300")
    assert c.first_entry() == EpochEntry(1, 0, 100)
    assert c.last_entry() == EpochEntry(4, 300, LONG_MAX)
    assert c.last_epoch() == 4
    assert c.entry_for_epoch(3) == EpochEntry(3, 100, 300)
    assert c.entry_for_epoch(5) is None
    assert c.next_entry(1) == EpochEntry(2, 100, 100)
    assert c.next_entry(4) is None
    assert len(c) == 4
    assert [e.epoch for e in c] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("offset", "epoch"),
    [
        pytest.param(0, 1, id="first-byte"),
        pytest.param(99, 1, id="last-byte-of-1"),
        pytest.param(100, 3, id="empty-epoch-2-never-matches"),
        pytest.param(299, 3, id="last-byte-of-3"),
        pytest.param(10**15, 4, id="open-last"),
    ],
)
def test_entry_for_offset(offset: int, epoch: int) -> None:
    entry = cache("1:0 2:100 3:100 4:300").entry_for_offset(offset)
    assert entry is not None
    assert entry.epoch == epoch


def test_empty_cache_queries_return_none() -> None:
    c = EpochCache()
    assert c.first_entry() is None
    assert c.last_entry() is None
    assert c.last_epoch() is None
    assert c.entry_for_offset(0) is None
    assert c.next_entry(0) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"epoch": -1, "start_offset": 0}, "epoch=-1", id="negative-epoch"),
        pytest.param({"epoch": 2**31, "start_offset": 0}, "epoch=", id="epoch-beyond-i32"),
        pytest.param({"epoch": 1, "start_offset": -1}, "start_offset=-1", id="negative-start"),
        pytest.param({"epoch": 1, "start_offset": 5, "end_offset": 4}, "end_offset=4", id="end"),
    ],
)
def test_epoch_entry_limits(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EpochEntry(**kwargs)


@pytest.mark.parametrize(
    ("starts", "end_offset", "expected"),
    [
        pytest.param("1:0 2:100", 300, "1:0..100 2:100..300", id="end-after-last-start"),
        pytest.param("1:0 2:100", 100, "1:0..100 2:100..100", id="end-at-last-start"),
        pytest.param("1:0 2:1000", 800, "1:0..1000 2:1000..MAX", id="last-start-beyond-end"),
        pytest.param("", 500, "", id="empty"),
    ],
)
def test_with_end_offset(starts: str, end_offset: int, expected: str) -> None:
    assert with_end_offset(cache(starts).entries, end_offset) == tuple(epochs(expected))


# docs/ha-protocol.md §6, worked examples (plus the quirk-7 counterfactual and an empty master).
@pytest.mark.parametrize(
    ("local", "master", "expected"),
    [
        pytest.param("1:0..100 2:100..300", "1:0..100 2:100..250", 250, id="master-shorter"),
        pytest.param("1:0..100 2:100..300", "1:0..100 3:100..400", 100, id="diverged-at-2"),
        pytest.param("1:0..100 2:100..300", "1:0..150 2:150..400", 100, id="start-differs"),
        pytest.param("1:0..500", "1:0..300 2:300..900", 300, id="old-master-unreplicated"),
        pytest.param(
            "1:0..1000 2:1000..MAX", "1:0..1000 2:1000..1500", 1500, id="point-beyond-local"
        ),
        pytest.param("1:0..100", "2:0..50", None, id="no-common-epoch"),
        pytest.param("2:1000..5000", "1:0..500 3:500..900", None, id="missing-epoch-1"),
        pytest.param("1:0..1000 2:1000..5000", "1:0..500 3:500..900", 500, id="with-epoch-1"),
        pytest.param("1:0..100", "", None, id="empty-master"),
        pytest.param(
            "", "1:0..100", NoTruncation.LOCAL_EPOCH_CACHE_EMPTY, id="empty-local-no-truncation"
        ),
    ],
)
def test_find_consistent_point(
    local: str, master: str, expected: int | NoTruncation | None
) -> None:
    assert find_consistent_point(epochs(local), epochs(master)) == expected


def test_find_consistent_point_from_starts_and_max_offsets() -> None:
    """The spec's row 5 built as the slave does: starts from the files, ends from max offsets."""
    local = with_end_offset(cache("1:0 2:1000").entries, 800)
    master = with_end_offset(cache("1:0 2:1000").entries, 1500)
    assert find_consistent_point(local, master) == 1500
