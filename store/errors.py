"""Errors of the store package, grouped by who is at fault.

- `StoreError` is the root of everything the store raises for a refused or failed operation.
- `DataInvariantError` is deliberately *not* a `StoreError`: it means a rule that protects
  acknowledged data was about to break. Nobody catches it locally; writes stop and the node exits.
"""

from __future__ import annotations


class StoreError(Exception):
    """Root of all store failures that refuse one operation and leave the store consistent."""


class DiskFullError(StoreError):
    """No space for a new mapped file or a metadata file (ENOSPC); the write was refused whole."""


class StoreIOError(StoreError):
    """An I/O error (EIO and the like) while reading or writing a store file."""


class WriteRefusedError(StoreError):
    """The store does not accept writes now (fenced, closed, read-only after an error)."""


class MessageIllegalError(StoreError):
    """A message breaks a format limit (body, topic or properties size); nothing was appended."""


class StoreLockedError(StoreError):
    """Another process holds the store's `lock` file ("MQ already started")."""


class CorruptFileError(StoreError):
    """A store file cannot be used as it is: wrong name, wrong size, unreadable content."""


class RecordCorruptError(StoreError):
    """A record read back from the commitlog fails its checks; its bytes are never served."""


class EpochFileUnreadableError(CorruptFileError):
    """Both `epochFileCheckpoint` and its `.bak` fail their count or CRC checks."""


class QueueOrderError(StoreError):
    """A consume-queue unit does not follow its queue (a gap, or a different record at an
    offset the queue holds): the unit is refused and the queue is left as it was."""


class DispatchError(StoreError):
    """A record reached the commitlog but its consume-queue unit was refused
    (`QueueOrderError`): it will never be served. The request that appended it fails."""


class DataInvariantError(Exception):
    """A rule that protects acknowledged data was about to break (never caught locally)."""


class StoreConfigError(StoreError, ValueError):
    """A store setting has a value the store cannot use (e.g. `deleteWhen`); names key and value."""
