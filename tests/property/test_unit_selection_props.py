"""A pull's unit selection for every input: the whole-block shortcut and the per-unit loop of
`select_units` equal the rule applied one unit at a time, across blocks as get_messages calls it."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from store.consume_queue import FILLER_SIZE
from store.unit_selection import select_units

Unit = tuple[int, int, int]  # phyOffset, size, tagsCode

units_strategy = st.lists(
    st.tuples(
        st.integers(0, 5_000),
        # mostly records, so that whole plain blocks come often
        st.one_of(st.integers(1, 1_200), st.integers(1, 1_200), st.integers(1, 1_200),
                  st.sampled_from([-1, 0, FILLER_SIZE])),
        st.integers(0, 4),
    ),
    min_size=1,
    max_size=40,
)


def rule_one_by_one(units: list[Unit], *, min_phy: int, codes: frozenset[int] | None,
                    max_bytes: int) -> tuple[list[int], int]:
    """(indices taken, units passed): the rule read straight from the module's docstring."""
    taken: list[int] = []
    total = 0
    for index, (phy, size, tags) in enumerate(units):
        if size == FILLER_SIZE or phy < min_phy or (codes is not None and tags not in codes):
            continue
        if taken and total + size > max_bytes:
            return taken, index
        taken.append(index)
        total += size
    return taken, len(units)


@settings(max_examples=500)  # cheap: a few ms each
# a negative size (an invalid unit) lowers the block's sum below a prefix that is already over
@example(units=[(0, 5, 0), (10, 100, 0), (200, -10, 0)], min_phy=0, codes=None, max_bytes=100,
         block_size=3)
@given(
    units=units_strategy,
    min_phy=st.one_of(st.just(0), st.integers(0, 3_000)),
    codes=st.one_of(st.none(), st.frozensets(st.integers(0, 4), max_size=3)),
    max_bytes=st.one_of(st.integers(0, 20_000), st.just(FILLER_SIZE * 2)),
    block_size=st.one_of(st.integers(1, 4), st.integers(1, 40)),
)
def test_select_units_in_blocks_equals_the_rule_one_unit_at_a_time(
    units: list[Unit], min_phy: int, codes: frozenset[int] | None, max_bytes: int,
    block_size: int,
) -> None:
    taken: list[int] = []
    phys: list[int] = []
    sizes: list[int] = []
    total = 0
    at = 0
    while at < len(units):  # as get_messages walks a queue's files, block by block
        block = units[at : at + block_size]
        chosen = select_units(
            [u[0] for u in block], [u[1] for u in block], [u[2] for u in block],
            min_phy_offset=min_phy, tags_codes=codes, total_bytes=total,
            max_bytes=max_bytes, first_of_pull=not taken,
        )
        assert chosen.phys == [block[i][0] for i in chosen.picked]
        assert chosen.sizes == [block[i][1] for i in chosen.picked]
        assert chosen.total_bytes == total + sum(chosen.sizes)
        taken += [at + i for i in chosen.picked]
        phys += chosen.phys
        sizes += chosen.sizes
        total = chosen.total_bytes
        at += chosen.passed
        if chosen.full:
            break
        assert chosen.passed == len(block)
    assert (taken, at) == rule_one_by_one(units, min_phy=min_phy, codes=codes,
                                          max_bytes=max_bytes)
