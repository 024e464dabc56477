"""Benchmark helpers: a peer measured in the same run, and a figures table printed at the end."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from tests.support.leaks import (  # noqa: F401 (pytest finds them here)
    _no_process_left_behind,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

FIGURES: list[str] = []


def median_seconds(fn: Callable[[], object], *, rounds: int,
                   setup: Callable[[], object] | None = None) -> float:
    """Median wall time of `fn` over `rounds` runs (the same method for pyrmq and its peer)."""
    times: list[float] = []
    for _ in range(rounds):
        if setup is not None:
            setup()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def pedantic_median(benchmark: BenchmarkFixture, fn: Callable[..., object], *,
                    setup: Callable[[], tuple[tuple[object, ...], dict[str, object]]],
                    rounds: int) -> float:
    """Run `fn` under pytest-benchmark (one call per round) and return the median seconds."""
    benchmark.pedantic(fn, setup=setup, rounds=rounds, iterations=1)  # type: ignore[no-untyped-call]
    stats = benchmark.stats
    assert stats is not None
    return float(stats.stats.median)


def record(line: str) -> None:
    print(line)
    FIGURES.append(line)


@pytest.fixture(scope="session", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    if FIGURES:
        print("\n==== pyrmq benchmark figures (ratios against a peer measured in the same run)")
        for line in FIGURES:
            print(line)
