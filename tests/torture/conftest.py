"""Crash torture: print how many seeded cases each family ran (and which seeds failed).

Under pytest-xdist the families run in worker processes: each test's report carries its
worker's tallies (user_properties), and the controlling process prints the merged ones."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Generator
from typing import Any, cast

import pytest

from tests.torture.harness import TALLIES, Tally

TALLY_PROPERTY = "torture_tallies"
# The tallies reported by xdist workers, by worker and family (each report is cumulative).
WORKER_TALLIES: dict[str, dict[str, Tally]] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "call" and TALLIES and hasattr(item.config, "workerinput"):
        report.user_properties.append(
            # plain types only: execnet serializes no Counter
            (TALLY_PROPERTY, [{**dataclasses.asdict(tally), "kinds": dict(tally.kinds)}
                              for tally in TALLIES.values()])
        )
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    worker = getattr(report, "node", None)
    for name, value in report.user_properties:
        if name == TALLY_PROPERTY and worker is not None:
            tallies = WORKER_TALLIES.setdefault(str(worker.gateway.id), {})
            for fields in cast("list[dict[str, Any]]", value):
                tallies[fields["family"]] = Tally(**{**fields, "kinds": Counter(fields["kinds"])})


def merged_tallies() -> dict[str, Tally]:
    merged = {family: dataclasses.replace(tally, failed=list(tally.failed),
                                          kinds=Counter(tally.kinds))
              for family, tally in TALLIES.items()}
    for tallies in WORKER_TALLIES.values():
        for family, tally in tallies.items():
            into = merged.setdefault(family, Tally(family))
            into.cases += tally.cases
            into.failed += tally.failed
            into.seconds += tally.seconds
            into.kinds.update(tally.kinds)
    return merged


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    tallies = merged_tallies()
    if not tallies:
        return
    terminalreporter.section("crash torture (docs/reliability.md §7)")
    total = 0
    for family, tally in sorted(tallies.items()):
        total += tally.cases
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(tally.kinds.items()))
        failed = f"; FAILED seeds {tally.failed[:20]}" if tally.failed else ""
        terminalreporter.write_line(
            f"family {family}: {tally.cases} cases in {tally.seconds:.1f} s ({kinds}){failed}"
        )
    terminalreporter.write_line(f"total: {total} seeded cases")
