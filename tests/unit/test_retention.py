"""Commitlog retention (RocketMQ's CleanCommitLogService rules, plus pyrmq's protected offset).

Files are drawn as `start@mtime` in offset order, e.g. `"0@1000 100@2000 200@9000"`; the
last one is the file being written.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.errors import StoreConfigError
from store.retention import (
    DeletionTrigger,
    FileAge,
    deletion_trigger,
    files_to_delete,
    parse_delete_when,
)

HOUR_MS = 3_600_000
RESERVED_MS = 72 * HOUR_MS
NOW_MS = 1_000 * HOUR_MS
OLD = NOW_MS - RESERVED_MS - 1  # expired
FRESH = NOW_MS - 1  # not expired


MTIMES = {"OLD": OLD, "FRESH": FRESH}


def files(drawing: str) -> list[FileAge]:
    """`"0@OLD 100@FRESH 200@12345"` -> file ages (OLD/FRESH or an mtime in ms)."""
    ages = []
    for item in drawing.split():
        start, _, mtime = item.partition("@")
        ages.append(FileAge(int(start), MTIMES[mtime] if mtime in MTIMES else int(mtime)))
    return ages


def starts(ages: list[FileAge]) -> str:
    return " ".join(str(a.start_offset) for a in ages)


BASE: dict[str, Any] = {
    "now_ms": NOW_MS,
    "file_reserved_time_ms": RESERVED_MS,
    "delete_when_hours": frozenset({4}),
    "current_hour": 10,
    "disk_used_ratio": 0.10,
    "disk_max_used_space_ratio": 75,
    "protect_from_offset": 10**12,
}


@pytest.mark.parametrize(
    ("text", "hours"),
    [
        pytest.param("04", {4}, id="default"),
        pytest.param("4", {4}, id="no-padding"),
        pytest.param("01;04", {1, 4}, id="two-hours"),
        pytest.param("00;23", {0, 23}, id="day-bounds"),
        pytest.param("01;04;", {1, 4}, id="trailing-separator-as-java"),
    ],
)
def test_parse_delete_when(text: str, hours: set[int]) -> None:
    assert parse_delete_when(text) == frozenset(hours)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("24", id="hour-24"),
        pytest.param("a", id="letter"),
        pytest.param(" 04", id="space-as-java-parseint"),
        pytest.param("01;;04", id="empty-middle"),
        pytest.param("-1", id="negative"),
        pytest.param("\u0664", id="non-ascii-digit"),
        pytest.param(";", id="only-separator"),
    ],
)
def test_parse_delete_when_rejects(text: str) -> None:
    with pytest.raises(StoreConfigError, match="deleteWhen="):
        parse_delete_when(text)


@pytest.mark.parametrize(
    ("drawing", "overrides", "expected"),
    [
        pytest.param("0@OLD 100@OLD 200@OLD", {}, "", id="not-time-disk-fine"),
        pytest.param(
            "0@OLD 100@OLD 200@FRESH 300@OLD", {"current_hour": 4}, "0 100", id="time-up-expired"
        ),
        pytest.param("0@OLD 100@OLD 200@OLD", {"current_hour": 4}, "0 100", id="never-the-last"),
        pytest.param("0@FRESH 100@OLD 200@OLD", {"current_hour": 4}, "", id="no-hole"),
        pytest.param(
            "0@OLD 100@FRESH 200@FRESH", {"disk_used_ratio": 0.80}, "0", id="disk-over-max-used"
        ),
        pytest.param(
            "0@OLD 100@OLD 200@OLD", {"disk_used_ratio": 0.75}, "", id="at-max-used-strict"
        ),
        pytest.param(
            "0@FRESH 100@FRESH 200@FRESH",
            {"disk_used_ratio": 0.90},
            "0 100",
            id="forcibly-ignores-expiry",
        ),
        pytest.param(
            "0@FRESH 100@FRESH 200@FRESH",
            {"disk_used_ratio": 0.90, "clean_file_forcibly_enable": False},
            "",
            id="forcibly-disabled",
        ),
        pytest.param(
            "0@FRESH 100@FRESH 200@FRESH 300@FRESH",
            {"disk_used_ratio": 0.90, "protect_from_offset": 150},
            "0",
            id="forcibly-stops-at-protected",
        ),
        pytest.param(
            "0@OLD 100@OLD 200@OLD",
            {"current_hour": 4, "protect_from_offset": 100},
            "0",
            id="file-ending-at-protect-may-go",
        ),
        pytest.param(
            "0@OLD 100@OLD 200@OLD",
            {"current_hour": 4, "protect_from_offset": 99},
            "",
            id="file-holding-protected-byte-stays",
        ),
        pytest.param(
            "0@OLD 100@OLD 200@OLD 300@OLD",
            {"current_hour": 4, "max_files_per_pass": 2},
            "0 100",
            id="batch-max",
        ),
        pytest.param(
            f"0@{NOW_MS - RESERVED_MS} 100@OLD",
            {"current_hour": 4},
            "0",
            id="expiry-at-exact-boundary",
        ),
        pytest.param(
            "0@OLD 100@OLD",
            {"disk_max_used_space_ratio": 5, "disk_used_ratio": 0.11},
            "0",
            id="max-used-clamped-to-10",
        ),
        pytest.param(
            "0@FRESH 100@FRESH",
            {"clean_forcibly_ratio": 99, "disk_used_ratio": 0.86},
            "0",
            id="forcibly-ratio-clamped-to-85",
        ),
        pytest.param(
            "0@FRESH 100@FRESH",
            {"disk_space_warning_level_ratio": 40, "disk_used_ratio": 0.5},
            "0",
            id="over-warning-level-cleans-immediately",
        ),
        pytest.param("0@OLD 100@FRESH 200@OLD", {"manual": True}, "0", id="manual"),
        pytest.param(
            "0@OLD 100@OLD 200@OLD 300@OLD",
            {"current_hour": 4, "replica_protect_from_offset": 150},
            "0",
            id="time-up-stops-at-a-connected-slaves-need",
        ),
        pytest.param(
            "0@OLD 100@OLD 200@OLD 300@OLD",
            {"current_hour": 4, "replica_protect_from_offset": 150, "protect_from_offset": 50},
            "",
            id="the-lower-protection-wins",
        ),
        pytest.param(
            "0@OLD 100@OLD 200@OLD 300@OLD",
            {"disk_used_ratio": 0.80, "replica_protect_from_offset": 150},
            "0",
            id="max-used-without-forcibly-keeps-the-slave-pin",
        ),
        pytest.param(
            "0@FRESH 100@FRESH 200@FRESH 300@FRESH",
            {"disk_used_ratio": 0.90, "replica_protect_from_offset": 150},
            "0 100 200",
            id="disk-pressure-overrides-a-slaves-need",
        ),
        pytest.param(
            "0@OLD 100@OLD 200@OLD",
            {"manual": True, "replica_protect_from_offset": 0},
            "",
            id="manual-keeps-the-slave-pin",
        ),
        pytest.param("0@OLD", {"current_hour": 4, "disk_used_ratio": 0.99}, "", id="single"),
        pytest.param("", {"current_hour": 4}, "", id="no-files"),
    ],
)
def test_files_to_delete(drawing: str, overrides: dict[str, Any], expected: str) -> None:
    assert starts(files_to_delete(files(drawing), **{**BASE, **overrides})) == expected


def test_trigger_says_why() -> None:
    trigger = deletion_trigger(
        current_hour=4,
        delete_when_hours=frozenset({4}),
        disk_used_ratio=0.9,
        disk_max_used_space_ratio=75,
    )
    assert trigger == DeletionTrigger(
        is_time_up=True, is_space_to_delete=True, is_manual=False, clean_immediately=True
    )
    assert (
        deletion_trigger(
            current_hour=5,
            delete_when_hours=frozenset({4}),
            disk_used_ratio=0.1,
            disk_max_used_space_ratio=75,
        )
        is None
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"current_hour": 24}, "current_hour", id="hour"),
        pytest.param({"disk_used_ratio": 1.5}, "disk_used_ratio", id="ratio-over-1"),
        pytest.param({"disk_used_ratio": -0.1}, "disk_used_ratio", id="ratio-negative"),
    ],
)
def test_bad_inputs(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        files_to_delete(files("0@OLD 100@OLD"), **{**BASE, **overrides})


def test_files_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="out of order"):
        files_to_delete(files("100@OLD 0@OLD"), **BASE)


@given(
    mtimes=st.lists(st.sampled_from([OLD, FRESH]), max_size=12),
    hour=st.integers(0, 23),
    used=st.floats(0.0, 1.0),
    protect=st.integers(0, 1300),
    batch=st.integers(1, 12),
)
def test_result_is_a_bounded_unprotected_prefix_without_the_last_file(
    mtimes: list[int], hour: int, used: float, protect: int, batch: int
) -> None:
    ages = [FileAge(i * 100, mtime) for i, mtime in enumerate(mtimes)]
    doomed = files_to_delete(
        ages,
        **{
            **BASE,
            "current_hour": hour,
            "disk_used_ratio": used,
            "protect_from_offset": protect,
            "max_files_per_pass": batch,
        },
    )
    assert doomed == ages[: len(doomed)]
    assert len(doomed) <= min(batch, max(len(ages) - 1, 0))
    assert all(f.start_offset + 100 <= protect for f in doomed)
