"""Durable replacement of small store files: the whole new content or the whole old one.

`atomic_replace(path, data)` is the one way pyrmq rewrites a small metadata file (checkpoint,
epoch file, broker identity, abort file). Its steps, in this order:

1. with `keep_bak=True` and an existing `path`: make `<path>.bak` hold the current content of
   `path`, itself by this same protocol (`<path>.bak.tmp`, fsync, rename, directory fsync);
2. write `<path>.tmp` (created or truncated) and fsync it;
3. `os.replace(<path>.tmp, path)`;
4. fsync the directory; only then journal `A <path> <len> <b64>` (docs/reliability.md §6.11).

Invariants:
- The name `path` only ever refers to a file whose content was fsynced before the rename made it
  visible: after a crash at any step, `path` holds the old or the new content, never a torn mix.
  (`<path>.tmp` may be left behind by a crash; readers never look at it and the next write
  truncates it.)
- `.bak` (with `keep_bak`) becomes the previous content before `path` changes, so a reader that
  falls back to `.bak` gets the previous version or an older one, never a newer one.
- A failure before the rename leaves `path` untouched and removes `<path>.tmp`; a failure after
  the rename (the directory fsync) leaves the new content in place but not known to be durable:
  the caller must treat the file as "old or new", which is exactly what readers can cope with.
- ENOSPC/EDQUOT surface as `DiskFullError`, any other `OSError` as `StoreIOError`; both name
  the path.

Fault points (only when `fault_prefix` is given and faults are on): `<prefix>.before_rename`
(after step 2) and `<prefix>.before_dirsync` (after step 3).
Removing a file (`delete_durably`) has no journal event: §6.11 defines none.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Final

from store import testhooks
from store.errors import DiskFullError, StoreIOError

TMP_SUFFIX: Final = ".tmp"
BAK_SUFFIX: Final = ".bak"
FILE_MODE: Final = 0o644

_DISK_FULL_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


def tmp_path_of(path: Path) -> Path:
    """`<path>.tmp`, the staging file of `atomic_replace`."""
    return path.with_name(path.name + TMP_SUFFIX)


def bak_path_of(path: Path) -> Path:
    """`<path>.bak`, the previous version kept by `atomic_replace(..., keep_bak=True)`."""
    return path.with_name(path.name + BAK_SUFFIX)


def store_error(path: Path, what: str, err: OSError) -> DiskFullError | StoreIOError:
    """Translate an `OSError` on `path` into the store's typed error (raise it `from err`)."""
    detail = err.strerror or str(err)
    if err.errno in _DISK_FULL_ERRNOS:
        return DiskFullError(f"{what} {path}: no space left on device ({detail})")
    return StoreIOError(f"{what} {path}: {detail}")


def _fsync_dir_raw(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Make the directory entries of `directory` durable (new, renamed or removed names).

    Raises `DiskFullError` / `StoreIOError` naming the directory.
    """
    try:
        _fsync_dir_raw(directory)
    except OSError as err:
        raise store_error(directory, "fsync of directory", err) from err


def _write_synced(path: Path, data: bytes) -> None:
    """Create or truncate `path`, write all of `data`, fsync it (raw `OSError` on failure)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    # Cleanup after a failure that is already being reported: a second error here would only
    # hide the first one, and a leftover temp file is harmless (the next write truncates it).
    with contextlib.suppress(OSError):
        os.unlink(path)


def _replace(path: Path, data: bytes, fault_prefix: str | None) -> None:
    """Steps 1, 3 and 4 for one file; raw `OSError` on failure, with the temp file removed."""
    tmp = tmp_path_of(path)
    try:
        _write_synced(tmp, data)
        if testhooks.FAULTS_ON and fault_prefix is not None:
            testhooks.fault_point(f"{fault_prefix}.before_rename")
        os.replace(tmp, path)
        if testhooks.FAULTS_ON and fault_prefix is not None:
            testhooks.fault_point(f"{fault_prefix}.before_dirsync")
        # The rename is only durable once the directory is: until then a power loss may bring
        # back the old name -> old inode mapping (which is fine: old content, whole).
        _fsync_dir_raw(path.parent)
    except OSError:
        _remove_quietly(tmp)
        raise
    if testhooks.JOURNAL_ON:
        testhooks.journal_atomic_replaced(path, data)


def atomic_replace(
    path: Path,
    data: bytes,
    *,
    keep_bak: bool = False,
    fault_prefix: str | None = None,
) -> None:
    """Replace the content of `path` by `data`, durably and atomically (see the module docstring).

    `keep_bak`: if `path` exists, first make `<path>.bak` hold its current content (atomically
    too); if `path` does not exist, an existing `.bak` is left as it is.
    `fault_prefix`: name prefix of the test fault points (e.g. "epoch.write").

    Raises `DiskFullError` (ENOSPC, EDQUOT) or `StoreIOError` (anything else), naming the file.
    On a failure before the final rename, `path` keeps its old content.
    """
    what = "atomic replace of"
    if keep_bak:
        bak = bak_path_of(path)
        try:
            previous = path.read_bytes()
        except FileNotFoundError:
            pass
        except OSError as err:
            raise store_error(path, "read of previous content of", err) from err
        else:
            try:
                # .bak first: once `path` changes, the fallback must already be the old version.
                _replace(bak, previous, None)
            except OSError as err:
                raise store_error(bak, what, err) from err
    try:
        _replace(path, data, fault_prefix)
    except OSError as err:
        raise store_error(path, what, err) from err


def create_empty_durably(path: Path) -> None:
    """Create `path` as an empty file if it is absent, and make its directory entry durable.

    An existing file is left untouched (its content too). Journals `N <path>` when the file was
    created. Raises `DiskFullError` / `StoreIOError` naming the file.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return
    except OSError as err:
        raise store_error(path, "create of", err) from err
    try:
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir_raw(path.parent)
    except OSError as err:
        raise store_error(path, "create of", err) from err
    if testhooks.JOURNAL_ON:
        testhooks.journal_new_file(path)


def delete_durably(path: Path) -> None:
    """Remove `path` (absent is fine) and fsync its directory so the removal survives a crash.

    Raises `StoreIOError` naming the file on any error other than "does not exist".
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise store_error(path, "delete of", err) from err
    fsync_dir(path.parent)
