"""The store's run markers: the `abort` file and the process `lock` (docs/store-format.md §8).

- `${root}/abort` exists while a store runs: created after recovery, before the store accepts
  writes, and deleted on a clean shutdown. Found at load, it means the last exit was abnormal.
  Its content is the process id in decimal (no newline); `abort.bak` holds the previous content
  (empty when `abort` was just created), as Java's `MixAll.string2File` leaves it.
- `${root}/lock` is held with an exclusive POSIX record lock on byte range [0, 1) while the store
  is open, and holds the 4 bytes `lock`. Java's `FileChannel.tryLock(0, 1, false)` takes the
  same kind of lock, so a pyrmq store and a Java broker exclude each other on one directory.

Invariants:
- `AbortFile.create` is durable (file and directory fsync) before it returns, so the marker is
  on disk before the first write it covers: a power loss must never make an unclean run look
  clean. `delete` is durable too, though a lost deletion would only cost an unneeded abnormal
  recovery.
- POSIX record locks belong to the process, so a second lock of the same file from this process
  would succeed and closing *any* descriptor of the file would drop the lock: `StoreLock` keeps
  a process-wide table and refuses a second lock of the same file itself; nothing else in pyrmq
  opens `lock`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from store.atomic_file import (
    atomic_replace,
    create_empty_durably,
    delete_durably,
    store_error,
)
from store.errors import StoreLockedError

ABORT_FILE_NAME: Final = "abort"
LOCK_FILE_NAME: Final = "lock"
LOCK_CONTENT: Final = b"lock"

_LOCKED_ERRNOS: Final = frozenset({errno.EACCES, errno.EAGAIN})

_held_lock = threading.Lock()
_held: set[tuple[int, int]] = set()  # (st_dev, st_ino) of lock files this process holds


class AbortFile:
    """`${root}/abort`: present while a store runs (see the module docstring)."""

    __slots__ = ("_path",)

    def __init__(self, path: Path) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        return self._path

    def create(self, *, pid: int | None = None) -> None:
        """Create the file if absent, then rewrite it to `pid` (default: this process) with
        `abort.bak` := the previous content (empty when just created), both durably.

        Blocking (fsyncs). Raises `DiskFullError` / `StoreIOError` naming the file.
        """
        create_empty_durably(self._path)
        content = str(os.getpid() if pid is None else pid).encode()
        atomic_replace(self._path, content, keep_bak=True)

    def exists(self) -> bool:
        """Whether the file is present: the last run did not shut down cleanly."""
        return self._path.exists()

    def delete(self) -> None:
        """Remove the file durably (clean shutdown); absent is fine. `abort.bak` stays, as in
        Java."""
        delete_durably(self._path)


class StoreLock:
    """The exclusive lock on `${root}/lock`: `StoreLock(path)`, then `acquire()` / `release()`
    (or `with StoreLock(path):`). Building it does no I/O."""

    __slots__ = ("_fd", "_key", "_path")

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None
        self._key: tuple[int, int] | None = None

    @property
    def path(self) -> Path:
        return self._path

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Open (create) the file, lock byte [0, 1) without waiting, write `lock` at 0.

        Raises `StoreLockedError` naming the file if another process (or this one, through
        another `StoreLock` or this one twice) holds it; `StoreIOError` / `DiskFullError` for
        other failures.
        """
        path = self._path
        if self._fd is not None:
            raise StoreLockedError(f"store lock {path}: already held by this StoreLock")
        with _held_lock:
            # Checked before opening: if this process already holds the lock, even opening and
            # closing another descriptor of the file would silently drop it.
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                raise store_error(path, "stat of lock file", err) from err
            else:
                if (stat.st_dev, stat.st_ino) in _held:
                    raise StoreLockedError(f"store lock {path}: already held by this process")
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as err:
                raise store_error(path, "open of lock file", err) from err
            try:
                stat = os.fstat(fd)
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError as err:
                os.close(fd)
                if err.errno in _LOCKED_ERRNOS:
                    raise StoreLockedError(
                        f"store lock {path}: held by another process (MQ already started)"
                    ) from err
                raise store_error(path, "lock of", err) from err
            self._key = (stat.st_dev, stat.st_ino)
            self._fd = fd
            _held.add(self._key)
        try:
            os.pwrite(fd, LOCK_CONTENT, 0)
        except OSError as err:
            self.release()
            raise store_error(path, "write of lock file", err) from err

    def release(self) -> None:
        """Unlock and close; does nothing when not held."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with _held_lock:
            if self._key is not None:
                _held.discard(self._key)
            # Closing the descriptor releases the record lock as well; unlock first anyway so
            # the lock is gone even if close were to fail.
            try:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
            finally:
                os.close(fd)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
