"""The SIGKILL writer child of the crash torture, family A (docs/reliability.md §7.1).

    python -m tests.torture.writer --root DIR --seed S --phase 1
    python -m tests.torture.writer --root DIR --seed S --phase 2 [--truncate-to T]

Phase 1 opens a fresh store, prints `READY C` (or `READY python`: the writer its appends
use), runs the seed's plan (`kill_plan`) and prints its
progress lines (driver.py) line-buffered; a fault point from `PYRMQ_FAULTPOINTS` or the parent
kills it on the way. If nothing did, it prints `END` and SIGKILLs itself: the store is never
closed cleanly.

Phase 2 reopens the crashed store (recovery runs here), prints `RECOVERED <max_phy_offset>`,
optionally truncates to T as a slave would (`TRUNCATED T`), appends one short record
(`APPENDED start end key`) and SIGKILLs itself: the parent checks that nothing from the old tail
comes back (RocketMQ #10666).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from store import testhooks
from store.commitlog import HALF_WRITE_FAULT
from store.message_store import MessageStore
from store.native import native
from tests.torture.driver import Driver, FakeClock
from tests.torture.workload import (
    BASE_TIMESTAMP_MS,
    AppendEpoch,
    Op,
    Plan,
    Profile,
    encode_single,
    extra_msg,
    make_plan,
    torture_config,
)

KILL_PROFILE: Final = Profile(
    append=0.6, flush=0.08, flush_cq=0.05, checkpoint=0.05, truncate=0.04, epoch=0.04,
    confirm=0.12,
)
KILL_PLAN_OPS: Final = 160
CONTROLLER_SHARE: Final = 0.35
# The second run's clock starts this far after the first run's last store timestamp.
PHASE_2_CLOCK_GAP_MS: Final = 60_000


def kill_plan(seed: int) -> Plan:
    """Family A's plan for `seed` (the parent derives the same plan for its oracle)."""
    rng = random.Random(seed)
    controller = rng.random() < CONTROLLER_SHARE
    first: list[Op] = [AppendEpoch(1, 0)] if rng.random() < 0.5 else []
    return make_plan(rng.getrandbits(48), n_ops=KILL_PLAN_OPS, controller=controller,
                     profile=KILL_PROFILE, first_ops=first)


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


async def phase_1(root: Path, seed: int) -> None:
    plan = kill_plan(seed)
    clock = FakeClock(BASE_TIMESTAMP_MS)
    store = MessageStore(torture_config(root, controller=plan.controller), wall_ms=clock)
    store.open()
    # Which writer this case's appends use: C (production's) unless the half-write fault is armed.
    c_writes = native is not None and not testhooks.armed(HALF_WRITE_FAULT)
    print("READY C" if c_writes else "READY python")
    driver = Driver(store, clock, controller=plan.controller, emit=print)
    for op in plan.ops:
        await driver.apply(op)
    print("END")
    _die()


def phase_2(root: Path, seed: int, truncate_to: int | None) -> None:
    plan = kill_plan(seed)
    clock = FakeClock(plan.end_clock_ms + PHASE_2_CLOCK_GAP_MS)
    store = MessageStore(torture_config(root, controller=plan.controller), wall_ms=clock)
    report = store.open()
    print(f"RECOVERED {report.max_phy_offset}")
    if truncate_to is not None:
        store.truncate_to_blocking(truncate_to)
        print(f"TRUNCATED {truncate_to}")
    extra = extra_msg(seed)
    result = store.append_message(encode_single(extra))
    print(f"APPENDED {result.phy_offset} {result.end_offset} {extra.key}")
    _die()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--phase", type=int, choices=(1, 2), required=True)
    parser.add_argument("--truncate-to", type=int, default=None)
    args = parser.parse_args(argv)
    testhooks.enable_from_environment()  # the parent's PYRMQ_FAULTPOINTS
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if args.phase == 1:
        asyncio.run(phase_1(args.root, args.seed))
    else:
        phase_2(args.root, args.seed, args.truncate_to)
    return 0


if __name__ == "__main__":
    sys.exit(main())
