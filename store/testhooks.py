"""Test hooks of the store: the durability journal and fault points (docs/reliability.md §6.11).

Both are off unless a test turns them on, and cost one global flag check when off. Nothing is
read from the environment at import: a production broker ignores the variables below unless it
was started with `--test-hooks` (broker/__main__.py), which calls `enable_from_environment()`;
test programs (the torture writer) call it themselves.

- Durability journal: line events written to the fd in `PYRMQ_DURABILITY_FD` (a pipe the harness
  reads, so it survives our death) or to an in-process sink set by `configure_journal()`:
    `S <relpath> <end>`        an msync/fsync covering [0, end) of an append-only file returned
    `N <relpath>`              a new file's directory entry was fsynced
    `A <relpath> <len> <b64>`  an atomic replace of a small file completed (after the dir fsync)
    `T <relpath> <offset>`     a truncation was made durable
  Paths are relative to the root given to `configure_journal()` (the store root).
- Fault points: `PYRMQ_FAULTPOINTS="name:count[:action][,name:count[:action]...]"`. On the
  `count`-th hit of `name` the action runs: `kill` (SIGKILL self, the default), `enospc` or `eio`
  (raise that OSError), `delay` (sleep 1 s). With fault points on, writes still take the C path
  production uses; only `commitlog.append.after_header`, which needs a half-written record,
  switches appends to the Python writer while it is armed.
"""

from __future__ import annotations

import base64
import errno
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

JournalSink = Callable[[str], None]

FAULTS_ON = False
JOURNAL_ON = False

_lock = threading.Lock()
_journal_sink: JournalSink | None = None
_journal_root: Path | None = None
_faults: dict[str, tuple[int, str]] = {}
_hits: dict[str, int] = {}

FAULT_ACTIONS = ("kill", "enospc", "eio", "delay")


def _fd_sink(fd: int) -> JournalSink:
    def write(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    return write


def configure_journal(root: Path | None, sink: JournalSink | None = None) -> None:
    """Turn the journal on (a sink given) or off (none)."""
    # Module globals on purpose: hot paths test one flag with no attribute chain.
    global JOURNAL_ON, _journal_sink, _journal_root  # noqa: PLW0603
    _journal_sink = sink
    _journal_root = root
    JOURNAL_ON = sink is not None


def set_journal_root(root: Path) -> None:
    """Journal paths are relative to the store root (the harness rebuilds files from them)."""
    global _journal_root  # noqa: PLW0603
    _journal_root = root


def enable_from_environment() -> None:
    """Turn on what `PYRMQ_FAULTPOINTS` and `PYRMQ_DURABILITY_FD` ask for (tests only).
    Raises ValueError, naming the variable, for a malformed value."""
    try:
        configure_faults(os.environ.get("PYRMQ_FAULTPOINTS", ""))
    except ValueError as err:
        raise ValueError(f"PYRMQ_FAULTPOINTS: {err}") from err
    fd = os.environ.get("PYRMQ_DURABILITY_FD")
    if fd:
        if not fd.isdigit():
            raise ValueError(f"PYRMQ_DURABILITY_FD: {fd!r} is not a file descriptor")
        configure_journal(_journal_root, _fd_sink(int(fd)))


def configure_faults(spec: str) -> None:
    """Parse a fault-point spec; an empty spec turns them off."""
    global FAULTS_ON  # noqa: PLW0603
    faults: dict[str, tuple[int, str]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, rest = item.partition(":")
        count_text, _, action = rest.partition(":")
        action = action or "kill"
        if not name or not count_text.isdigit() or int(count_text) < 1:
            raise ValueError(f"fault point {item!r}: expected name:count[:action] with count >= 1")
        if action not in FAULT_ACTIONS:
            raise ValueError(f"fault point {item!r}: action {action!r} not in {FAULT_ACTIONS}")
        faults[name] = (int(count_text), action)
    with _lock:
        _faults.clear()
        _faults.update(faults)
        _hits.clear()
    FAULTS_ON = bool(faults)


def armed(name: str) -> bool:
    """True while fault point `name` is configured and has not fired yet."""
    with _lock:
        fault = _faults.get(name)
        return fault is not None and _hits.get(name, 0) < fault[0]


def fault_point(name: str) -> None:
    """Count a hit of `name`; run its action on the configured hit. Call only if FAULTS_ON."""
    with _lock:
        if name not in _faults:
            return
        _hits[name] = hits = _hits.get(name, 0) + 1
        count, action = _faults[name]
    if hits != count:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "enospc":
        raise OSError(errno.ENOSPC, f"fault point {name}: injected ENOSPC")
    elif action == "eio":
        raise OSError(errno.EIO, f"fault point {name}: injected EIO")
    else:
        time.sleep(1.0)


def _rel(path: Path | str) -> str:
    path = Path(path)
    if _journal_root is not None:
        try:
            return str(path.relative_to(_journal_root))
        except ValueError:
            pass
    return str(path)


def _emit(line: str) -> None:
    sink = _journal_sink
    if sink is not None:
        with _lock:
            sink(line)


def journal_synced(path: Path | str, end: int) -> None:
    _emit(f"S {_rel(path)} {end}")


def journal_new_file(path: Path | str) -> None:
    _emit(f"N {_rel(path)}")


def journal_atomic_replaced(path: Path | str, data: bytes) -> None:
    _emit(f"A {_rel(path)} {len(data)} {base64.b64encode(data).decode()}")


def journal_truncated(path: Path | str, offset: int) -> None:
    _emit(f"T {_rel(path)} {offset}")

