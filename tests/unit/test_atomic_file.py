"""atomic_replace: behaviour, typed errors, fault points, journal, and every power-loss state.

The last part is docs/reliability.md §7.3's exhaustive atomic-replace test. What it proves, and what
not: it records the file-system calls our writers really make (open/create, write, fsync,
rename, unlink, directory fsync) and replays every prefix of them as a crash, with every
operation not yet covered by a later fsync (data: of that inode; names: of the directory)
either kept, lost or (for writes) torn in half, independently of each other — a more hostile
disk than ext4 or xfs. For every resulting disk image the real reader (`load_checkpoint`,
`read_epoch_file`, ...) must return the old or the new version. So it proves that the *order
and choice* of our calls is enough under POSIX fsync semantics; it does not prove that the
kernel or the disk honours fsync, and it does not model reads seeing unsynced page-cache data
(a process crash without power loss keeps the page cache, which is only easier). A negative
control shows the model catches a writer that skips the fsync before the rename.
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import store.atomic_file as atomic_file
from store import testhooks
from store.atomic_file import atomic_replace, fsync_dir
from store.broker_identity import BrokerIdentity, load_broker_identity, write_broker_identity
from store.checkpoint import Checkpoint, encode_checkpoint, load_checkpoint, write_checkpoint
from store.epoch_cache import EpochCache
from store.epoch_file import read_epoch_file, serialize_epoch_entries, write_epoch_file
from store.errors import DiskFullError, StoreIOError

# ----------------------------------------------------------------------------- helpers


class OsProxy:
    """`os` for `store.atomic_file` only, with some functions replaced."""

    def __init__(self, **overrides: Callable[..., Any]) -> None:
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        return self._overrides[name] if name in self._overrides else getattr(os, name)


@pytest.fixture(autouse=True)
def _hooks_off() -> Iterator[None]:
    yield
    testhooks.configure_faults("")
    testhooks.configure_journal(None)


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ----------------------------------------------------------------------------- behaviour


def test_replace_writes_new_content_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "meta"
    path.write_bytes(b"old")
    atomic_replace(path, b"new")
    assert path.read_bytes() == b"new"
    assert names(tmp_path) == ["meta"]


def test_replace_creates_an_absent_file(tmp_path: Path) -> None:
    atomic_replace(tmp_path / "meta", b"new")
    assert (tmp_path / "meta").read_bytes() == b"new"


def test_keep_bak_holds_the_previous_content(tmp_path: Path) -> None:
    path = tmp_path / "meta"
    atomic_replace(path, b"v1", keep_bak=True)
    assert names(tmp_path) == ["meta"]  # nothing to back up yet
    atomic_replace(path, b"v2", keep_bak=True)
    atomic_replace(path, b"v3", keep_bak=True)
    assert (path.read_bytes(), (tmp_path / "meta.bak").read_bytes()) == (b"v3", b"v2")
    assert names(tmp_path) == ["meta", "meta.bak"]


def test_keep_bak_leaves_an_existing_bak_when_the_file_is_absent(tmp_path: Path) -> None:
    (tmp_path / "meta.bak").write_bytes(b"older")
    atomic_replace(tmp_path / "meta", b"new", keep_bak=True)
    assert (tmp_path / "meta.bak").read_bytes() == b"older"


def test_a_stale_temp_file_is_overwritten(tmp_path: Path) -> None:
    (tmp_path / "meta.tmp").write_bytes(b"junk from a crash" * 100)
    atomic_replace(tmp_path / "meta", b"new")
    assert (tmp_path / "meta").read_bytes() == b"new"
    assert names(tmp_path) == ["meta"]


def test_journal_line_after_the_replace(tmp_path: Path) -> None:
    lines: list[str] = []
    testhooks.configure_journal(tmp_path, lines.append)
    atomic_replace(tmp_path / "meta", b"old")
    atomic_replace(tmp_path / "meta", b"new", keep_bak=True)
    assert lines == ["A meta 3 b2xk", "A meta.bak 3 b2xk", "A meta 3 bmV3"]


def test_fsync_dir_names_the_directory(tmp_path: Path) -> None:
    fsync_dir(tmp_path)
    with pytest.raises(StoreIOError, match="missing"):
        fsync_dir(tmp_path / "missing")


# ----------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("point", "action", "error", "content_after"),
    [
        pytest.param("before_rename", "enospc", DiskFullError, b"old", id="rename-enospc"),
        pytest.param("before_rename", "eio", StoreIOError, b"old", id="rename-eio"),
        # After the rename the new content is in place, just not known durable (module doc).
        pytest.param("before_dirsync", "enospc", DiskFullError, b"new", id="dirsync-enospc"),
        pytest.param("before_dirsync", "eio", StoreIOError, b"new", id="dirsync-eio"),
    ],
)
def test_fault_points(
    tmp_path: Path, point: str, action: str, error: type[Exception], content_after: bytes
) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(b"old")
    lines: list[str] = []
    testhooks.configure_journal(tmp_path, lines.append)
    testhooks.configure_faults(f"checkpoint.write.{point}:1:{action}")
    with pytest.raises(error, match=str(path)):
        atomic_replace(path, b"new", fault_prefix="checkpoint.write")
    assert path.read_bytes() == content_after
    assert names(tmp_path) == ["checkpoint"]
    assert lines == []  # no "A" line for a replace that did not complete


def test_fault_points_fire_only_with_their_prefix(tmp_path: Path) -> None:
    testhooks.configure_faults("epoch.write.before_rename:1:eio")
    atomic_replace(tmp_path / "checkpoint", b"new", fault_prefix="checkpoint.write")
    atomic_replace(tmp_path / "other", b"new")
    with pytest.raises(StoreIOError):
        atomic_replace(tmp_path / "epochFileCheckpoint", b"new", fault_prefix="epoch.write")


def _failing(real: Callable[..., Any], err: int, *, skip: int = 0) -> Callable[..., Any]:
    calls = itertools.count()

    def call(*args: Any) -> Any:
        if next(calls) >= skip:
            raise OSError(err, os.strerror(err))
        return real(*args)

    return call


@pytest.mark.parametrize(
    ("syscall", "err", "skip", "error"),
    [
        pytest.param("write", errno.ENOSPC, 0, DiskFullError, id="write-enospc"),
        pytest.param("write", errno.EDQUOT, 0, DiskFullError, id="write-edquot"),
        pytest.param("write", errno.EIO, 0, StoreIOError, id="write-eio"),
        pytest.param("fsync", errno.EIO, 0, StoreIOError, id="fsync-tmp-eio"),
        pytest.param("fsync", errno.ENOSPC, 0, DiskFullError, id="fsync-tmp-enospc"),
        pytest.param("replace", errno.EIO, 0, StoreIOError, id="rename-eio"),
        pytest.param("open", errno.EACCES, 0, StoreIOError, id="open-eacces"),
    ],
)
def test_failed_syscall_keeps_the_old_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    syscall: str,
    err: int,
    skip: int,
    error: type[Exception],
) -> None:
    path = tmp_path / "meta"
    path.write_bytes(b"old")
    proxy = OsProxy(**{syscall: _failing(getattr(os, syscall), err, skip=skip)})
    monkeypatch.setattr(atomic_file, "os", proxy)
    with pytest.raises(error, match=str(path)):
        atomic_replace(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert names(tmp_path) == ["meta"]


def test_failed_bak_write_names_bak_and_keeps_both_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "meta"
    path.write_bytes(b"old")
    (tmp_path / "meta.bak").write_bytes(b"older")
    monkeypatch.setattr(atomic_file, "os", OsProxy(write=_failing(os.write, errno.ENOSPC)))
    with pytest.raises(DiskFullError, match=r"meta\.bak"):
        atomic_replace(path, b"new", keep_bak=True)
    monkeypatch.undo()
    assert (path.read_bytes(), (tmp_path / "meta.bak").read_bytes()) == (b"old", b"older")
    assert names(tmp_path) == ["meta", "meta.bak"]


# ----------------------------------------------------------------------------- power loss


@dataclass(frozen=True)
class Link:  # a new name for a new inode (open with O_CREAT)
    name: str
    inode: int


@dataclass(frozen=True)
class Rename:
    src: str
    dst: str
    inode: int


@dataclass(frozen=True)
class Unlink:
    name: str


@dataclass(frozen=True)
class Truncate:
    inode: int


@dataclass(frozen=True)
class Write:
    inode: int
    pos: int
    data: bytes


@dataclass(frozen=True)
class FileSync:
    inode: int


@dataclass(frozen=True)
class DirSync:
    pass


@dataclass(frozen=True)
class Journal:
    line: str


Op = Link | Rename | Unlink | Truncate | Write | FileSync | DirSync | Journal


@dataclass
class Recorder:
    """Runs the real calls in `root` and records them as `Op`s, resolving names to inodes."""

    root: Path
    ns: dict[str, int] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    _fds: dict[int, list[int]] = field(default_factory=dict)  # fd -> [inode or -1, pos]
    _next_inode: int = 0

    def __post_init__(self) -> None:
        for name in names(self.root):
            self.ns[name] = self._new_inode()

    def _new_inode(self) -> int:
        self._next_inode += 1
        return self._next_inode

    def _name(self, path: Any) -> str | None:
        p = Path(path)
        return p.name if p.parent == self.root else None

    def open(self, path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        fd = os.open(path, flags, mode, **kw)
        if Path(path) == self.root:
            self._fds[fd] = [-1, 0]
        elif (name := self._name(path)) is not None:
            if name not in self.ns:
                self.ns[name] = self._new_inode()
                self.ops.append(Link(name, self.ns[name]))
            if flags & os.O_TRUNC:
                self.ops.append(Truncate(self.ns[name]))
            self._fds[fd] = [self.ns[name], 0]
        return fd

    def write(self, fd: int, data: Any) -> int:
        written = os.write(fd, data)
        if fd in self._fds:
            inode, pos = self._fds[fd]
            self.ops.append(Write(inode, pos, bytes(data[:written])))
            self._fds[fd][1] = pos + written
        return written

    def fsync(self, fd: int) -> None:
        os.fsync(fd)
        if fd in self._fds:
            inode = self._fds[fd][0]
            self.ops.append(DirSync() if inode == -1 else FileSync(inode))

    def replace(self, src: Any, dst: Any) -> None:
        os.replace(src, dst)
        src_name, dst_name = self._name(src), self._name(dst)
        assert src_name is not None
        assert dst_name is not None
        inode = self.ns.pop(src_name)
        self.ns[dst_name] = inode
        self.ops.append(Rename(src_name, dst_name, inode))

    def unlink(self, path: Any) -> None:
        os.unlink(path)
        if (name := self._name(path)) is not None:
            del self.ns[name]
            self.ops.append(Unlink(name))

    def close(self, fd: int) -> None:
        os.close(fd)
        self._fds.pop(fd, None)


def record(
    monkeypatch: pytest.MonkeyPatch, root: Path, action: Callable[[], None]
) -> tuple[dict[str, bytes], dict[str, int], list[Op]]:
    """Run `action` against `root`, returning the initial files, their inodes and the ops."""
    initial = {name: (root / name).read_bytes() for name in names(root)}
    recorder = Recorder(root)
    initial_ns = dict(recorder.ns)
    proxy = OsProxy(
        open=recorder.open,
        write=recorder.write,
        fsync=recorder.fsync,
        replace=recorder.replace,
        unlink=recorder.unlink,
        close=recorder.close,
    )
    with monkeypatch.context() as patch:
        patch.setattr(atomic_file, "os", proxy)
        testhooks.configure_journal(root, lambda line: recorder.ops.append(Journal(line)))
        action()
        testhooks.configure_journal(None)
    inodes = {initial_ns[name]: content for name, content in initial.items()}
    return {name: inodes[inode] for name, inode in initial_ns.items()}, initial_ns, recorder.ops


def crash_images(
    initial_ns: dict[str, int], initial: dict[str, bytes], ops: list[Op]
) -> Iterator[dict[str, bytes]]:
    """Every disk image a power loss after any prefix of `ops` can leave (module docstring)."""
    contents0 = {inode: initial[name] for name, inode in initial_ns.items()}
    for k in range(len(ops) + 1):
        prefix = ops[:k]
        last_dirsync = max(
            (i for i, op in enumerate(prefix) if isinstance(op, DirSync)), default=-1
        )
        last_fsync: dict[int, int] = {}
        for i, op in enumerate(prefix):
            if isinstance(op, FileSync):
                last_fsync[op.inode] = i
        choices: dict[int, tuple[str, ...]] = {}
        for i, op in enumerate(prefix):
            match op:
                case Link() | Rename() | Unlink() if i > last_dirsync:
                    choices[i] = ("kept", "lost")
                case Truncate(inode=inode) if i > last_fsync.get(inode, -1):
                    choices[i] = ("kept", "lost")
                case Write(inode=inode) if i > last_fsync.get(inode, -1):
                    choices[i] = ("kept", "lost", "torn")
        for combo in itertools.product(*choices.values()):
            chosen = dict(zip(choices, combo, strict=True))
            ns = dict(initial_ns)
            contents = {inode: bytearray(data) for inode, data in contents0.items()}
            for i, op in enumerate(prefix):
                fate = chosen.get(i, "kept")
                if fate == "lost":
                    continue
                match op:
                    case Link(name=name, inode=inode):
                        ns[name] = inode
                        contents.setdefault(inode, bytearray())
                    case Rename(src=src, dst=dst, inode=inode):
                        ns.pop(src, None)
                        ns[dst] = inode
                    case Unlink(name=name):
                        ns.pop(name, None)
                    case Truncate(inode=inode):
                        contents[inode] = bytearray()
                    case Write(inode=inode, pos=pos, data=data):
                        piece = data if fate == "kept" else data[: len(data) // 2]
                        buf = contents.setdefault(inode, bytearray())
                        buf[pos : pos + len(piece)] = piece
            yield {name: bytes(contents.get(inode, b"")) for name, inode in ns.items()}


def outcomes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    setup: dict[str, bytes],
    action: Callable[[Path], None],
    read: Callable[[Path], object],
) -> tuple[object, object, set[object], int]:
    """(reading before, reading after, readings of every crash image, number of images)."""
    live = tmp_path / "live"
    live.mkdir()
    for name, data in setup.items():
        (live / name).write_bytes(data)
    before = read(live)
    initial, initial_ns, ops = record(monkeypatch, live, lambda: action(live))
    after = read(live)
    image_dir = tmp_path / "image"
    seen: set[object] = set()
    count = 0
    for image in crash_images(initial_ns, initial, ops):
        shutil.rmtree(image_dir, ignore_errors=True)
        image_dir.mkdir()
        for name, data in image.items():
            (image_dir / name).write_bytes(data)
        try:
            seen.add(read(image_dir))
        except Exception as err:  # noqa: BLE001 - any failure to read is an outcome to report
            seen.add(f"{type(err).__name__}: {err}")
        count += 1
    return before, after, seen, count


def _raw(root: Path) -> object:
    path = root / "meta"
    return path.read_bytes() if path.exists() else None


def _checkpoint(root: Path) -> object:
    loaded = load_checkpoint(root / "checkpoint")
    return (loaded.checkpoint, loaded.bad)


def _epoch(root: Path) -> object:
    return read_epoch_file(root / "epochFileCheckpoint").entries


def _identity(root: Path) -> object:
    return load_broker_identity(root / "brokerIdentity")


OLDER = EpochCache([(1, 0)]).entries
OLD = EpochCache([(1, 0), (2, 100)]).entries
NEW = EpochCache([(1, 0), (2, 100), (3, 250)]).entries
CP_OLD = Checkpoint(1_000, 900, 800, 0, 100)
CP_NEW = Checkpoint(2_000, 1_900, 1_800, 0, 200)
ID_OLD = BrokerIdentity("DefaultCluster", "broker-a", 1)
ID_NEW = BrokerIdentity("DefaultCluster", "broker-a", 2)

SCENARIOS = [
    pytest.param(
        {"meta": b"old content"},
        lambda root: atomic_replace(root / "meta", b"new content, longer"),
        _raw,
        id="replace",
    ),
    pytest.param({}, lambda root: atomic_replace(root / "meta", b"new"), _raw, id="create"),
    pytest.param(
        {"meta": b"old", "meta.tmp": b"stale temp from an earlier crash"},
        lambda root: atomic_replace(root / "meta", b"new"),
        _raw,
        id="stale-temp",
    ),
    pytest.param(
        {"meta": b"old", "meta.bak": b"older"},
        lambda root: atomic_replace(root / "meta", b"new", keep_bak=True),
        _raw,
        id="replace-keep-bak",
    ),
    pytest.param(
        {"checkpoint": encode_checkpoint(CP_OLD)},
        lambda root: write_checkpoint(root / "checkpoint", CP_NEW),
        _checkpoint,
        id="checkpoint",
    ),
    pytest.param(
        {
            "epochFileCheckpoint": serialize_epoch_entries(OLD),
            "epochFileCheckpoint.bak": serialize_epoch_entries(OLDER),
        },
        lambda root: write_epoch_file(root / "epochFileCheckpoint", NEW),
        _epoch,
        id="epoch-file",
    ),
    pytest.param(
        {
            "epochFileCheckpoint": serialize_epoch_entries(OLD),
            "epochFileCheckpoint.bak": serialize_epoch_entries(OLDER),
        },
        lambda root: write_epoch_file(root / "epochFileCheckpoint", ()),
        _epoch,
        id="epoch-file-emptied",
    ),
    pytest.param(
        {"brokerIdentity": ID_OLD.encode()},
        lambda root: write_broker_identity(root / "brokerIdentity", ID_NEW),
        _identity,
        id="broker-identity",
    ),
]


@pytest.mark.parametrize(("setup", "action", "read"), SCENARIOS)
def test_every_power_loss_state_reads_as_old_or_new(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    setup: dict[str, bytes],
    action: Callable[[Path], None],
    read: Callable[[Path], object],
) -> None:
    before, after, seen, count = outcomes(tmp_path, monkeypatch, setup, action, read)
    assert before != after
    assert count > 10  # the enumeration really explored states
    assert seen <= {before, after}, seen - {before, after}


def test_journal_line_comes_after_the_directory_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "meta").write_bytes(b"old")
    _, _, ops = record(
        monkeypatch, tmp_path, lambda: atomic_replace(tmp_path / "meta", b"new", keep_bak=True)
    )
    kinds = [type(op).__name__ for op in ops]
    # .bak by the same protocol first, then the file itself; each journaled after its dir fsync.
    assert kinds == [
        "Link", "Truncate", "Write", "FileSync", "Rename", "DirSync", "Journal",
        "Link", "Truncate", "Write", "FileSync", "Rename", "DirSync", "Journal",
    ]  # fmt: skip


def _naive_replace(path: Path, data: bytes) -> None:
    """A writer that renames before fsyncing the temp file (what not to do)."""
    recorded_os: Any = vars(atomic_file)["os"]  # the recording proxy during `record`
    tmp = path.with_name(path.name + ".tmp")
    fd = recorded_os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    recorded_os.write(fd, data)
    recorded_os.close(fd)
    recorded_os.replace(tmp, path)
    fsync_dir(path.parent)


def test_negative_control_the_model_catches_a_missing_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before, after, seen, _ = outcomes(
        tmp_path,
        monkeypatch,
        {"meta": b"old content"},
        lambda root: _naive_replace(root / "meta", b"new content"),
        _raw,
    )
    torn = seen - {before, after}
    assert b"" in torn  # renamed, directory synced, data lost: an empty file
    assert b"new c" in torn  # half the write made it
