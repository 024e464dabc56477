"""The `epochFileCheckpoint` file: golden bytes, Java-compatible parsing, `.bak` fallback."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import testhooks
from store.epoch_cache import LONG_MAX, EpochCache, EpochEntry
from store.epoch_file import (
    EMPTY_EPOCH_FILE,
    EPOCH_FILE_NAME,
    EpochFileSource,
    parse_epoch_file,
    read_epoch_file,
    serialize_epoch_entries,
    write_epoch_file,
)
from store.errors import CorruptFileError, DiskFullError, EpochFileUnreadableError

GOLDEN = [
    pytest.param([(7, 7000), (8, 8000)], b"2\n773307083\n7-7000\n8-8000\n", id="java-comment"),
    pytest.param([(1, 0), (2, 1024)], b"2\n327520601\n1-0\n2-1024\n", id="spec-second"),
]


def entries(*pairs: tuple[int, int]) -> tuple[EpochEntry, ...]:
    return EpochCache(pairs).entries


def file_with(lines: str, *, crc: int | None = None, count: int | None = None) -> bytes:
    """An epoch file around entry `lines` (each ending in \\n) with a right or given CRC/count."""
    body = lines.encode()
    # Java's String.split drops trailing empty parts; a line counts if two parts remain.
    real_count = sum(1 for line in lines.splitlines() if len(line.rstrip("-").split("-")) == 2)
    real_crc = zlib.crc32(body) & 0x7FFFFFFF
    head = f"{real_count if count is None else count}\n{real_crc if crc is None else crc}\n"
    return head.encode() + body


@pytest.fixture(autouse=True)
def _no_faults() -> Iterator[None]:
    yield
    testhooks.configure_faults("")


@pytest.mark.parametrize(("pairs", "content"), GOLDEN)
def test_serialize_golden(pairs: list[tuple[int, int]], content: bytes) -> None:
    assert serialize_epoch_entries(entries(*pairs)) == content


@pytest.mark.parametrize(("pairs", "content"), GOLDEN)
def test_parse_golden(pairs: list[tuple[int, int]], content: bytes) -> None:
    assert parse_epoch_file(content) == entries(*pairs)


def test_parse_derives_ends() -> None:
    assert parse_epoch_file(b"2\n773307083\n7-7000\n8-8000\n") == (
        EpochEntry(7, 7000, 8000),
        EpochEntry(8, 8000, LONG_MAX),
    )


def test_serialize_refuses_unordered_entries() -> None:
    with pytest.raises(ValueError, match="strictly increase"):
        serialize_epoch_entries([EpochEntry(2, 0), EpochEntry(1, 5)])


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(b"2\n0\n7-7000\n8-8000\n", [(7, 7000), (8, 8000)], id="crc-0-not-checked"),
        pytest.param(
            b"2\r\n773307083\r\n7-7000\r\n8-8000\r\n", [(7, 7000), (8, 8000)], id="crlf-lines"
        ),
        pytest.param(b"2\n773307083\n7-7000\n8-8000", [(7, 7000), (8, 8000)], id="no-final-eol"),
        pytest.param(file_with("1-0-5\n2-100\n"), [(2, 100)], id="three-parts-ignored"),
        pytest.param(file_with("7-\n2-100\n"), [(2, 100)], id="one-part-ignored"),
        pytest.param(file_with("1-0--\n"), [(1, 0)], id="trailing-empties-dropped"),
        pytest.param(file_with("+1-+0\n"), [(1, 0)], id="java-accepts-plus-sign"),
        pytest.param(b"0\n0\n", [], id="empty-list"),
    ],
)
def test_parse_java_compatible(content: bytes, expected: list[tuple[int, int]]) -> None:
    assert parse_epoch_file(content) == entries(*expected)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        pytest.param(b"", "need the count and CRC", id="empty-file"),
        pytest.param(b"2\n", "need the count and CRC", id="no-crc-line"),
        pytest.param(b"x\n0\n", "count 'x'", id="non-numeric-count"),
        pytest.param(b"1\nzz\n1-0\n", "crc 'zz'", id="non-numeric-crc"),
        pytest.param(file_with("a-0\n"), "epoch 'a'", id="non-numeric-epoch"),
        pytest.param(file_with("1-0x10\n"), "start offset '0x10'", id="non-numeric-start"),
        pytest.param(file_with(" 1-0\n"), "epoch ' 1'", id="space-not-trimmed"),
        pytest.param(file_with("4294967296-0\n"), "epoch '4294967296'", id="epoch-beyond-i32"),
        pytest.param(file_with("1-0\n", count=2), "count line says 2, found 1", id="count"),
        pytest.param(file_with("1-0\n", crc=12345), "crc32 0x00003039 != ", id="crc"),
        pytest.param(b"2\n773307083\n7-7000\n8-8001\n", "crc32", id="changed-digit"),
        pytest.param(b"2\n773307083\n7-7000\n8-8000\n\n", "crc32", id="extra-empty-line"),
        pytest.param(file_with("2-0\n1-100\n"), "strictly increase", id="unsorted-epochs"),
        pytest.param(file_with("1-100\n2-50\n"), "must not decrease", id="start-goes-back"),
        pytest.param(b"1\n0\n\xff-1\n", "utf-8", id="bad-utf8"),
    ],
)
def test_parse_rejects(content: bytes, problem: str) -> None:
    with pytest.raises(CorruptFileError, match=problem) as info:
        parse_epoch_file(content, path="/store/epochFileCheckpoint")
    assert "/store/epochFileCheckpoint" in str(info.value)


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    path = tmp_path / EPOCH_FILE_NAME
    write_epoch_file(path, entries((1, 0), (2, 1024)))
    assert path.read_bytes() == b"2\n327520601\n1-0\n2-1024\n"
    loaded = read_epoch_file(path)
    assert loaded.entries == entries((1, 0), (2, 1024))
    assert loaded.source is EpochFileSource.MAIN
    assert loaded.main_problem is None


def test_write_keeps_previous_content_in_bak(tmp_path: Path) -> None:
    path = tmp_path / EPOCH_FILE_NAME
    write_epoch_file(path, entries((1, 0)))
    assert not (tmp_path / f"{EPOCH_FILE_NAME}.bak").exists()
    write_epoch_file(path, entries((1, 0), (2, 100)))
    assert (tmp_path / f"{EPOCH_FILE_NAME}.bak").read_bytes() == serialize_epoch_entries(
        entries((1, 0))
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [EPOCH_FILE_NAME, f"{EPOCH_FILE_NAME}.bak"]


def test_write_after_a_bak_fallback_keeps_the_good_bak(tmp_path: Path) -> None:
    path = tmp_path / EPOCH_FILE_NAME
    bak = tmp_path / f"{EPOCH_FILE_NAME}.bak"
    write_epoch_file(path, entries((1, 0)))
    write_epoch_file(path, entries((1, 0), (2, 100)))
    path.write_bytes(b"2\n999\n1-0\n2-100\n")  # damaged: wrong CRC
    loaded = read_epoch_file(path)
    assert loaded.source is EpochFileSource.BAK
    write_epoch_file(path, entries((1, 0), (3, 200)))
    # Not the damaged bytes: a crash before the next rename still finds a good fallback.
    assert bak.read_bytes() == serialize_epoch_entries(entries((1, 0)))
    assert read_epoch_file(path).entries == entries((1, 0), (3, 200))


def test_writing_an_empty_list_removes_bak_so_truncated_entries_stay_gone(tmp_path: Path) -> None:
    path = tmp_path / EPOCH_FILE_NAME
    write_epoch_file(path, entries((1, 0)))
    write_epoch_file(path, entries((1, 0), (2, 100)))
    write_epoch_file(path, ())
    assert path.read_bytes() == EMPTY_EPOCH_FILE
    assert not (tmp_path / f"{EPOCH_FILE_NAME}.bak").exists()
    assert read_epoch_file(path) == read_epoch_file(path)
    loaded = read_epoch_file(path)
    assert loaded.entries == ()
    assert loaded.source is EpochFileSource.MAIN


VALID_OLD = serialize_epoch_entries(entries((1, 0)))
VALID_NEW = serialize_epoch_entries(entries((1, 0), (2, 100)))
BAD = b"2\n1\n1-0\n2-100\n"


# Reading table (docs/store-format.md §5.2 and pyrmq's stricter rule): main x .bak -> outcome.
@pytest.mark.parametrize(
    ("main", "bak", "expected", "source"),
    [
        pytest.param(None, None, (), EpochFileSource.NONE, id="both-absent"),
        pytest.param(VALID_NEW, None, ((1, 0), (2, 100)), EpochFileSource.MAIN, id="main-only"),
        pytest.param(VALID_NEW, BAD, ((1, 0), (2, 100)), EpochFileSource.MAIN, id="bak-ignored"),
        pytest.param(BAD, VALID_OLD, ((1, 0),), EpochFileSource.BAK, id="bad-main-uses-bak"),
        pytest.param(b"", VALID_OLD, ((1, 0),), EpochFileSource.BAK, id="empty-file-uses-bak"),
        pytest.param(b"x\n", VALID_OLD, ((1, 0),), EpochFileSource.BAK, id="non-numeric-main"),
        pytest.param(None, VALID_OLD, ((1, 0),), EpochFileSource.BAK, id="absent-main-uses-bak"),
        pytest.param(
            EMPTY_EPOCH_FILE, VALID_OLD, ((1, 0),), EpochFileSource.BAK, id="empty-list-uses-bak"
        ),
        pytest.param(EMPTY_EPOCH_FILE, None, (), EpochFileSource.MAIN, id="pyrmq-empty-list"),
        pytest.param(EMPTY_EPOCH_FILE, BAD, (), EpochFileSource.MAIN, id="empty-main-bad-bak"),
        pytest.param(BAD, None, EpochFileUnreadableError, None, id="bad-main-no-bak"),
        pytest.param(BAD, BAD, EpochFileUnreadableError, None, id="both-bad"),
        pytest.param(None, BAD, EpochFileUnreadableError, None, id="absent-main-bad-bak"),
    ],
)
def test_read_with_bak_fallback(
    tmp_path: Path,
    main: bytes | None,
    bak: bytes | None,
    expected: tuple[tuple[int, int], ...] | type[Exception],
    source: EpochFileSource | None,
) -> None:
    path = tmp_path / EPOCH_FILE_NAME
    if main is not None:
        path.write_bytes(main)
    if bak is not None:
        (tmp_path / f"{EPOCH_FILE_NAME}.bak").write_bytes(bak)
    if isinstance(expected, type):
        with pytest.raises(expected, match="epoch file unreadable") as info:
            read_epoch_file(path)
        assert str(path) in str(info.value)
        assert f"{path}.bak" in str(info.value)
        return
    loaded = read_epoch_file(path)
    assert loaded.entries == entries(*expected)
    assert loaded.source is source
    if source is EpochFileSource.BAK:
        assert loaded.main_problem is not None
        assert str(path) in loaded.main_problem


def test_failed_write_before_rename_leaves_old_entries_readable(tmp_path: Path) -> None:
    path = tmp_path / EPOCH_FILE_NAME
    write_epoch_file(path, entries((1, 0)))
    testhooks.configure_faults("epoch.write.before_rename:1:enospc")
    with pytest.raises(DiskFullError, match=EPOCH_FILE_NAME):
        write_epoch_file(path, entries((1, 0), (2, 100)))
    testhooks.configure_faults("")
    assert read_epoch_file(path).entries == entries((1, 0))
    assert not (tmp_path / f"{EPOCH_FILE_NAME}.tmp").exists()
