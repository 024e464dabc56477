"""Helpers for tests and benchmarks that run real child processes (JVMs, pyrmq, Redis)."""

from __future__ import annotations

import ctypes
import signal
from pathlib import Path
from typing import Final

_PR_SET_PDEATHSIG: Final = 1
_LIBC: Final = ctypes.CDLL(None, use_errno=True)  # loaded here: a forked child only calls it


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the thread that started it exits (pytest killed),
    so no process outlives the test run."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log file, for failure messages."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no file)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"
