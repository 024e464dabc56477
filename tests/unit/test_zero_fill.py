"""Zero-filling ahead of the commitlog's writer (`MappedFile.zero_fill`, `MappedFile.claim`):
zeros land only past every byte written or claimed, a writer claiming into a zero-fill waits
for it, a zero-fill a writer overtakes backs off, and concurrent writes all survive; in the
native call (`store._native.prefault`) and in its Python twin alike, which make the same
writes and heat the same folios."""

from __future__ import annotations

import contextlib
import mmap
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import _native, hot_folio, mapped_file
from store.hot_folio import FOLIO_BYTES
from store.libc import address_of
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
def marked(tmp_path: Path, mapped_file_calls: str) -> Iterator[MappedFile]:
    with marked_file(tmp_path, FILE_BYTES) as mapped:
        yield mapped


@pytest.fixture
def python_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests that watch the Python twin's system calls (the native call makes the same)."""
    monkeypatch.setattr(mapped_file, "_native", None)


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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python_twin: None
) -> None:
    """Each write is at most ZERO_FILL_CALL_BYTES (the size of the page-cache folios it makes)
    and ends at or before the next multiple of it, and together they cover the range once, in
    order."""
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
        assert [pos for pos, _ in calls] == [
            2 * PAGE_SIZE, *range(ZERO_FILL_CALL_BYTES, size, ZERO_FILL_CALL_BYTES)]
        assert sum(length for _, length in calls) == size - 2 * PAGE_SIZE
        assert mapped.buf[: 2 * PAGE_SIZE] == bytes([MARK]) * 2 * PAGE_SIZE
        assert mapped.buf[2 * PAGE_SIZE :] == bytes(size - 2 * PAGE_SIZE)


@pytest.mark.parametrize("wrote", [0, 5000])
def test_each_write_that_makes_a_whole_folio_gets_a_hot_block_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python_twin: None, wrote: int
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
    assert len(aligned) == (3 if wrote == 0 else 2)  # the unaligned start is written alone


def test_a_writer_claiming_into_a_zero_fill_waits_for_it(
    marked: MappedFile, monkeypatch: pytest.MonkeyPatch, python_twin: None
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


def test_writes_racing_the_zero_fill_all_survive(tmp_path: Path, mapped_file_calls: str) -> None:
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


@pytest.mark.parametrize(("wrote", "end"), [
    (0, 3 * FOLIO_BYTES + 5 * PAGE_SIZE),
    (5000, 3 * FOLIO_BYTES),
    (FOLIO_BYTES + 1, 2 * FOLIO_BYTES),
    (0, 5 * PAGE_SIZE),
])
def test_the_native_call_makes_its_twins_zeros_and_heats_its_folios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrote: int, end: int
) -> None:
    """Same bytes from `populate(zero_fill=True)` either way, the same folios heated (the
    native call counts its heats; the twin's are counted here), and the range populated."""
    size = 4 * FOLIO_BYTES
    twin_heats: list[int] = []
    heats: list[int] = []
    real_prefault = _native.prefault

    def counting(*args: int) -> tuple[int, int, bool]:
        result = real_prefault(*args)
        heats.append(result[1])
        return result

    def counted_heat() -> bool:
        twin_heats.append(1)
        return True

    outcomes = []
    for native in (True, False):
        (tmp_path / str(native)).mkdir()
        with monkeypatch.context() as patch, marked_file(tmp_path / str(native), size) as mapped:
            if native:
                patch.setattr(_native, "prefault", counting)
            else:
                patch.setattr(mapped_file, "_native", None)
                patch.setattr(mapped_file, "heat_next_folio", counted_heat)
            mapped.wrote_position = mapped.writing_to = wrote
            mapped.populate(end, zero_fill=True)
            outcomes.append((bytes(mapped.buf), mapped.populated_to, mapped.zeroing_from))
    assert outcomes[0] == outcomes[1]
    first_zero = -(-wrote // PAGE_SIZE) * PAGE_SIZE
    assert outcomes[0][0] == (bytes([MARK]) * first_zero + bytes(end - first_zero)
                              + bytes([MARK]) * (size - end))
    assert outcomes[0][1] == end
    whole_folios = len(range(-(-first_zero // FOLIO_BYTES) * FOLIO_BYTES, end - FOLIO_BYTES + 1,
                             FOLIO_BYTES))
    assert len(twin_heats) == whole_folios
    assert heats == [whole_folios if hot_folio.anonymous_huge_pages() else 0]


def test_the_native_call_frees_the_block_it_heats(tmp_path: Path) -> None:
    """A heated slot reads as zeros after the call (MADV_DONTNEED gave its pages back), however
    it was filled before; a slot off the 2 MiB grid is refused before anything is written."""
    slot = mmap.mmap(-1, 2 * FOLIO_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = address_of(slot)
    offset = -base % FOLIO_BYTES
    slot[offset : offset + FOLIO_BYTES] = b"\xff" * FOLIO_BYTES
    with marked_file(tmp_path, 2 * FOLIO_BYTES) as mapped:
        fd = mapped._fd
        with pytest.raises(ValueError, match="aligned"):
            _native.prefault(fd, 0, FOLIO_BYTES, 0, 0, base + offset + PAGE_SIZE)
        assert mapped.buf[:10] == bytes([MARK]) * 10
        assert _native.prefault(fd, 0, FOLIO_BYTES, 0, 0, base + offset) == (FOLIO_BYTES, 1,
                                                                                False)
        assert mapped.buf[:FOLIO_BYTES] == bytes(FOLIO_BYTES)
        assert slot[offset : offset + FOLIO_BYTES] == bytes(FOLIO_BYTES)
        with pytest.raises(ValueError, match="bad range"):
            _native.prefault(fd, 10, 5, 0, 0, 0)
    slot.close()
