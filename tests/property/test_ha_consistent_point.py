"""The slave's consistent point (store/epoch_cache.find_consistent_point, used by the HA
handshake): RocketMQ's four golden vectors (docs/reliability.md §2, EpochFileCacheTest) and a
hypothesis search against a naive reference that labels every byte with its epoch.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.epoch_cache import LONG_MAX, EpochEntry, find_consistent_point, with_end_offset


def entries(drawing: str, end: int | None = None) -> tuple[EpochEntry, ...]:
    """`"<1,100><2,300>"` -> entries (epoch, start); the last ends at `end` (else open)."""
    pairs = [tuple(int(x) for x in item.split(",")) for item in drawing.strip("<>").split("><")]
    made = with_end_offset(tuple(EpochEntry(e, s) for e, s in pairs), LONG_MAX)
    if end is None:
        return made
    return with_end_offset(made, end)


@pytest.mark.parametrize(
    ("local", "master", "expected"),
    [
        pytest.param(entries("<1,100><2,300><3,500>"), entries("<1,100><2,300><3,450>"), 450,
                     id="sample1-epoch3-start-differs"),
        pytest.param(entries("<1,100><2,300><3,500>", 700), entries("<1,100><2,300><3,500>", 600),
                     600, id="sample2-master-shorter"),
        pytest.param(entries("<1,100><2,300><3,500>", 700), entries("<1,200><2,500>"), None,
                     id="sample3-no-consistent-point"),
        pytest.param(entries("<1,100><2,300><3,500><4,800>"),
                     entries("<1,100><2,300><3,500>", 700), 700, id="sample4-master-lacks-4"),
    ],
)
def test_rocketmq_golden_vectors(
    local: tuple[EpochEntry, ...], master: tuple[EpochEntry, ...], expected: int | None
) -> None:
    assert find_consistent_point(local, master) == expected


def _labels(pairs: list[tuple[int, int]], end: int) -> list[int]:
    """The epoch that wrote each byte of [0, end) (bytes before the first start: -1)."""
    out = []
    for offset in range(end):
        owner = -1
        for epoch, start in pairs:
            if start <= offset:
                owner = epoch
        out.append(owner)
    return out


def naive_consistent_point(
    local: list[tuple[int, int]], local_end: int, master: list[tuple[int, int]], master_end: int
) -> int | None:
    """No shared epoch: None. Else the longest prefix both logs label identically."""
    if not {e for e, _ in local} & {e for e, _ in master}:
        return None
    a, b = _labels(local, local_end), _labels(master, master_end)
    point = 0
    while point < min(len(a), len(b)) and a[point] == b[point]:
        point += 1
    return point


@st.composite
def diverged_logs(
    draw: st.DrawFn,
) -> tuple[list[tuple[int, int]], int, list[tuple[int, int]], int]:
    """A common history of epochs, then each side's own epochs (distinct numbers): what two
    brokers hold after the master changed while one of them wrote unreplicated data."""
    common_lengths = draw(st.lists(st.integers(1, 20), min_size=1, max_size=4))
    epochs = sorted(draw(st.sets(st.integers(1, 60), min_size=len(common_lengths) + 6,
                                 max_size=len(common_lengths) + 6)))
    common, rest = epochs[: len(common_lengths)], epochs[len(common_lengths):]
    pairs, start = [], 0
    for epoch, length in zip(common, common_lengths, strict=True):
        pairs.append((epoch, start))
        start += length
    last_start = pairs[-1][1]

    def side(own: list[int]) -> tuple[list[tuple[int, int]], int]:
        # How much of the last common epoch this side holds, then its own epochs.
        end = last_start + draw(st.integers(0, 20))
        chosen = sorted(draw(st.lists(st.sampled_from(own), max_size=3, unique=True)))
        side_pairs = list(pairs)
        for epoch in chosen:
            side_pairs.append((epoch, end))
            end += draw(st.integers(1, 20))
        return side_pairs, end

    split = draw(st.permutations(rest))
    local, local_end = side(sorted(split[:3]))
    master, master_end = side(sorted(split[3:]))
    return local, local_end, master, master_end


@given(logs=diverged_logs())
def test_consistent_point_equals_the_naive_labelling(
    logs: tuple[list[tuple[int, int]], int, list[tuple[int, int]], int],
) -> None:
    local, local_end, master, master_end = logs
    found = find_consistent_point(
        with_end_offset(tuple(EpochEntry(e, s) for e, s in local), local_end),
        with_end_offset(tuple(EpochEntry(e, s) for e, s in master), master_end),
    )
    assert found == naive_consistent_point(local, local_end, master, master_end)
