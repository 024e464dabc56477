"""Processes a test run leaves behind: found, named and killed.

A broker, name server or JVM that outlives its test keeps using CPU and ports. In one clean-clone
run the benchmarks that followed the tests printed half the append rate and twenty times the
scheduling lateness of the run before, with no code change to explain it; a process left running
by a test is the cheapest explanation to rule out, so every run now checks.

Each pytest process marks its environment with a fresh `PYRMQ_TEST_SESSION` token, which every
child inherits (tests pass `dict(os.environ, ...)` or nothing as `env`). A marked process that is
no longer a descendant of this pytest process (its parent died without reaping or stopping it) is
a leak, after each module and at the end of the run. Leaks are killed, listed
in the summary and fail the run. tests/ and benchmarks/ conftests import the hooks below.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

MARK_KEY = "PYRMQ_TEST_SESSION"


def mark_session() -> str:
    """Give this process (and so every child) a fresh token; returns it."""
    token = uuid.uuid4().hex
    os.environ[MARK_KEY] = token
    return token


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    # `pid (comm) state ppid ...`: comm may hold spaces and ')', so split after the last one.
    return int(stat.rsplit(")", 1)[1].split()[1])


def marked_processes(token: str) -> Iterator[tuple[int, str]]:
    """(pid, command line) of every live process but this one whose environment holds token."""
    needle = f"{MARK_KEY}={token}".encode()
    own = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        yield int(entry.name), cmdline.strip()


def _descends_from_us(pid: int) -> bool:
    own = os.getpid()
    try:
        while pid > 1:
            pid = _parent(pid)
            if pid == own:
                return True
    except (OSError, IndexError, ValueError):
        return False
    return False


def orphans(token: str) -> list[tuple[int, str]]:
    """Marked processes whose parent chain no longer reaches this pytest process."""
    return [(pid, cmd) for pid, cmd in marked_processes(token) if not _descends_from_us(pid)]


def kill(processes: list[tuple[int, str]]) -> None:
    for pid, _ in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def describe(processes: list[tuple[int, str]]) -> str:
    return "; ".join(f"pid {pid}: {cmd[:160]}" for pid, cmd in processes)


_TOKEN = mark_session()
_LEAKS: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _no_process_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each module: a process it started that outlived its parent is killed and named.
    (Set up before the module's other fixtures, so torn down after them.)"""
    yield
    left = orphans(_TOKEN)
    if left:
        kill(left)
        _LEAKS.append(f"{request.node.nodeid}: {describe(left)}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Orphans only: a child still attached to this process may be one that ends with it
    # (Spark's py4j gateway JVM is shut down at interpreter exit, after this hook).
    left = orphans(_TOKEN)
    if left:
        kill(left)
        _LEAKS.append(f"orphaned at the end of the run: {describe(left)}")
    if _LEAKS and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _LEAKS:
        terminalreporter.section("processes left running by tests (killed)", red=True)
        for line in _LEAKS:
            terminalreporter.line(line)
