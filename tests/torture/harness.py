"""Seeds, case loops and the per-run tally of the crash torture (docs/reliability.md §7).

Every case derives from one integer seed. A run's seeds are `base + family offset + i`, with
`base` fixed (CI replays the same cases) unless `PYRMQ_TORTURE_BASE_SEED` is set (to explore).

Environment:
    PYRMQ_TORTURE_SEED=<seed>        run only this seed (replay a failure)
    PYRMQ_TORTURE_BASE_SEED=<int>    another set of cases
    PYRMQ_TORTURE_SCALE=<float>      multiply every family's case count (e.g. 10 for a long run)

A failing case does not stop the loop: every failure is collected with its seed and replay
command, and the test fails at the end listing them. `TALLIES` feeds the terminal summary
(conftest.py), so a run reports how many cases ran.
"""

from __future__ import annotations

import asyncio
import os
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final

import pytest

SEED_ENV: Final = "PYRMQ_TORTURE_SEED"
BASE_SEED_ENV: Final = "PYRMQ_TORTURE_BASE_SEED"
SCALE_ENV: Final = "PYRMQ_TORTURE_SCALE"
DEFAULT_BASE_SEED: Final = 7_000_000
FAMILY_SEED_OFFSETS: Final = {"A": 0, "B": 100_000, "B-below": 200_000, "C": 300_000}
FAILURES_SHOWN: Final = 10
CASE_DEADLINE_S: Final = 60.0  # one async case; a hang fails that seed, not the whole run


@dataclass(slots=True)
class Tally:
    """One family's run: cases, failing seeds, time, and what kinds of case ran."""

    family: str
    cases: int = 0
    failed: list[int] = field(default_factory=list)
    seconds: float = 0.0
    kinds: Counter[str] = field(default_factory=Counter)


TALLIES: dict[str, Tally] = {}


def case_seeds(family: str, count: int) -> list[int]:
    """The seeds of `family`'s cases for this run (one seed when replaying)."""
    if one := os.environ.get(SEED_ENV):
        return [int(one)]
    base = int(os.environ.get(BASE_SEED_ENV, DEFAULT_BASE_SEED))
    scaled = max(1, round(count * float(os.environ.get(SCALE_ENV, "1"))))
    return [base + FAMILY_SEED_OFFSETS[family] + i for i in range(scaled)]


def replay_command(seed: int, test_name: str) -> str:
    return f"{SEED_ENV}={seed} .venv/bin/pytest tests/torture -k {test_name}"


def _one(seed: int, run_one: Callable[[int], str]) -> tuple[int, str | None, str]:
    try:
        return seed, None, run_one(seed)
    # Any failure of one seeded case (pytest.raises' "DID NOT RAISE" included) is reported with
    # its seed; the other cases go on.
    except (Exception, pytest.fail.Exception):  # noqa: BLE001
        return seed, traceback.format_exc(limit=-6), "failed"


async def _one_async(seed: int, run_one: Callable[[int], Awaitable[str]],
                     ) -> tuple[int, str | None, str]:
    try:
        async with asyncio.timeout(CASE_DEADLINE_S):
            return seed, None, await run_one(seed)
    except (Exception, pytest.fail.Exception):  # noqa: BLE001
        return seed, traceback.format_exc(limit=-6), "failed"


def _report(family: str, test_name: str, results: list[tuple[int, str | None, str]],
            seconds: float) -> Tally:
    """Tally the results; fail the calling test if any case failed, naming each seed."""
    tally = TALLIES.setdefault(family, Tally(family))
    messages: list[str] = []
    for seed, error, kind in results:
        tally.cases += 1
        tally.kinds[kind] += 1
        if error is not None:
            tally.failed.append(seed)
            messages.append(f"--- family {family} seed={seed}\n{error}"
                            f"replay: {replay_command(seed, test_name)}")
    tally.seconds += seconds
    if messages:
        shown = "\n".join(messages[:FAILURES_SHOWN])
        pytest.fail(f"{len(messages)} of {len(results)} family {family} cases failed "
                    f"(seeds {tally.failed[:50]}):\n{shown}", pytrace=False)
    return tally


def run_cases(
    family: str,
    test_name: str,
    seeds: Iterable[int],
    run_one: Callable[[int], str],
    *,
    workers: int = 1,
) -> Tally:
    """Run `run_one(seed)` for every seed (in `workers` threads); it returns the case's kind.

    Fails the calling test after the loop if any case failed, naming each failing seed.
    """
    started = time.monotonic()
    seed_list = list(seeds)
    if workers > 1 and len(seed_list) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(lambda seed: _one(seed, run_one), seed_list))
    else:
        results = [_one(seed, run_one) for seed in seed_list]
    return _report(family, test_name, results, time.monotonic() - started)


async def run_cases_async(
    family: str,
    test_name: str,
    seeds: Iterable[int],
    run_one: Callable[[int], Awaitable[str]],
) -> Tally:
    """`run_cases` for a coroutine per case, one after the other on the running loop."""
    started = time.monotonic()
    results = [await _one_async(seed, run_one) for seed in seeds]
    return _report(family, test_name, results, time.monotonic() - started)
