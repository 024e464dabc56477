"""Family C (docs/reliability.md §7.3): simulated power loss from the durability journal.

Each seed runs a plan in-process with the journal on: appends and batches, commitlog flushes (an
append followed by a flush covering it is a SYNC_FLUSH acknowledgement), consume-queue flushes,
checkpoint writes, truncations, epoch entries and, in controller mode, confirmOffset moves. At a
seeded operation the power goes off: powerloss.py builds the disk image from the files and the
journal (unsynced pages kept, zeroed or torn), and the store recovers it. Checked:

1. every record wholly inside the durable prefix survives, and every acknowledged append;
2. the recovered records are a prefix of the oracle's log: nothing past the first hole;
3. metadata files are old or new, never torn (the image holds the last atomic replace; the
   checkpoint decodes and the epoch file reads from its main copy); after recovery no epoch
   entry starts beyond maxPhyOffset, and the file on disk says the same;
4. confirmOffset <= maxPhyOffset; `lost_committed` iff the checkpoint's confirmOffset was above
   the recovered end (#6703), never outside controller mode (its confirmOffset is the flushed
   offset, durable by definition);
5. recovering again (the recovered store crashing at once) and reopening after a clean close give
   the same records, consume queues and epochs.
Consume queues must match the records as in family A: dense, holding all of them, or in
controller mode exactly those ending at or below the recovered confirmOffset (#6609).
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import pytest

from store import testhooks
from store.checkpoint import decode_checkpoint
from store.config import StoreConfig
from store.epoch_file import EpochFileSource, read_epoch_file
from store.message_store import MessageStore
from store.store_recovery import RecoveryReport
from tests.torture.checks import (
    QueueState,
    check_consume_queues,
    check_lookups,
    check_prefix,
    check_tail,
    epoch_pairs,
    queue_states,
    walk_log,
)
from tests.torture.driver import Driver, FakeClock
from tests.torture.harness import case_seeds, run_cases_async
from tests.torture.powerloss import PowerLossImage, build_power_loss_image, durable_log_end
from tests.torture.workload import (
    FILE_SIZE,
    AppendEpoch,
    Layout,
    Op,
    Plan,
    Profile,
    Rec,
    make_plan,
    torture_config,
)

pytestmark = pytest.mark.torture

CASES: Final = 300
PLAN_OPS: Final = 110
CONTROLLER_SHARE: Final = 0.4
POWER_PROFILE: Final = Profile(
    append=0.5, flush=0.14, flush_cq=0.08, checkpoint=0.08, truncate=0.04, epoch=0.04,
    confirm=0.12, ticks_ms=(1, 5, 40, 400),
)
# Half the seeds use consume-queue files of several pages (1000 units, 20000 bytes: as in real
# 6,000,000-byte files, units straddle page and sector boundaries) with longer plans that rarely
# flush them, so lost and torn pages cut units in two; the other half one-page files (100 units)
# flushed often.
MULTI_PAGE_CQ_UNITS: Final = 1000
MULTI_PAGE_PLAN_OPS: Final = 220
MULTI_PAGE_PROFILE: Final = replace(POWER_PROFILE, flush_cq=0.01)


@dataclass(frozen=True, slots=True)
class PowerCase:
    plan: Plan
    cq_units: int

    def config(self, root: Path) -> StoreConfig:
        return torture_config(root, controller=self.plan.controller, cq_units=self.cq_units)


def power_plan(seed: int) -> PowerCase:
    rng = random.Random(seed)
    controller = rng.random() < CONTROLLER_SHARE
    multi_page = rng.random() < 0.5
    first: list[Op] = [AppendEpoch(1, 0)] if rng.random() < 0.5 else []
    plan = make_plan(rng.getrandbits(48),
                     n_ops=MULTI_PAGE_PLAN_OPS if multi_page else PLAN_OPS, controller=controller,
                     profile=MULTI_PAGE_PROFILE if multi_page else POWER_PROFILE,
                     first_ops=first)
    return PowerCase(plan, MULTI_PAGE_CQ_UNITS if multi_page else 100)


@dataclass(frozen=True, slots=True)
class Recovered:
    """What one recovery produced, compared across reopenings (property 5)."""

    records: tuple[Rec, ...]
    max_phy_offset: int
    queues: tuple[QueueState, ...]
    epochs: tuple[tuple[int, int], ...]
    confirm_offset: int


def snapshot(store: MessageStore) -> Recovered:
    return Recovered(tuple(walk_log(store)), store.max_phy_offset, tuple(queue_states(store)),
                     tuple(epoch_pairs(store)), store.confirm_offset)


async def run_until_power_off(case: PowerCase, ops: int, root: Path, image_root: Path,
                               rng: random.Random) -> tuple[Layout, PowerLossImage]:
    """Run the first `ops` operations with the journal on, then build the power-loss image
    (before the store is closed: closing writes files the image must not see)."""
    plan = case.plan
    journal: list[str] = []
    testhooks.configure_journal(root, journal.append)
    clock = FakeClock(plan.end_clock_ms)
    store = MessageStore(case.config(root), wall_ms=clock)
    try:
        store.open()
        driver = Driver(store, clock, controller=plan.controller)
        for op in plan.ops[:ops]:
            await driver.apply(op)
        testhooks.configure_journal(None)
        image = build_power_loss_image(root, journal, image_root, rng)
    finally:
        testhooks.configure_journal(None)
        store.close()
    return driver.layout, image


def open_store(root: Path, case: PowerCase) -> tuple[MessageStore, RecoveryReport]:
    store = MessageStore(case.config(root), wall_ms=FakeClock(case.plan.end_clock_ms + 60_000))
    return store, store.open()


async def power_case(seed: int, tmp: Path) -> str:
    case = power_plan(seed)
    plan = case.plan
    rng = random.Random(seed * 65537)
    power_off_at = rng.randint(1, len(plan.ops))
    live = tmp / f"c{seed}"
    image_root = tmp / f"c{seed}-image"
    # The oracle runs next to the store: the driver checks every result against it.
    layout, image = await run_until_power_off(case, power_off_at, live, image_root, rng)
    shutil.rmtree(live)
    durable_end = durable_log_end(image, file_size=FILE_SIZE, log_end=layout.max_phy_offset)
    assert layout.acked_end <= durable_end, (
        f"a flush acknowledged {layout.acked_end} but the journal made only {durable_end} "
        "durable")
    checkpoint_path = image_root / "checkpoint"
    stored = decode_checkpoint(checkpoint_path.read_bytes()) if checkpoint_path.exists() else None
    assert stored is None or not stored.bad, f"checkpoint torn in the image: {stored}"
    stored_confirm = stored.checkpoint.confirm_phy_offset if stored is not None else 0
    assert read_epoch_file(image_root / "epochFileCheckpoint").source in (
        EpochFileSource.MAIN, EpochFileSource.NONE), "the epoch file's main copy is torn"
    context = (f"power off after op {power_off_at} of {len(plan.ops)} "
               f"(controller={plan.controller}, {case.cq_units}-unit CQ files), "
               f"durable commitlog end {durable_end}, acknowledged end {layout.acked_end}, "
               f"log end {layout.max_phy_offset}, "
               f"{image.torn_pages} torn pages, vanished {list(image.vanished)}")
    try:
        check_power_loss(case, layout, image_root, durable_end=durable_end,
                         stored_confirm=stored_confirm)
    except AssertionError as err:
        raise AssertionError(f"{context}: {err}") from err
    shutil.rmtree(image_root)
    shutil.rmtree(tmp / f"c{seed}-again", ignore_errors=True)
    mode = "controller" if plan.controller else "standalone"
    return f"{mode}, {'multi' if case.cq_units > 100 else 'one'}-page CQ"


def check_power_loss(case: PowerCase, layout: Layout, root: Path, *, durable_end: int,
                     stored_confirm: int) -> None:
    plan = case.plan
    store, report = open_store(root, case)
    try:
        must = max(durable_end, layout.acked_end)
        required = sum(1 for r in layout.records if r.end <= must)
        records = walk_log(store)
        check_prefix(records, layout.records, at_least=required, what="recovered log")
        max_phy = store.max_phy_offset
        check_tail(store)
        dispatched = report.confirm_offset if plan.controller else max_phy
        check_consume_queues(store, records, dispatched_end=dispatched)
        check_lookups(store, records)
        assert report.confirm_offset <= max_phy
        assert report.lost_committed == (max_phy < stored_confirm), (
            f"lost_committed={report.lost_committed}, max_phy_offset={max_phy}, checkpoint "
            f"confirm {stored_confirm}")
        assert plan.controller or not report.lost_committed, (
            "lost_committed outside controller mode: the checkpoint claimed unsynced bytes")
        want_epochs = [(e, s) for e, s in layout.epochs if s <= max_phy]
        assert epoch_pairs(store) == want_epochs, f"epochs {epoch_pairs(store)} != {want_epochs}"
        on_disk = read_epoch_file(store.epoch_file_path).entries
        assert [(e.epoch, e.start_offset) for e in on_disk] == want_epochs
        first = snapshot(store)
        # Idempotent: a crash right after recovery recovers the same, and so does a reopen.
        again = shutil.copytree(root, root.with_name(root.name + "-again"),
                                ignore=shutil.ignore_patterns("lock"))
    finally:
        store.close()
    for where, what in ((again, "recovery of the recovered store"), (root, "clean reopen")):
        store, _ = open_store(where, case)
        try:
            state = snapshot(store)
        finally:
            store.close()
        assert state == first, f"{what} differs: {describe_difference(first, state)}"


def describe_difference(first: Recovered, second: Recovered) -> str:
    for name in Recovered.__slots__:
        a, b = getattr(first, name), getattr(second, name)
        if a != b:
            return f"{name}: {str(a)[:300]} != {str(b)[:300]}"
    return "none"


async def test_power_loss_keeps_every_synced_record(tmp_path: Path) -> None:
    """docs/reliability.md §7.3: durable prefix and SYNC_FLUSH acks survive; metadata old or new."""
    await run_cases_async("C", "test_power_loss", case_seeds("C", CASES),
                          lambda seed: power_case(seed, tmp_path))
