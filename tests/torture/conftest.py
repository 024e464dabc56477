"""Crash torture: print how many seeded cases each family ran (and which seeds failed)."""

from __future__ import annotations

import pytest

from tests.torture.harness import TALLIES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TALLIES:
        return
    terminalreporter.section("crash torture (docs/reliability.md §7)")
    total = 0
    for family, tally in sorted(TALLIES.items()):
        total += tally.cases
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(tally.kinds.items()))
        failed = f"; FAILED seeds {tally.failed[:20]}" if tally.failed else ""
        terminalreporter.write_line(
            f"family {family}: {tally.cases} cases in {tally.seconds:.1f} s ({kinds}){failed}"
        )
    terminalreporter.write_line(f"total: {total} seeded cases")
