"""The recovery procedure of a loaded store (docs/store-format.md §9.2, §9.3): choose where to scan,
verify records, re-dispatch, cut the log after the last valid record, clamp confirmOffset.

The pure decisions (start file, scan, clamp) live in `store/recovery.py`; this module applies
them to the loaded commitlog and consume queues.

Invariants:
- After recovery nothing follows the last valid record: the commitlog tail is zeroed on disk
  and consume-queue units pointing past it are gone (M7).
- In controller mode no unit points past confirmOffset, after a clean exit too (M4, #6609).
- After an abnormal exit every unit from the start file on comes from a verified record.
- `lost_committed` is reported when the recovered log ends below the checkpoint's
  confirmOffset: committed data is gone (only a power or OS failure does that, M9).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from store.checkpoint import CheckpointLoad
from store.commitlog import CommitLog
from store.config import StoreConfig
from store.consume_queue_store import ConsumeQueueStore
from store.dispatch import Dispatcher
from store.mapped_file import MappedFile
from store.record_check import RecordCheck
from store.recovery import (
    FirstRecord,
    RecordBatch,
    ScanStop,
    clamp_confirm_offset,
    first_record,
    scan_file_fast,
    start_file_abnormal,
    start_file_normal,
)

log = logging.getLogger(__name__)

Units = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What `MessageStore.open()` found and did; `lost_committed` means committed data is gone
    (M9); `records_skipped` counts records that could not be dispatched."""

    abnormal: bool
    checkpoint_bad: bool
    start_file: str | None
    records_scanned: int
    records_dispatched: int
    max_phy_offset: int
    stop_reason: str | None
    checkpoint_confirm_offset: int
    confirm_offset: int
    lost_committed: bool
    elapsed_s: float
    # Records whose consume-queue unit was refused (store/dispatch.py): kept, never served.
    records_skipped: int = 0


def recover_store(
    config: StoreConfig,
    commitlog: CommitLog,
    consume_queues: ConsumeQueueStore,
    dispatcher: Dispatcher,
    *,
    abnormal: bool,
    checkpoint: CheckpointLoad,
    started: float,
) -> RecoveryReport:
    """Recover loaded files (all positions provisionally at their ends); blocking.

    `abnormal`: the abort file was present or the checkpoint is unusable. The report's
    `confirm_offset` is the store's confirmOffset from now on.
    """
    stored_confirm = checkpoint.checkpoint.confirm_phy_offset
    files = commitlog.files.files
    if not files:
        for queue in list(consume_queues):
            consume_queues.destroy(queue.topic, queue.queue_id)
        return RecoveryReport(abnormal, checkpoint.bad, None, 0, 0, 0, None, stored_confirm, 0,
                              stored_confirm > 0, time.monotonic() - started)
    check_crc = config.check_crc_on_recover
    verify_prop = check_crc and config.force_verify_prop_crc
    firsts = [
        first_record(m.buf, file_from_offset=m.file_from_offset, file_size=m.file_size,
                     check_body_crc=check_crc, verify_prop_crc=verify_prop)
        for m in files
    ]
    if abnormal:
        # A bad checkpoint loads as zeros: min timestamp 0, logicsPhysicalOffset unknown.
        start_index = start_file_abnormal(
            firsts, min_timestamp=checkpoint.checkpoint.min_timestamp(),
            logics_physical_offset=checkpoint.checkpoint.logics_physical_offset,
        )
        # After a power loss each consume-queue page survived or not on its own: a unit
        # straddling a lost page can keep a valid offset and size with a wrong tagsCode, and in
        # controller mode one queue can keep units past records another queue lost (breaking
        # dispatch's log order, which queue offsets and the reput offset rely on, M5). So the
        # scan re-dispatches every unit from the start file on, from verified records; the
        # units before it were flushed before the checkpoint that chose it. Their positions
        # still guide the scan's walk (each record is verified anyway).
        hints = {m.file_from_offset: consume_queues.units_between(
            m.file_from_offset, m.file_end_offset) for m in files[start_index:]}
        consume_queues.truncate_by_phy(files[start_index].file_from_offset)
    else:
        start_index = start_file_normal(
            firsts, dispatch_from_phy_offset=consume_queues.max_phy_offset())
        hints = {}
    scanned, dispatched, process_offset, reason, last_confirm_valid = _scan_and_dispatch(
        config, consume_queues, dispatcher, files, firsts, start_index, abnormal=abnormal,
        confirm_offset=stored_confirm, check_crc=check_crc, verify_prop=verify_prop,
        chain_hints=hints,
    )
    # Drop consume-queue units and commitlog bytes after the last valid record (M7).
    consume_queues.truncate_by_phy(process_offset)
    old_max = commitlog.max_phy_offset
    clean_end = _zeros_at(commitlog, process_offset)
    commitlog.truncate_dirty(process_offset)
    commitlog.flushed_where = process_offset
    if reason is not None and not clean_end:
        # Not the ordinary end of data (zeros): damaged or stale bytes were cut off.
        log.warning("commitlog recovered to phy_offset=%d (was %d) reason=%s",
                    process_offset, old_max, reason)
    else:
        log.info("commitlog recovered max_phy_offset=%d", process_offset)
    if config.enable_controller_mode:
        confirm = clamp_confirm_offset(
            stored_confirm, min_phy_offset=commitlog.min_phy_offset,
            bound=last_confirm_valid if abnormal else process_offset,
        )
    else:
        confirm = process_offset
    lost_committed = process_offset < stored_confirm
    if lost_committed:
        log.error("committed data lost: recovered max_phy_offset=%d < checkpoint "
                  "confirm_offset=%d", process_offset, stored_confirm)
    return RecoveryReport(
        abnormal=abnormal, checkpoint_bad=checkpoint.bad,
        start_file=files[start_index].path.name, records_scanned=scanned,
        records_dispatched=dispatched, max_phy_offset=process_offset, stop_reason=reason,
        checkpoint_confirm_offset=stored_confirm, confirm_offset=confirm,
        lost_committed=lost_committed, elapsed_s=time.monotonic() - started,
    )


