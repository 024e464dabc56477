"""The epoch cache and its file against a plain list of `(epoch, start_offset)` pairs.

Each change is persisted as the shell does it (write the file, then adopt the new cache); a
reload must give back exactly the memory state, and a damaged main file must give back the
previous version from `.bak` (or a typed error once `.bak` was removed by an empty write).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from store.epoch_cache import LONG_MAX, EpochCache
from store.epoch_file import EPOCH_FILE_NAME, EpochFileSource, read_epoch_file, write_epoch_file
from store.errors import DataInvariantError, EpochFileUnreadableError

Pairs = list[tuple[int, int]]


def _ends(model: Pairs) -> list[int]:
    return [model[i + 1][1] for i in range(len(model) - 1)] + ([LONG_MAX] if model else [])


class EpochCacheMachine(RuleBasedStateMachine):
    # Bound per test (a subclass sets them) so every run gets a fresh directory under tmp_path.
    root: ClassVar[Path]
    runs: ClassVar[Iterator[int]]

    def __init__(self) -> None:
        super().__init__()
        directory = self.root / str(next(self.runs))
        directory.mkdir()
        self.path = directory / EPOCH_FILE_NAME
        self.cache = EpochCache()
        self.model: Pairs = []
        self.file_model: Pairs | None = None  # what the main file holds (None: absent)
        self.bak_model: Pairs | None = None  # what `.bak` holds (None: absent)

    def _persist(self, new: EpochCache) -> None:
        write_epoch_file(self.path, new.entries)  # durable first, then adopt (house rule)
        self.cache = new
        self.model = [(e.epoch, e.start_offset) for e in new]
        if not self.model:
            self.bak_model = None
        elif self.file_model is not None:
            self.bak_model = self.file_model
        self.file_model = list(self.model)

    def _offset(self, data: st.DataObject) -> int:
        """An offset, often exactly at or next to an entry boundary (where rules differ)."""
        near = sorted({max(s + d, 0) for _, s in self.model for d in (-1, 0, 1)})
        boundary = st.sampled_from(near) if near else st.just(0)
        return data.draw(st.one_of(boundary, st.integers(0, 3000)))

    @rule(epoch_step=st.integers(-1, 3), start_step=st.integers(-50, 300))
    def append(self, epoch_step: int, start_step: int) -> None:
        last_epoch, last_start = self.model[-1] if self.model else (0, 0)
        epoch, start = max(last_epoch + epoch_step, 0), max(last_start + start_step, 0)
        if not self.model or (epoch > last_epoch and start >= last_start):
            self._persist(self.cache.append(epoch, start))
        else:
            with pytest.raises(DataInvariantError):
                self.cache.append(epoch, start)

    @rule(data=st.data())
    def truncate_suffix_by_offset(self, data: st.DataObject) -> None:
        offset = self._offset(data)
        expected = [p for p in self.model if p[1] < offset]
        self._persist(self.cache.truncate_suffix_by_offset(offset))
        assert self.model == expected

    @rule(epoch=st.integers(0, 40))
    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        expected = [p for p in self.model if p[0] < epoch]
        self._persist(self.cache.truncate_suffix_by_epoch(epoch))
        assert self.model == expected

    @rule(data=st.data())
    def truncate_prefix_by_offset(self, data: st.DataObject) -> None:
        offset = self._offset(data)
        expected = [p for p, end in zip(self.model, _ends(self.model), strict=True) if end > offset]
        self._persist(self.cache.truncate_prefix_by_offset(offset))
        assert self.model == expected

    @rule(data=st.data())
    def drop_beyond(self, data: st.DataObject) -> None:
        max_phy_offset = self._offset(data)
        expected = [p for p in self.model if p[1] <= max_phy_offset]
        self._persist(self.cache.drop_beyond(max_phy_offset))
        assert self.model == expected

    @rule()
    def reload(self) -> None:
        loaded = read_epoch_file(self.path)
        assert loaded.entries == self.cache.entries
        self.cache = EpochCache(loaded.entries)

    @rule()
    def damaged_main_file_falls_back_to_bak(self) -> None:
        if self.file_model is None:
            return
        good = self.path.read_bytes()
        count, rest = good.split(b"\n", 1)
        self.path.write_bytes(b"%d\n" % (int(count) + 1) + rest)  # count no longer matches
        try:
            if self.bak_model is None:
                with pytest.raises(EpochFileUnreadableError):
                    read_epoch_file(self.path)
            else:
                loaded = read_epoch_file(self.path)
                assert loaded.source is EpochFileSource.BAK
                assert [(e.epoch, e.start_offset) for e in loaded.entries] == self.bak_model
        finally:
            self.path.write_bytes(good)

    @invariant()
    def memory_matches_the_plain_list(self) -> None:
        assert [(e.epoch, e.start_offset) for e in self.cache] == self.model
        assert [e.end_offset for e in self.cache] == _ends(self.model)
        for (epoch_a, start_a), (epoch_b, start_b) in itertools.pairwise(self.model):
            assert epoch_a < epoch_b
            assert start_a <= start_b


def test_epoch_cache_and_file_follow_a_plain_list(tmp_path: Path) -> None:
    class Machine(EpochCacheMachine):
        root = tmp_path
        runs = itertools.count()

    run_state_machine_as_test(
        Machine, settings=settings(max_examples=60, stateful_step_count=30, deadline=None)
    )
