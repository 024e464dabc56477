"""Family B (docs/reliability.md §7.2): offline byte damage; recovery keeps exactly what lies before
it.

A store of about 2000 records (64 KiB files, 3 queues, epochs 1..3 so `.bak` exists) is built once
per module and copied per case: cleanly closed (normal recovery), a crash image of the live store
(abort present, checkpoint from 70 % of the way), or the clean store with the abort file
re-created. Each seed applies one damage:

    a. truncate a commitlog file at p (shorter: refused, CorruptFileError naming it; or refilled
       with zeros up to the file size);
    b. zero [p, p+k), k in {1, 512, 4096, random};   c. flip one bit at p;
    d. random bytes over [p, p+k);
    e. copy an earlier valid record over p (stale but CRC-valid: the PHYSICALOFFSET check must
       reject it);
    f. delete or empty the last file; delete a middle file; add a file with a bad name or size,
       or an all-zero file of the right size;
    g. corrupt the checkpoint (random bytes, truncation, a flipped bit, zeros) or the epoch file
       (bad CRC, bad count, missing: `.bak` is used; both bad: EpochFileUnreadableError).

p is uniform over the recovery window (computed here as the store chooses its start file:
docs/store-format.md §9.2 HEAD rule when the abort file is absent, §9.3 checkpoint min timestamp
otherwise), one case in ten aimed at a record or file boundary +-3 bytes. The oracle
d = start of the first record whose extent (a BLANK's 8-byte header included) holds a changed
byte. Expected: exactly the oracle records ending at or below d, maxPhyOffset = d, consume queues
matching them, `lost_committed` iff d < the checkpoint's confirmOffset, no exception but the
typed ones, recovery under 2 s. A second test damages records *below* the window: recovery does
not see them, and a read of such a record raises RecordCorruptError instead of serving it.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pytest

from store.epoch_file import read_epoch_file
from store.errors import CorruptFileError, EpochFileUnreadableError, RecordCorruptError
from store.mapped_file import offset_to_file_name
from store.message_store import MessageStore
from tests.torture.checks import (
    check_consume_queues,
    check_lookups,
    check_prefix,
    check_tail,
    epoch_pairs,
    walk_log,
)
from tests.torture.driver import Driver, FakeClock
from tests.torture.harness import case_seeds, run_cases
from tests.torture.workload import (
    FILE_SIZE,
    TOPIC,
    AppendEpoch,
    Flush,
    FlushConsumeQueues,
    Layout,
    Op,
    Plan,
    Profile,
    Rec,
    WriteCheckpoint,
    make_plan,
    torture_config,
)

pytestmark = pytest.mark.torture

CASES: Final = 300
BELOW_WINDOW_CASES: Final = 40
# 400-unit consume-queue files: two per queue, fewer files to copy per case (file creation costs
# about 1 ms on the test machine's ext4).
CQ_UNITS: Final = 400
BASE_PLAN_SEED: Final = 424_242
BASE_PLAN_OPS: Final = 1450
RECOVERY_SECONDS_MAX: Final = 2.0
CHECKPOINT_AT: Final = 0.7  # the crash image's checkpoint is written this far through the plan
MIN_TIMESTAMP_MARGIN_MS: Final = 3000
BOUNDARY_SHARE: Final = 0.1
BASE_PROFILE: Final = Profile(
    append=0.93, flush=0.03, flush_cq=0.02, checkpoint=0.0, truncate=0.0, epoch=0.0,
    confirm=0.0,
)
# Relative weights of the damage kinds (a..g).
KINDS: Final = {
    "a-truncate-short": 4, "a-truncate-zero-fill": 8, "b-zero": 16, "c-flip": 16,
    "d-random": 14, "e-stale-record": 12, "f-delete-last": 3, "f-empty-last": 2,
    "f-missing-middle": 2, "f-bad-name": 3, "f-bad-size": 3, "f-zero-extra": 2,
    "g-checkpoint-random": 2, "g-checkpoint-truncate": 2, "g-checkpoint-flip": 2,
    "g-checkpoint-zero": 1, "g-epoch-crc": 2, "g-epoch-count": 2, "g-epoch-both": 2,
    "g-epoch-main-missing": 1,
}
VARIANTS: Final = ("clean", "clean", "crashed", "clean+abort")


# ------------------------------------------------------------------------------- the base


@dataclass(frozen=True, slots=True)
class Base:
    """The undamaged stores and their oracle."""

    clean: Path
    crashed: Path
    layout: Layout
    file_bytes: tuple[bytes, ...]  # each commitlog file as written
    extent_starts: npt.NDArray[np.int64]  # records and BLANK headers, in offset order
    extent_ends: npt.NDArray[np.int64]
    epochs: tuple[tuple[int, int], ...]
    bak_epochs: tuple[tuple[int, int], ...]

    @property
    def max_phy_offset(self) -> int:
        return self.layout.max_phy_offset

    def record_at(self, offset: int) -> Rec | None:
        """The record whose extent holds `offset`, if any."""
        starts = [r.start for r in self.layout.records]
        index = int(np.searchsorted(starts, offset, side="right")) - 1
        if index >= 0 and offset < self.layout.records[index].end:
            return self.layout.records[index]
        return None


def base_plan() -> Plan:
    """About 2000 records; epochs at 0, 30 % and 60 %; flushes and a checkpoint at 70 %."""
    plan = make_plan(BASE_PLAN_SEED, n_ops=BASE_PLAN_OPS, controller=False,
                     profile=BASE_PROFILE)
    ops: list[Op] = list(plan.ops)
    checkpoint_at = int(len(ops) * CHECKPOINT_AT)
    ops[checkpoint_at:checkpoint_at] = [Flush(), FlushConsumeQueues(), WriteCheckpoint()]
    for fraction, epoch in ((0.6, 3), (0.3, 2)):
        at = int(len(ops) * fraction)
        start = Plan(plan.seed, False, tuple(ops[:at])).layout_after(at).max_phy_offset
        ops.insert(at, AppendEpoch(epoch, start))
    return Plan(plan.seed, False, (AppendEpoch(1, 0), *ops))


async def build_base(root: Path, crashed: Path) -> Layout:
    plan = base_plan()
    clock = FakeClock(plan.end_clock_ms)
    store = MessageStore(torture_config(root, cq_units=CQ_UNITS), wall_ms=clock)
    store.open()
    driver = Driver(store, clock, controller=False)
    for op in plan.ops:
        await driver.apply(op)
    shutil.copytree(root, crashed, ignore=shutil.ignore_patterns("lock"))
    store.close()
    return driver.layout


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    top = tmp_path_factory.mktemp("damage-base")
    layout = asyncio.run(build_base(top / "clean", top / "crashed"))
    # Checked on a copy: opening and closing rewrites the checkpoint the cases start from.
    copy = shutil.copytree(top / "clean", top / "check", ignore=shutil.ignore_patterns("lock"))
    store = MessageStore(torture_config(copy, cq_units=CQ_UNITS))
    store.open()
    try:
        # The base itself must be exactly the oracle: cases then only check what changed.
        records = walk_log(store)
        check_prefix(records, layout.records, at_least=len(layout.records), what="base store")
        check_consume_queues(store, records, dispatched_end=store.max_phy_offset)
        assert store.max_phy_offset == layout.max_phy_offset
        file_bytes = tuple(bytes(m.buf) for m in store.commitlog.files.files)
    finally:
        store.close()
    shutil.rmtree(copy)
    extents = sorted([(r.start, r.end) for r in layout.records]
                     + [(b, b + 8) for b in layout.blanks])
    epoch_path = top / "clean" / "epochFileCheckpoint"
    epochs = tuple((e.epoch, e.start_offset) for e in read_epoch_file(epoch_path).entries)
    bak = read_epoch_file(epoch_path.with_name("epochFileCheckpoint.bak")).entries
    return Base(
        top / "clean", top / "crashed", layout, file_bytes,
        np.array([s for s, _ in extents], dtype=np.int64),
        np.array([e for _, e in extents], dtype=np.int64),
        epochs, tuple((e.epoch, e.start_offset) for e in bak),
    )


# ------------------------------------------------------------------- naive twins of the rules


@dataclass(frozen=True, slots=True)
class CheckpointView:
    """The checkpoint as the rules of docs/store-format.md §7 and checkpoint.py read it."""

    bad: bool
    min_timestamp: int
    confirm_offset: int
    logics_physical_offset: int


def read_checkpoint_twin(data: bytes | None) -> CheckpointView:
    """Absent: zeros. Bad: not 4096 bytes, a pyrmq trailer (at 48, or the earlier one at 40)
    with a wrong CRC, or (no trailer) anything but zeros after the 48 field bytes, where Java
    never writes."""
    if data is None:
        return CheckpointView(False, 0, 0, 0)
    if len(data) != 4096:
        return CheckpointView(True, 0, 0, 0)
    physic, logics, _, _, confirm, logics_phy = struct.unpack_from(">qqqqqq", data)
    if data[48:56] == b"PYRMQCK2":
        stored = int.from_bytes(data[56:60], "big", signed=True)
        bad = stored != zlib.crc32(data[:48]) & 0x7FFFFFFF
    elif data[40:48] == b"PYRMQCK1":
        stored = int.from_bytes(data[48:52], "big", signed=True)
        bad = stored != zlib.crc32(data[:40]) & 0x7FFFFFFF
        logics_phy = 0
    else:
        bad = any(data[48:])
    if bad:
        return CheckpointView(True, 0, 0, 0)
    return CheckpointView(
        False, max(min(physic, logics) - MIN_TIMESTAMP_MARGIN_MS, 0), confirm, logics_phy
    )


def window_start(base: Base, *, abnormal: bool, checkpoint: CheckpointView) -> int:
    """Where recovery starts scanning: §9.2 HEAD rule, or §9.3 by checkpoint min timestamp or
    (if earlier) by its logicsPhysicalOffset."""
    layout = base.layout
    firsts = {r.start: r for r in layout.records if r.start % FILE_SIZE == 0}
    starts = list(range(0, layout.max_phy_offset, FILE_SIZE))
    if abnormal:
        by_timestamp = by_offset = 0
        for start in reversed(starts):
            first = firsts.get(start)
            if first and 0 < first.store_timestamp <= checkpoint.min_timestamp:
                by_timestamp = start
                break
        for start in reversed(starts):
            first = firsts.get(start)
            if first and first.store_timestamp and first.start <= checkpoint.logics_physical_offset:
                by_offset = start
                break
        return min(by_timestamp, by_offset) if checkpoint.logics_physical_offset > 0 else \
            by_timestamp
    dispatch_from = max(r.end for r in layout.records)
    for start in reversed(starts[1:]):
        first = firsts.get(start)
        if first and first.store_timestamp != 0 and first.start <= dispatch_from:
            return start
    return 0


def first_damaged(base: Base, changed: npt.NDArray[np.int64]) -> int:
    """d: the start of the first record or BLANK header holding a changed byte, else the end of
    the log (bytes past it, or inside BLANK filler, change nothing)."""
    max_phy = base.max_phy_offset
    if not len(changed):
        return max_phy
    index = np.searchsorted(base.extent_starts, changed, side="right") - 1
    valid = index >= 0
    inside = np.zeros(len(changed), dtype=bool)
    inside[valid] = changed[valid] < base.extent_ends[index[valid]]
    if not inside.any():
        return max_phy
    return min(int(base.extent_starts[index[inside]].min()), max_phy)


# -------------------------------------------------------------------------------- damage


@dataclass(slots=True)
class Expect:
    """What recovery must do after one damage."""

    kind: str
    d: int
    error: type[Exception] | None = None
    error_names: str = ""
    epochs: tuple[tuple[int, int], ...] = ()
    detail: str = ""
    notes: list[str] = field(default_factory=list)


def commitlog_path(root: Path, start: int) -> Path:
    return root / "commitlog" / offset_to_file_name(start)


def changed_offsets(before: bytes, after: bytes, file_start: int) -> npt.NDArray[np.int64]:
    n = min(len(before), len(after))
    a = np.frombuffer(before, dtype=np.uint8, count=n)
    b = np.frombuffer(after, dtype=np.uint8, count=n)
    diff = np.flatnonzero(a != b).astype(np.int64)
    if len(after) < len(before):  # bytes cut off count as changed, whatever they held
        tail = np.flatnonzero(np.frombuffer(before, dtype=np.uint8)[n:]).astype(np.int64) + n
        diff = np.concatenate([diff, tail])
    return diff + file_start


def pick_offset(rng: random.Random, base: Base, low: int) -> int:
    """p: uniform over [low, max), or one time in ten a record/file boundary +-3 (>= low)."""
    high = base.max_phy_offset
    if rng.random() < BOUNDARY_SHARE:
        boundaries = [b for b in (*base.extent_starts.tolist(), *base.extent_ends.tolist(),
                                  *range(0, high + 1, FILE_SIZE)) if low <= b <= high]
        return max(low, int(rng.choice(boundaries)) + rng.randint(-3, 3))
    return rng.randrange(low, high)


def damage_bytes(root: Path, base: Base, rng: random.Random, kind: str, low: int) -> Expect:
    """Kinds a-e: change bytes of one commitlog file at p >= `low`; d from what changed."""
    p = pick_offset(rng, base, low)
    file_start = p - p % FILE_SIZE
    path = commitlog_path(root, file_start)
    before = base.file_bytes[file_start // FILE_SIZE] if path.exists() else b""
    if not before:  # p at the end of the last file: damage that file's tail instead
        file_start -= FILE_SIZE
        path = commitlog_path(root, file_start)
        before = base.file_bytes[file_start // FILE_SIZE]
    assert path.stat().st_nlink == 1, f"{path.name} is linked to the base: never damage it"
    pos = p - file_start
    data = bytearray(before)
    k = rng.choice((1, 512, 4096, rng.randint(1, 20_000)))
    detail = f"{kind} at {p} ({path.name}+{pos})"
    if kind == "a-truncate-short":
        last = file_start + FILE_SIZE >= base.max_phy_offset
        if pos == 0 and last:
            path.write_bytes(b"")
            return Expect(kind, file_start, detail=detail + ": empty last file")
        with path.open("r+b") as f:
            f.truncate(pos)
        return Expect(kind, 0, CorruptFileError, path.name, detail=detail)
    if kind == "a-truncate-zero-fill":
        data[pos:] = bytes(FILE_SIZE - pos)
    elif kind == "b-zero":
        data[pos : pos + k] = bytes(len(data[pos : pos + k]))
        detail += f" k={k}"
    elif kind == "c-flip":
        data[pos] ^= 1 << rng.randrange(8)
    elif kind == "d-random":
        span = len(data[pos : pos + k])
        data[pos : pos + k] = rng.randbytes(span)
        detail += f" k={k}"
    else:  # e-stale-record: an earlier record's bytes, often exactly at a record start
        here = base.record_at(p)
        if here is not None and rng.random() < 0.5:
            p, pos = here.start, here.start - file_start
        earlier = [r for r in base.layout.records if r.end <= p] or base.layout.records[:1]
        source = rng.choice(earlier[-200:])
        src_file = base.file_bytes[source.start // FILE_SIZE]
        src = src_file[source.start % FILE_SIZE : source.start % FILE_SIZE + source.size]
        data[pos : pos + len(src)] = src[: FILE_SIZE - pos]
        detail = f"{kind}: record at {source.start} copied over {p}"
    path.write_bytes(bytes(data))
    d = first_damaged(base, changed_offsets(before, bytes(data), file_start))
    return Expect(kind, d, detail=detail)


def damage_files(root: Path, base: Base, rng: random.Random, kind: str) -> Expect:
    """Kind f: whole commitlog files."""
    directory = root / "commitlog"
    names = sorted(p.name for p in directory.iterdir())
    last = directory / names[-1]
    last_start = int(names[-1])
    end = base.max_phy_offset
    next_name = offset_to_file_name(last_start + FILE_SIZE)
    if kind == "f-delete-last":
        last.unlink()
        return Expect(kind, last_start, detail=f"deleted {last.name}")
    if kind == "f-empty-last":
        last.write_bytes(b"")
        return Expect(kind, last_start, detail=f"emptied {last.name}")
    if kind == "f-missing-middle":
        index = rng.randrange(1, len(names) - 1)
        (directory / names[index]).unlink()
        return Expect(kind, 0, CorruptFileError, names[index + 1],
                      detail=f"deleted middle file {names[index]}")
    if kind == "f-bad-name":
        bad = rng.choice(("garbage", "0" * 19, "0" * 21, next_name + ".bak", "-" + "0" * 19))
        (directory / bad).write_bytes(bytes(FILE_SIZE))
        return Expect(kind, 0, CorruptFileError, bad, detail=f"added {bad!r}")
    if kind == "f-bad-size":
        size = rng.choice((1, 4096, FILE_SIZE - 1, FILE_SIZE + 1, 2 * FILE_SIZE))
        (directory / next_name).write_bytes(bytes(size))
        return Expect(kind, 0, CorruptFileError, next_name,
                      detail=f"added {next_name} of {size} bytes")
    (directory / next_name).write_bytes(bytes(FILE_SIZE))  # f-zero-extra
    return Expect(kind, end, detail=f"added an all-zero {next_name}")


def damage_metadata(root: Path, base: Base, rng: random.Random, kind: str) -> Expect:
    """Kind g: the checkpoint or the epoch file (the commitlog is untouched)."""
    end = base.max_phy_offset
    if kind.startswith("g-checkpoint"):
        path = root / "checkpoint"
        data = bytearray(path.read_bytes())
        if kind == "g-checkpoint-random":
            data = bytearray(rng.randbytes(len(data)))
        elif kind == "g-checkpoint-truncate":
            del data[rng.randrange(len(data)) :]
        elif kind == "g-checkpoint-flip":
            data[rng.randrange(60)] ^= 1 << rng.randrange(8)
        else:
            data = bytearray(len(data))
        path.write_bytes(bytes(data))
        return Expect(kind, end, epochs=base.epochs, detail=kind)
    main = root / "epochFileCheckpoint"
    bak = main.with_name(main.name + ".bak")
    text = main.read_text()
    count, crc, *entries = text.splitlines()
    if kind == "g-epoch-crc":
        main.write_text(f"{count}\n{int(crc) ^ 0x10}\n" + "".join(f"{e}\n" for e in entries))
    elif kind == "g-epoch-count":
        main.write_text(f"{int(count) + 1}\n{crc}\n" + "".join(f"{e}\n" for e in entries))
    elif kind == "g-epoch-main-missing":
        main.unlink()
    else:  # g-epoch-both
        main.write_text(f"{count}\n{int(crc) ^ 0x10}\n" + "".join(f"{e}\n" for e in entries))
        bak_text = bak.read_text()
        bak.write_text(bak_text.replace("\n", "\n9\n", 1))
        return Expect(kind, 0, EpochFileUnreadableError, main.name, detail=kind)
    return Expect(kind, end, epochs=base.bak_epochs, detail=kind)


# ------------------------------------------------------------------------------ the cases


def prepare_case(base: Base, variant: str, root: Path) -> tuple[bool, bytes | None, int]:
    """Set up the variant's store in `root`: returns (abort present, checkpoint bytes, scan
    window start). Commitlog files wholly before the window are hard links to the base's
    (recovery never writes there and no damage goes there; the checks compare them with the
    base bytes), everything else is copied."""
    source = base.crashed if variant == "crashed" else base.clean
    abnormal = variant != "clean"
    data = (source / "checkpoint").read_bytes()
    low = window_start(base, abnormal=abnormal, checkpoint=read_checkpoint_twin(data))

    def copy(src: str, dst: str) -> None:
        name = Path(src).name
        if Path(src).parent.name == "commitlog" and int(name) + FILE_SIZE <= low:
            os.link(src, dst)
        else:
            shutil.copyfile(src, dst)

    shutil.copytree(source, root, ignore=shutil.ignore_patterns("lock"), copy_function=copy)
    if variant == "clean+abort":
        (root / "abort").write_bytes(b"4242")
    return abnormal, data, low


def damage_case(seed: int, base: Base, tmp: Path) -> str:
    rng = random.Random(seed)
    variant = rng.choice(VARIANTS)
    kind = rng.choices(list(KINDS), list(KINDS.values()))[0]
    root = tmp / f"b{seed}"
    abnormal, _, low = prepare_case(base, variant, root)
    if kind.startswith(("a-", "b-", "c-", "d-", "e-")):
        expect = damage_bytes(root, base, rng, kind, low)
    elif kind.startswith("f-"):
        expect = damage_files(root, base, rng, kind)
    else:
        expect = damage_metadata(root, base, rng, kind)
    if not expect.epochs:
        expect.epochs = base.epochs
    checkpoint_path = root / "checkpoint"
    checkpoint = read_checkpoint_twin(
        checkpoint_path.read_bytes() if checkpoint_path.exists() else None)
    # A damaged checkpoint moves the window: a bad one is an abnormal exit with min timestamp 0.
    window = window_start(base, abnormal=abnormal or checkpoint.bad, checkpoint=checkpoint)
    context = f"variant={variant} window_start={window} {expect.detail}"
    try:
        check_damage_case(root, base, expect, abnormal=abnormal, checkpoint=checkpoint,
                          window=window)
    except AssertionError as err:
        raise AssertionError(f"{context}: {err}") from err
    shutil.rmtree(root)
    return kind


def check_damage_case(root: Path, base: Base, expect: Expect, *, abnormal: bool,
                      checkpoint: CheckpointView, window: int) -> None:
    store = MessageStore(torture_config(root, cq_units=CQ_UNITS))
    started = time.monotonic()
    if expect.error is not None:
        with pytest.raises(expect.error) as refused:
            store.open()
        assert expect.error_names in str(refused.value), (
            f"{type(refused.value).__name__} does not name {expect.error_names!r}: "
            f"{refused.value}")
        return
    report = store.open()
    elapsed = time.monotonic() - started
    try:
        d = expect.d
        assert elapsed < RECOVERY_SECONDS_MAX, f"recovery took {elapsed:.2f} s"
        assert report.checkpoint_bad == checkpoint.bad, (
            f"checkpoint_bad={report.checkpoint_bad}, expected {checkpoint.bad}")
        assert report.abnormal == (abnormal or checkpoint.bad)
        # Damage may make the store start earlier (a first record no longer valid), never later.
        assert report.start_file is not None
        assert int(report.start_file) <= window, (
            f"recovery started at {report.start_file}, after the window start {window}")
        assert (report.max_phy_offset, store.max_phy_offset) == (d, d), (
            f"max_phy_offset={store.max_phy_offset} (report {report.max_phy_offset}), "
            f"oracle d={d}")
        expected = [r for r in base.layout.records if r.end <= d]
        # Files wholly before the scan window and the damage are never rewritten: compare
        # bytes; from there on, walk the records.
        walk_from = min(window, d - d % FILE_SIZE)
        for mapped in store.commitlog.files.files:
            if mapped.file_end_offset > walk_from:
                break
            assert mapped.buf[:] == base.file_bytes[mapped.file_from_offset // FILE_SIZE], (
                f"{mapped.path.name} changed although it lies before the scan window")
        records = walk_log(store, from_offset=walk_from)
        tail = [r for r in expected if r.start >= walk_from]
        check_prefix(records, tail, at_least=len(tail), what="records after the damage")
        check_tail(store)
        check_consume_queues(store, expected, dispatched_end=d)
        sample = random.Random(d).sample(expected, min(20, len(expected))) + expected[-1:]
        check_lookups(store, sample)
        lost = d < checkpoint.confirm_offset
        assert report.lost_committed == lost, (
            f"lost_committed={report.lost_committed}, d={d}, checkpoint confirm "
            f"{checkpoint.confirm_offset}")
        want_epochs = [(e, s) for e, s in expect.epochs if s <= d]
        assert epoch_pairs(store) == want_epochs, f"epochs {epoch_pairs(store)} != {want_epochs}"
        on_disk = read_epoch_file(store.epoch_file_path).entries
        assert [(e.epoch, e.start_offset) for e in on_disk] == want_epochs
    finally:
        store.close()


def test_offline_damage_keeps_exactly_the_records_before_it(
    base: Base, tmp_path: Path
) -> None:
    """docs/reliability.md §7.2 a-g: every record before the damage, none after, typed errors."""
    fds_before = len(os.listdir("/proc/self/fd"))
    run_cases("B", "test_offline_damage", case_seeds("B", CASES),
              lambda seed: damage_case(seed, base, tmp_path))
    leaked = len(os.listdir("/proc/self/fd")) - fds_before
    assert leaked < 10, f"{leaked} file descriptors leaked over the damage cases"


# ---------------------------------------------------------------- damage below the window


def below_window_case(seed: int, base: Base, tmp: Path) -> str:
    """Damage one record in a file before the last (normal recovery scans only the last file):
    recovery keeps everything; a read of that record raises and serves nothing."""
    rng = random.Random(seed)
    root = tmp / f"bb{seed}"
    prepare_case(base, "clean", root)
    last_start = base.max_phy_offset - 1 - (base.max_phy_offset - 1) % FILE_SIZE
    victim = rng.choice([r for r in base.layout.records if r.end <= last_start])
    path = commitlog_path(root, victim.start - victim.start % FILE_SIZE)
    data = bytearray(path.read_bytes())
    path.unlink()  # it may be a hard link to the base: damage a private copy
    pos = victim.start % FILE_SIZE
    p = pos + rng.randrange(victim.size)
    how = rng.choice(("flip", "random", "zero"))
    if how == "flip":
        data[p] ^= 1 << rng.randrange(8)
    else:
        k = rng.randint(1, pos + victim.size - p)
        data[p : p + k] = rng.randbytes(k) if how == "random" else bytes(k)
    if bytes(data) == base.file_bytes[victim.start // FILE_SIZE]:
        how = "no-op"
    path.write_bytes(bytes(data))
    store = MessageStore(torture_config(root, cq_units=CQ_UNITS))
    report = store.open()
    try:
        assert report.max_phy_offset == base.max_phy_offset, "damage below the window was seen"
        if how == "no-op":
            return how
        with pytest.raises(RecordCorruptError):
            store.get_messages(TOPIC, victim.queue_id, victim.queue_offset, max_count=1)
        with pytest.raises(RecordCorruptError):
            store.commitlog.read_record(victim.start, victim.size)
        if victim.queue_offset > 0:
            # A pull spanning the damaged record raises too: no partial batch with bad bytes.
            with pytest.raises(RecordCorruptError):
                store.get_messages(TOPIC, victim.queue_id, victim.queue_offset - 1,
                                   max_count=4, max_bytes=1 << 20)
            neighbours = [r for r in base.layout.records if r.queue_id == victim.queue_id
                          and r.queue_offset == victim.queue_offset - 1]
            check_lookups(store, neighbours)
    finally:
        store.close()
    shutil.rmtree(root)
    return how


def test_damage_below_the_scan_window_is_never_served(base: Base, tmp_path: Path) -> None:
    """docs/reliability.md §7.2, read-side verification: a damaged record raises
    RecordCorruptError."""
    run_cases("B-below", "test_damage_below", case_seeds("B-below", BELOW_WINDOW_CASES),
              lambda seed: below_window_case(seed, base, tmp_path))
