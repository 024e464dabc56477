"""The abort marker and the process lock (docs/store-format.md §8)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from store.errors import StoreLockedError
from store.run_files import ABORT_FILE_NAME, LOCK_FILE_NAME, AbortFile, StoreLock

REPO_ROOT = Path(__file__).resolve().parents[2]
EXIT_LOCKED = 3

# A second process tries the lock: exit 0 if it got it, EXIT_LOCKED on StoreLockedError.
_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from store.errors import StoreLockedError
    from store.run_files import StoreLock
    lock = StoreLock(Path(sys.argv[1]))
    try:
        lock.acquire()
    except StoreLockedError as err:
        print(err)
        sys.exit(3)
    lock.release()
    """
)


def _try_lock_in_another_process(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_abort_file_created_with_pid_and_empty_bak(tmp_path: Path) -> None:
    abort = AbortFile(tmp_path / ABORT_FILE_NAME)
    assert not abort.exists()
    abort.create(pid=4242)
    assert abort.exists()
    assert (tmp_path / "abort").read_bytes() == b"4242"
    assert (tmp_path / "abort.bak").read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abort", "abort.bak"]


def test_abort_file_rewrite_keeps_previous_pid_in_bak(tmp_path: Path) -> None:
    abort = AbortFile(tmp_path / ABORT_FILE_NAME)
    abort.create(pid=1)
    abort.create(pid=2)
    assert (tmp_path / "abort").read_bytes() == b"2"
    assert (tmp_path / "abort.bak").read_bytes() == b"1"


def test_abort_file_defaults_to_own_pid(tmp_path: Path) -> None:
    abort = AbortFile(tmp_path / ABORT_FILE_NAME)
    abort.create()
    assert (tmp_path / "abort").read_bytes() == str(os.getpid()).encode()


def test_abort_file_delete(tmp_path: Path) -> None:
    abort = AbortFile(tmp_path / ABORT_FILE_NAME)
    abort.create(pid=7)
    abort.delete()
    assert not abort.exists()
    assert (tmp_path / "abort.bak").exists()  # Java leaves it too
    abort.delete()  # absent is fine


def test_lock_writes_lock_at_position_0_without_truncating(tmp_path: Path) -> None:
    path = tmp_path / LOCK_FILE_NAME
    path.write_bytes(b"xxxxxxxx")
    with StoreLock(path) as lock:
        assert lock.held
        assert path.read_bytes() == b"lockxxxx"
    assert not lock.held


def test_second_process_cannot_take_the_lock_until_released(tmp_path: Path) -> None:
    path = tmp_path / LOCK_FILE_NAME
    lock = StoreLock(path)
    lock.acquire()
    try:
        child = _try_lock_in_another_process(path)
        assert child.returncode == EXIT_LOCKED, child.stderr
        assert str(path) in child.stdout
    finally:
        lock.release()
    child = _try_lock_in_another_process(path)
    assert child.returncode == 0, child.stderr + child.stdout


def test_second_lock_in_the_same_process_is_refused_and_keeps_the_first(tmp_path: Path) -> None:
    path = tmp_path / LOCK_FILE_NAME
    with StoreLock(path):
        with pytest.raises(StoreLockedError, match=str(path)):
            StoreLock(path).acquire()
        # The refused attempt must not have dropped the first lock (POSIX locks are per process
        # and closing any descriptor of the file would release them).
        assert _try_lock_in_another_process(path).returncode == EXIT_LOCKED
    with StoreLock(path):
        pass


def test_acquiring_twice_is_refused(tmp_path: Path) -> None:
    lock = StoreLock(tmp_path / LOCK_FILE_NAME)
    lock.acquire()
    try:
        with pytest.raises(StoreLockedError, match="already held"):
            lock.acquire()
    finally:
        lock.release()
    lock.release()  # releasing again does nothing
