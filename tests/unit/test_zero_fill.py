"""Zero-filling ahead of the commitlog's writer (`MappedFile.zero_fill`, `MappedFile.claim`):
zeros land only past every byte written or claimed, a writer claiming into a zero-fill waits
for it, a zero-fill a writer overtakes backs off, and concurrent writes all survive."""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import mapped_file
from store.hot_folio import FOLIO_BYTES
from store.mapped_file import NO_ZERO_FILL, PAGE_SIZE, ZERO_FILL_CALL_BYTES, MappedFile

FILE_BYTES = 1024 * 1024
MARK = 0xAB


@contextlib.contextmanager
def marked_file(directory: Path, size: int) -> Iterator[MappedFile]:
    """A file of `size` bytes, every one MARK, nothing written yet."""
    mapped = MappedFile.create(directory / f"{0:020d}", size)
    try:
        mapped.buf[:] = bytes([MARK]) * size
        yield mapped
    finally:
        mapped.close()


@pytest.fixture
def marked(tmp_path: Path) -> Iterator[MappedFile]:
    with marked_file(tmp_path, FILE_BYTES) as mapped:
        yield mapped


def test_zeros_go_only_past_what_was_written_or_claimed(marked: MappedFile) -> None:
    marked.wrote_position = 5000
    marked.claim(9000)  # a write announced past the write position
    marked.zero_fill(0, 64 * 1024)
    first_zero = -(-9000 // PAGE_SIZE) * PAGE_SIZE
    assert marked.buf[:first_zero] == bytes([MARK]) * first_zero
    assert marked.buf[first_zero : 64 * 1024] == bytes(64 * 1024 - first_zero)
    assert marked.buf[64 * 1024 : 64 * 1024 + 10] == bytes([MARK]) * 10
    assert marked.zeroing_from == NO_ZERO_FILL


def test_zeros_go_to_the_kernel_in_folio_sized_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write is at most ZERO_FILL_CALL_BYTES (the size of the page-cache folios it makes),
    and together they cover the range once, in order."""
    size = 3 * ZERO_FILL_CALL_BYTES + 5 * PAGE_SIZE
    calls: list[tuple[int, int]] = []
    real_pwrite = os.pwrite

    def recording_pwrite(fd: int, data: memoryview, pos: int) -> int:
        calls.append((pos, len(data)))
        return real_pwrite(fd, data, pos)

    with marked_file(tmp_path, size) as mapped:
        monkeypatch.setattr(os, "pwrite", recording_pwrite)
        mapped.wrote_position = 5000
        mapped.zero_fill(0, size)
        assert all(0 < length <= ZERO_FILL_CALL_BYTES for _, length in calls)
        assert [pos for pos, _ in calls] == list(range(2 * PAGE_SIZE, size, ZERO_FILL_CALL_BYTES))
        assert sum(length for _, length in calls) == size - 2 * PAGE_SIZE
        assert mapped.buf[: 2 * PAGE_SIZE] == bytes([MARK]) * 2 * PAGE_SIZE
        assert mapped.buf[2 * PAGE_SIZE :] == bytes(size - 2 * PAGE_SIZE)


@pytest.mark.parametrize("wrote", [0, 5000])
def test_each_write_that_makes_a_whole_folio_gets_a_hot_block_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrote: int
) -> None:
    """`hot_folio.heat_next_folio` runs right before each write of a whole, aligned 2 MiB
    folio, and before no other write (one not aligned, or the short tail, makes no such
    folio: a hot 2 MiB block would wait unused)."""
    size = 3 * ZERO_FILL_CALL_BYTES + 5 * PAGE_SIZE
    events: list[tuple[str, int]] = []
    real_pwrite = os.pwrite

    def recording_pwrite(fd: int, data: memoryview, pos: int) -> int:
        events.append(("write", pos))
        return real_pwrite(fd, data, pos)

    def recording_heat() -> bool:
        events.append(("heat", -1))
        return True

    with marked_file(tmp_path, size) as mapped:
        monkeypatch.setattr(os, "pwrite", recording_pwrite)
        monkeypatch.setattr(mapped_file, "heat_next_folio", recording_heat)
        mapped.wrote_position = wrote
        mapped.zero_fill(0, size)
    heated_writes = [events[i + 1][1] for i, (kind, _) in enumerate(events) if kind == "heat"]
    aligned = [pos for kind, pos in events if kind == "write"
               and pos % FOLIO_BYTES == 0 and pos + FOLIO_BYTES <= size]
    assert heated_writes == aligned
    assert len(aligned) == (3 if wrote == 0 else 0)


def test_a_writer_claiming_into_a_zero_fill_waits_for_it(
    marked: MappedFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    marked.wrote_position = marked.writing_to = PAGE_SIZE
    in_write = threading.Event()
    release = threading.Event()
    real_pwrite = os.pwrite

    def held_pwrite(fd: int, data: memoryview, pos: int) -> int:
        in_write.set()
        assert release.wait(10)
        return real_pwrite(fd, data, pos)

    monkeypatch.setattr(os, "pwrite", held_pwrite)
    filler = threading.Thread(target=marked.zero_fill, args=(0, 64 * 1024))
    filler.start()
    assert in_write.wait(10)
    marked.claim(PAGE_SIZE)  # ends where the zero-fill starts: no wait
    claimed = threading.Event()

    def claim_into_it() -> None:
        marked.claim(PAGE_SIZE + 100)
        claimed.set()

    writer = threading.Thread(target=claim_into_it)
    writer.start()
    assert not claimed.wait(0.2)  # held while the zeros are being written
    release.set()
    assert claimed.wait(10)
    filler.join(10)
    writer.join(10)
    assert marked.buf[PAGE_SIZE : 64 * 1024] == bytes(64 * 1024 - PAGE_SIZE)


_ZEROING_FROM: Any = vars(MappedFile)["zeroing_from"]  # the slot's descriptor


class _OvertakenFile(MappedFile):
    """A writer claims past the zero-fill's start right after the zero-fill says where it
    starts (the race `zero_fill` guards against, made certain)."""

    __slots__ = ()

    @property
    def zeroing_from(self) -> int:
        return int(_ZEROING_FROM.__get__(self))

    @zeroing_from.setter
    def zeroing_from(self, start: int) -> None:
        _ZEROING_FROM.__set__(self, start)
        if start != NO_ZERO_FILL:
            self.writing_to = start + 10


def test_a_zero_fill_a_writer_overtakes_writes_nothing(marked: MappedFile) -> None:
    marked.__class__ = _OvertakenFile
    marked.zero_fill(0, 64 * 1024)
    assert marked.buf[: 64 * 1024] == bytes([MARK]) * 64 * 1024


def test_writes_racing_the_zero_fill_all_survive(tmp_path: Path) -> None:
    mapped = MappedFile.create(tmp_path / f"{0:020d}", 8 * FILE_BYTES)
    rng = random.Random(7)
    written = bytearray()
    done = threading.Event()

    def fill_ahead() -> None:
        while not done.is_set():
            mapped.populate(min(mapped.file_size, mapped.wrote_position + 64 * 1024),
                            zero_fill=True)
            mapped.populated_to = 0  # fill again behind the writer, racing it every time

    filler = threading.Thread(target=fill_ahead)
    filler.start()
    try:
        while mapped.wrote_position + 3000 <= mapped.file_size:
            chunk = rng.randbytes(rng.randrange(1, 3000))
            pos = mapped.wrote_position
            mapped.claim(pos + len(chunk))
            mapped.buf[pos : pos + len(chunk)] = chunk
            mapped.wrote_position = pos + len(chunk)
            written += chunk
    finally:
        done.set()
        filler.join(10)
    assert mapped.buf[: len(written)] == bytes(written)
    mapped.close()
