"""Helpers for tests and benchmarks that run real child processes (JVMs, pyrmq, Redis)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

POLL_INTERVAL_S: Final = 0.05
KILL_WAIT_S: Final = 10.0

_PR_SET_PDEATHSIG: Final = 1
_LIBC: Final = ctypes.CDLL(None, use_errno=True)  # loaded here: a forked child only calls it


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the thread that started it exits (pytest killed),
    so no process outlives the test run."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def nice_child(nice: int) -> Callable[[], None]:
    """preexec_fn: `die_with_parent`, then the child's nice raised by `nice` (every thread it
    starts inherits it)."""
    def preexec() -> None:
        die_with_parent()
        os.nice(nice)
    return preexec


def set_autogroup_nice(pid: int, nice: int) -> None:
    """The CPU weight of `pid`'s scheduler autogroup, the group of its session's processes.

    With autogroups (CONFIG_SCHED_AUTOGROUP, on where the kernel has it) a thread's nice only
    ranks it within its own session; the scheduler shares the CPUs between sessions by the
    group's nice, 0 for every new session. So a child started in a session of its own
    (`start_new_session`) at nice 10 still competes as an equal with every other session:
    this sets the group's. Without autogroups (no /proc/<pid>/autogroup) the threads' nice
    already does it. The kernel takes one change per 100 ms from a process without
    CAP_SYS_ADMIN: a refused one is retried."""
    path = Path(f"/proc/{pid}/autogroup")
    if not path.exists():
        return
    deadline = time.monotonic() + 1.0
    while True:
        try:
            path.write_text(f"{nice}\n")
        except BlockingIOError:  # EAGAIN: the kernel's rate limit
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
        else:
            return


def tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log file, for failure messages."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no file)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


def wait_for_match(
    pattern: str,
    *,
    read: Callable[[], str],
    alive: Callable[[], bool],
    exit_code: Callable[[], int | None],
    name: str,
    diagnostics: Callable[[], str],
    timeout_s: float,
    error: type[Exception],
) -> re.Match[str]:
    """The first match of `pattern` in what `read()` returns; raises `error` if the process
    exits first or time runs out (with `diagnostics()` in the message)."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout_s
    while True:
        still_alive = alive()  # before reading: a line printed just before exiting counts
        match = regex.search(read())
        if match is not None:
            return match
        if not still_alive:
            raise error(f"{name} exited with {exit_code()} before printing {pattern!r}\n"
                        f"{diagnostics()}")
        if time.monotonic() > deadline:
            raise error(f"{name} did not print {pattern!r} within {timeout_s} s\n"
                        f"{diagnostics()}")
        time.sleep(POLL_INTERVAL_S)


def _signal(popen: subprocess.Popen[bytes], signum: int, *, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(popen.pid, signum)
        else:
            popen.send_signal(signum)


def kill(popen: subprocess.Popen[bytes], *, group: bool, name: str,
         error: type[Exception]) -> None:
    """SIGKILL (to the process group with `group`), then reap; raises `error` if it survives.
    Idempotent."""
    if popen.poll() is None:
        _signal(popen, signal.SIGKILL, group=group)
    try:
        popen.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired as err:
        raise error(f"{name} pid={popen.pid} survived SIGKILL") from err


def terminate(popen: subprocess.Popen[bytes], *, timeout_s: float, group: bool, name: str,
              error: type[Exception]) -> int:
    """SIGTERM (a graceful stop; SIGCONT too, for a child left stopped), then `kill` if it
    still runs after `timeout_s`. Returns the exit status (negative: that signal). Idempotent."""
    if popen.poll() is None:
        _signal(popen, signal.SIGTERM, group=group)
        _signal(popen, signal.SIGCONT, group=group)
        try:
            return popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill(popen, group=group, name=name, error=error)
    return popen.returncode
