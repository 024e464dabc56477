"""`store/hot_folio.py`: when anonymous huge pages are available, and that a heat makes one
huge page and keeps none of it."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest

from store import hot_folio
from store.hot_folio import FOLIO_BYTES, anonymous_huge_pages, heat_next_folio
from store.libc import libc

PAGE = 4096


def _thp_dir(tmp_path: Path, enabled: str, pmd_bytes: int) -> Path:
    (tmp_path / "enabled").write_text(enabled + "\n")
    (tmp_path / "hpage_pmd_size").write_text(f"{pmd_bytes}\n")
    return tmp_path


@pytest.mark.parametrize(("enabled", "pmd_bytes", "available"), [
    ("[always] madvise never", FOLIO_BYTES, True),
    ("always [madvise] never", FOLIO_BYTES, True),
    ("always madvise [never]", FOLIO_BYTES, False),
    ("always [madvise] never", 512 * 1024 * 1024, False),  # arm64 with 64 KiB pages
])
def test_huge_pages_count_only_when_enabled_and_of_the_folio_size(
    tmp_path: Path, enabled: str, pmd_bytes: int, available: bool
) -> None:
    assert anonymous_huge_pages(_thp_dir(tmp_path, enabled, pmd_bytes)) is available


def test_no_transparent_huge_page_support_means_none(tmp_path: Path) -> None:
    assert anonymous_huge_pages(tmp_path / "absent") is False
    (tmp_path / "enabled").write_text("[always] madvise never\n")
    (tmp_path / "hpage_pmd_size").write_text("not a number\n")
    assert anonymous_huge_pages(tmp_path) is False


def _huge_kib_of_mapping_at(address: int) -> int:
    """AnonHugePages (KiB) of this process's mapping that contains `address`."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            low, high = (int(part, 16) for part in head.split("-"))
            inside = low <= address < high
        elif inside and head == "AnonHugePages:":
            return int(line.split()[1])
    raise AssertionError(f"no mapping at {address:#x}")


def _resident_pages(address: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    vector = ctypes.create_string_buffer(FOLIO_BYTES // PAGE)
    assert libc.mincore(address, FOLIO_BYTES, vector) == 0, ctypes.get_errno()
    return sum(byte & 1 for byte in vector.raw)


class _Spy:
    """hot_folio's libc, recording what the heat saw between its store and its release."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.huge_kib_before_release: list[int] = []
        self.stores = 0

    def memset(self, address: int, value: int, size: int) -> int:
        self.stores += 1
        return int(self.real.memset(address, value, size))

    def madvise(self, address: int, size: int, advice: int) -> int:
        self.huge_kib_before_release.append(_huge_kib_of_mapping_at(address))
        return int(self.real.madvise(address, size, advice))


def test_a_heat_makes_one_huge_page_and_frees_it(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(libc)
    monkeypatch.setattr(hot_folio, "_libc", spy)
    if not hot_folio.anonymous_huge_pages():
        assert heat_next_folio() is False
        assert spy.stores == 0  # nothing touched where no huge page would come
        return
    assert heat_next_folio() is True
    assert heat_next_folio() is True  # the thread's slot is used again
    assert spy.stores == 2
    # The one-byte store faulted in a whole 2 MiB huge page (no 4 KiB fallback).
    assert spy.huge_kib_before_release == [FOLIO_BYTES // 1024] * 2
    address = hot_folio._slot.address
    assert address % FOLIO_BYTES == 0
    assert _huge_kib_of_mapping_at(address) == 0
    assert _resident_pages(address) == 0  # the block went back to the kernel's free lists
