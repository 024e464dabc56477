"""An ordered directory of equal-size mapped files covering one contiguous offset range.

Shared by the commitlog (1 GiB segments) and each consume queue (6,000,000-byte files).

Invariants:
- Files are named by their start offset (20 digits) and are contiguous: file i+1 starts where
  file i ends. A gap, a foreign name or a wrong size refuses the load with `CorruptFileError`
  naming the file (as RocketMQ refuses a file of the wrong size), except a zero-length last
  file, which is deleted (RocketMQ does the same).
- Only the last file is written; earlier files are full up to their BLANK padding.
"""

from __future__ import annotations

import bisect
import logging
import os
from pathlib import Path

from store.errors import CorruptFileError
from store.mapped_file import (
    MappedFile,
    file_name_to_offset,
    make_dirs_durable,
    offset_to_file_name,
)

log = logging.getLogger(__name__)


class MappedFileQueue:
    """The files of one log in offset order; `files[-1]` is the one being written."""

    __slots__ = ("_starts", "directory", "file_size", "files")

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self._starts: list[int] = []

    def load(self) -> None:
        """Map every existing file, positions provisionally at each file's end."""
        if not self.directory.exists():
            return
        paths = sorted(p for p in self.directory.iterdir() if not p.name.endswith(".tmp"))
        for index, path in enumerate(paths):
            if not path.is_file():
                raise CorruptFileError(f"store file {path}: not a regular file")
            file_name_to_offset(path)
            if index == len(paths) - 1 and path.stat().st_size == 0:
                log.warning("deleting empty last store file path=%s", path)
                path.unlink()
                continue
            mapped = MappedFile.open_existing(path, self.file_size)
            if self.files and mapped.file_from_offset != self.files[-1].file_end_offset:
                mapped.close()
                raise CorruptFileError(
                    f"store file {path}: starts at {mapped.file_from_offset}, expected "
                    f"{self.files[-1].file_end_offset} (a file is missing)"
                )
            if mapped.file_from_offset % self.file_size:
                mapped.close()
                raise CorruptFileError(
                    f"store file {path}: start {mapped.file_from_offset} is not a multiple of "
                    f"the file size {self.file_size}"
                )
            self._append(mapped)

    def _append(self, mapped: MappedFile) -> None:
        self.files.append(mapped)
        self._starts.append(mapped.file_from_offset)

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        return self.files[-1].max_offset if self.files else 0

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def create_file(self, start_offset: int) -> MappedFile:
        """Create the next file at `start_offset` (must follow the last file)."""
        if self.files and start_offset != self.files[-1].file_end_offset:
            raise ValueError(
                f"{self.directory}: new file at {start_offset} does not follow "
                f"{self.files[-1].file_end_offset}"
            )
        make_dirs_durable(self.directory)
        mapped = MappedFile.create(self.directory / offset_to_file_name(start_offset),
                                   self.file_size)
        self._append(mapped)
        return mapped

    def adopt_file(self, mapped: MappedFile) -> None:
        """Append a file created ahead of time (off the event loop) by the caller."""
        if self.files and mapped.file_from_offset != self.files[-1].file_end_offset:
            raise ValueError(f"{mapped.path}: does not follow {self.files[-1].path}")
        self._append(mapped)

    def find(self, offset: int) -> MappedFile | None:
        """The file containing global `offset`, or None when outside every file."""
        index = bisect.bisect_right(self._starts, offset) - 1
        if index < 0:
            return None
        mapped = self.files[index]
        return mapped if offset < mapped.file_end_offset else None

    def truncate_dirty(self, offset: int) -> None:
        """Cut the log at `offset`: later files deleted, the file holding it zeroed after it."""
        while self.files and self.files[-1].file_from_offset > offset:
            doomed = self.files.pop()
            self._starts.pop()
            log.info("deleting store file after truncation path=%s offset=%d", doomed.path, offset)
            doomed.destroy()
        if self.files and self.files[-1].file_end_offset > offset:
            self.files[-1].truncate_to(offset - self.files[-1].file_from_offset)
        elif self.files and self.files[-1].file_end_offset == offset:
            self.files[-1].wrote_position = self.files[-1].flushed_position = self.file_size
        self._fsync_dir()

    def delete_first(self, count: int) -> list[MappedFile]:
        """Delete the `count` oldest files (retention); never the last one."""
        count = min(count, len(self.files) - 1)
        doomed = self.files[:count]
        del self.files[:count]
        del self._starts[:count]
        for mapped in doomed:
            mapped.destroy()
        if doomed:
            self._fsync_dir()
        return doomed

    def destroy_all(self) -> None:
        for mapped in self.files:
            mapped.destroy()
        self.files.clear()
        self._starts.clear()

    def close(self) -> None:
        for mapped in self.files:
            mapped.close()

    def _fsync_dir(self) -> None:
        if not self.directory.exists():
            return
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