def _scan_and_dispatch(
    config: StoreConfig, consume_queues: ConsumeQueueStore, dispatcher: Dispatcher,
    files: list[MappedFile], firsts: list[FirstRecord], start_index: int, *, abnormal: bool,
    confirm_offset: int, check_crc: bool, verify_prop: bool, chain_hints: dict[int, Units],
) -> tuple[int, int, int, str | None, int]:
    """Scan from the start file; dispatch what the consume queues lack. `chain_hints`:
    record positions per file (from units dropped before the scan) to spare the walk.

    Returns (records scanned, records dispatched, process offset, stop reason, end of the
    last record within confirmOffset).
    """
    controller = config.enable_controller_mode
    bound = confirm_offset if controller else None
    dispatched = 0
    last_confirm_valid = files[start_index].file_from_offset

    def on_record(check: RecordCheck) -> None:
        nonlocal dispatched
        if bound is not None and check.phy_offset + check.size > bound:
            # Past confirmOffset: not exposed, after a clean exit either (M4, #6609; Java's
            # normal recovery has no such bound, §9.2 step 3, but ours must keep M4).
            return
        if dispatcher.dispatch_recovered(check):
            dispatched += 1

    def on_records(batch: RecordBatch) -> None:
        nonlocal dispatched
        dispatched += dispatcher.dispatch_recovered_batch(batch, bound=bound)

    scanned = 0
    reason: str | None = None
    process_offset = files[start_index].file_from_offset
    for mapped in files[start_index:]:
        known = consume_queues.units_between(mapped.file_from_offset, mapped.file_end_offset)
        fast = scan_file_fast(
            mapped.buf, file_from_offset=mapped.file_from_offset, file_size=mapped.file_size,
            check_body_crc=check_crc, verify_prop_crc=verify_prop, on_record=on_record,
            on_records=on_records, known_phy_offsets=known[0],
            known_chain=chain_hints.get(mapped.file_from_offset, known),
        )
        scan = fast.scan
        scanned += scan.records
        if controller and abnormal and len(fast.positions):
            ends = fast.positions + fast.sizes + mapped.file_from_offset
            within = ends[ends <= confirm_offset]
            if len(within):
                last_confirm_valid = max(last_confirm_valid, int(within[-1]))
        process_offset = mapped.file_from_offset + scan.end_pos
        if scan.stop is ScanStop.INVALID:
            reason = f"{mapped.path.name}+{scan.end_pos}: {scan.reason}"
            break
        process_offset = mapped.file_end_offset
    if dispatcher.to_rebuild:
        dispatched += dispatcher.rebuild_queues(
            files, end=process_offset, bound=confirm_offset if controller else process_offset,
            check_crc=check_crc, verify_prop=verify_prop,
        )
    if not controller or not abnormal:
        last_confirm_valid = process_offset
    return scanned, dispatched, process_offset, reason, last_confirm_valid


def _zeros_at(commitlog: CommitLog, phy_offset: int) -> bool:
    """True if the 8 bytes at `phy_offset` are zeros (or the log ends there)."""
    mapped = commitlog.files.find(phy_offset)
    if mapped is None:
        return True
    pos = phy_offset - mapped.file_from_offset
    return not any(mapped.buf[pos:pos + 8])
