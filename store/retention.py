"""Commitlog retention: which old commitlog files one cleaning pass deletes (RocketMQ rules).

A pure core for the store's cleaning task (every `clean_resource_interval_ms`). The rules are
RocketMQ's `DefaultMessageStore.CleanCommitLogService` and
`MappedFileQueue.deleteExpiredFileByTime`:

1. A pass runs only when it is time (`deleteWhen` lists the current hour, e.g. "04" or "01;04"),
   or the disk is fuller than `diskMaxUsedSpaceRatio` %, or a manual delete was requested.
2. Disk use above `diskSpaceCleanForciblyRatio` % (or above `diskSpaceWarningLevelRatio` %) makes
   the pass "clean immediately": files go even if they have not expired (with
   `cleanFileForciblyEnable`, default on).
3. Files are visited oldest first; the newest (last) file is never deleted. A file goes if it has
   expired (`now >= last_modified + fileReservedTime`) or the pass cleans immediately; the first
   file that stays ends the pass, so no hole ever opens in the middle of the commitlog.
4. At most `deleteFileBatchMax` (10) files go per pass.

Java's clamps are kept: diskMaxUsedSpaceRatio to [10, 95] %, the clean-forcibly ratio to
[30, 85] %, the warning level to [35, 90] %. Comparisons are strict (`used > ratio`), as in Java.

Where pyrmq differs, on purpose:
- `protect_from_offset`: a file holding any byte at or beyond it is never deleted, and (rule 3)
  nothing after it either. The store passes the lowest offset it still needs (not yet confirmed,
  not yet dispatched to consume queues, or still needed by a slave); Java has no such bound and
  under disk pressure can delete data nobody has consumed or replicated.
- `replica_protect_from_offset`: the lowest offset a *connected* slave still needs (the HA
  layer's figure). It protects like `protect_from_offset`, except in a pass that cleans
  immediately (disk pressure): then the master stays writable and the lagging slave is left
  to fail its next transfer (the shell logs it at WARNING), as in Java, which never looks at
  slaves here. So the routine, time-based expiry never breaks a live replica; a disconnected
  slave pins nothing (a dead replica must not hold the disk forever).
- `deleteWhen` is validated up front (`parse_delete_when`, a typed `StoreConfigError`); Java
  throws a NumberFormatException on every pass instead and never cleans.
- The disk use is one fraction in [0, 1] given by the caller: the larger of the commitlog's and
  the consume queues' partitions (Java checks them one after the other, with the same effect for
  a single store path). Java's "unknown usage (-1) counts as full" and its multi-disk
  (`replicasPerDiskPartition`) branch are not modelled. Marking the store "disk full" at the
  warning level (refusing writes) is the store's business, not this module's.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from store.errors import StoreConfigError

DELETE_FILE_BATCH_MAX: Final = 10
CLEAN_FORCIBLY_RATIO_DEFAULT: Final = 85
DISK_SPACE_WARNING_LEVEL_RATIO_DEFAULT: Final = 90

_MAX_USED_RATIO_CLAMP: Final = (10, 95)
_CLEAN_FORCIBLY_RATIO_CLAMP: Final = (30, 85)
_WARNING_LEVEL_RATIO_CLAMP: Final = (35, 90)
_HOURS_PER_DAY: Final = 24


def parse_delete_when(text: str) -> frozenset[int]:
    """Hours of the day (0-23) listed in a `deleteWhen` value such as "04" or "01;04".

    Parts are split on ";" and must be decimal hours; trailing empty parts are ignored (Java's
    `String.split`). Raises `StoreConfigError` naming the value for anything else, including
    an empty value.
    """
    parts = text.split(";")
    while parts and parts[-1] == "":
        parts.pop()
    hours = set()
    for part in parts:
        if not part.isascii() or not part.isdigit() or int(part) >= _HOURS_PER_DAY:
            raise StoreConfigError(
                f"deleteWhen={text!r}: {part!r} is not an hour 0-23 (expected e.g. '04' or '01;04')"
            )
        hours.add(int(part))
    if not hours:
        raise StoreConfigError(f"deleteWhen={text!r}: lists no hour (expected e.g. '04')")
    return frozenset(hours)


@dataclass(frozen=True, slots=True)
class FileAge:
    """One commitlog file: its start offset (file name) and its mtime in epoch ms.

    A file ends where the next one starts; the last file, whose end is unknown here, is never
    deleted, so no end offset is needed.
    """

    start_offset: int
    last_modified_ms: int


@dataclass(frozen=True, slots=True)
class DeletionTrigger:
    """Why a cleaning pass runs (for the shell's INFO line), and whether it cleans immediately."""

    is_time_up: bool
    is_space_to_delete: bool
    is_manual: bool
    clean_immediately: bool


def _clamp(value: int, bounds: tuple[int, int]) -> int:
    return min(max(value, bounds[0]), bounds[1])


def deletion_trigger(
    *,
    current_hour: int,
    delete_when_hours: frozenset[int],
    disk_used_ratio: float,
    disk_max_used_space_ratio: int,
    clean_forcibly_ratio: int = CLEAN_FORCIBLY_RATIO_DEFAULT,
    disk_space_warning_level_ratio: int = DISK_SPACE_WARNING_LEVEL_RATIO_DEFAULT,
    clean_file_forcibly_enable: bool = True,
    manual: bool = False,
) -> DeletionTrigger | None:
    """Whether a pass runs now (rules 1-2), or None when it does not.

    `current_hour` is the local hour of day (0-23, as Java's `Calendar.HOUR_OF_DAY`);
    `disk_used_ratio` the used fraction (0.0-1.0) of the fuller store partition; the three
    `*_ratio` limits are percentages, clamped as Java clamps them. Raises `ValueError` for an
    hour or a used fraction out of range.
    """
    if not 0 <= current_hour < _HOURS_PER_DAY:
        raise ValueError(f"current_hour={current_hour} outside 0-23")
    if not 0.0 <= disk_used_ratio <= 1.0:
        raise ValueError(f"disk_used_ratio={disk_used_ratio} outside [0, 1]")
    used_percent = disk_used_ratio * 100
    over_warning = used_percent > _clamp(disk_space_warning_level_ratio, _WARNING_LEVEL_RATIO_CLAMP)
    over_forcibly = used_percent > _clamp(clean_forcibly_ratio, _CLEAN_FORCIBLY_RATIO_CLAMP)
    over_max_used = used_percent > _clamp(disk_max_used_space_ratio, _MAX_USED_RATIO_CLAMP)
    is_time_up = current_hour in delete_when_hours
    is_space_to_delete = over_warning or over_forcibly or over_max_used
    if not (is_time_up or is_space_to_delete or manual):
        return None
    return DeletionTrigger(
        is_time_up=is_time_up,
        is_space_to_delete=is_space_to_delete,
        is_manual=manual,
        clean_immediately=clean_file_forcibly_enable and (over_warning or over_forcibly),
    )


def files_to_delete(
    files: Sequence[FileAge],
    *,
    now_ms: int,
    file_reserved_time_ms: int,
    delete_when_hours: frozenset[int],
    current_hour: int,
    disk_used_ratio: float,
    disk_max_used_space_ratio: int,
    protect_from_offset: int,
    replica_protect_from_offset: int | None = None,
    clean_forcibly_ratio: int = CLEAN_FORCIBLY_RATIO_DEFAULT,
    disk_space_warning_level_ratio: int = DISK_SPACE_WARNING_LEVEL_RATIO_DEFAULT,
    clean_file_forcibly_enable: bool = True,
    manual: bool = False,
    max_files_per_pass: int = DELETE_FILE_BATCH_MAX,
) -> list[FileAge]:
    """The files one cleaning pass deletes: a prefix of `files`, oldest first (rules 1-4).

    `files` are the commitlog files in offset order (the last is the file being written).
    `protect_from_offset`: no file holding a byte at or beyond it (a file whose successor starts
    after it) is deleted; `replica_protect_from_offset` alike, unless the pass cleans
    immediately. Returns an empty list when no pass runs or nothing qualifies. Raises
    `ValueError` for files out of order, and for the range errors of `deletion_trigger`.
    """
    for older, newer in itertools.pairwise(files):
        if older.start_offset >= newer.start_offset:
            raise ValueError(
                f"commitlog files out of order: start {older.start_offset} "
                f"then {newer.start_offset}"
            )
    trigger = deletion_trigger(
        current_hour=current_hour,
        delete_when_hours=delete_when_hours,
        disk_used_ratio=disk_used_ratio,
        disk_max_used_space_ratio=disk_max_used_space_ratio,
        clean_forcibly_ratio=clean_forcibly_ratio,
        disk_space_warning_level_ratio=disk_space_warning_level_ratio,
        clean_file_forcibly_enable=clean_file_forcibly_enable,
        manual=manual,
    )
    if trigger is None:
        return []
    if replica_protect_from_offset is not None and not trigger.clean_immediately:
        protect_from_offset = min(protect_from_offset, replica_protect_from_offset)
    doomed: list[FileAge] = []
    for file, successor in itertools.pairwise(files):  # never the newest file
        # `successor.start_offset` is this file's end: it holds bytes up to there.
        if len(doomed) >= max_files_per_pass or successor.start_offset > protect_from_offset:
            break
        expired = now_ms >= file.last_modified_ms + file_reserved_time_ms
        if not (expired or trigger.clean_immediately):
            break  # the first file that stays ends the pass: no hole in the middle
        doomed.append(file)
    return doomed
