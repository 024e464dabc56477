"""The event-loop lag monitor: how late the loop runs what is due, and why, when it stalls.

Two cheap parts (no asyncio debug mode, whose slow-callback check costs too much to run always):
- a tick on the loop, re-armed every `sample_interval_ms`: its lateness (when it ran minus when
  it was due) is the loop's scheduling delay, handed to `observe_lag` (the broker's Prometheus
  histogram). The tick also reads the loop thread's /proc schedstat (on-CPU and run-queue wait
  nanoseconds, ~2 us): a late tick's window says how much of it the thread ran, waited for a CPU
  (the process not scheduled: CPU contention) or was off the CPU (blocked: disk, page faults, a
  lock, the GIL held by another thread), and the thread's page faults (getrusage, ~1 us): a
  busy stall with hundreds of them went to the memory the loop touched (in a VM, a page first
  touched after the host reclaimed it costs a host fault), one without them to our code;
- a watchdog thread that sleeps until the tick is overdue by `stall_threshold_ms` (on a timer
  each tick re-arms, `OverdueTimer`, waited on without the GIL, so that a healthy loop never
  hands the GIL to it) and, while it is, samples the loop thread's Python stack
  (`sys._current_frames()`) every sample interval (at most half the threshold): the callback
  or coroutine the loop is stuck in, and
  where the loop thread sleeps in the kernel, if it does (/proc wchan: `futex_do_wait` is a
  wait for the GIL or a lock, `rwsem_down_*` for the mmap lock, `do_epoll_wait` for events).
  The loop's late tick logs the stall, with the watchdog's samples of it (from the watchdog,
  each system call of the report would take the GIL back from a loop busy with the stall's
  backlog): each stall is one WARNING with its length, the breakdown above, any garbage
  collection that ran inside it (`gc.callbacks`, which see collections in every thread), the
  stack seen most often and, where the owner counts them, the requests the loop received in
  the window against its rate over the second before and those still being handled: a busy
  stall with many more than its share ran a pile of work that came in at once, one with its
  share ran slow work. And the CPU time the host took from this VM in the window (/proc/stat
  steal, all CPUs, in 10 ms clock ticks; read every `STEAL_READ_INTERVAL_S` and at each stall,
  since a read costs some 7 us, four times the rest of a tick, so the figure may include up to
  that interval before the window): a thread whose CPU the host took is neither on a CPU nor
  waiting for one as the guest counts, so a `blocked` stall with no kernel wait and steal in
  its window was the host's. The host can also stop every CPU at once without counting steal;
  the stall's end in wall-clock time (`end_unix_s`) and the CPU the loop thread was on at its
  end (`cpu`, from its /proc stat, read only for a stall) line it up with what measured that
  from outside the broker (benchmarks/host_pauses.py: the host stops one vCPU at times, too).
  And the other threads of the process that ran in the window (`other_threads`: each one's
  on-CPU and run-queue milliseconds, from every Python thread's /proc schedstat, read by the
  tick every `THREAD_SNAPSHOT_INTERVAL_S` or more and by each late one, so the span they
  cover (`other_threads_span_ms`) starts at the read before the window; and the
  innermost frame each was in at the watchdog's first sample, from the same
  `sys._current_frames()` as the loop's stack: later samples take the loop's stack alone, the
  GIL held for less): a loop `blocked` in `futex_do_wait` while one of them ran waited for
  that thread's GIL or lock. And the watchdog's own CPU time from its wake to its last sample
  (`watchdog_cpu_ms`): what sampling the stall cost, against the other threads' figures.
- where built (broker/_kernel_sampler.c, Linux), a native thread that never takes the GIL
  waits for the timer in the watchdog's stead, wakes it, and while the tick stays overdue
  reads every millisecond the loop thread's state, CPU and kernel wait and every other Python
  thread's state and CPU (/proc stat). The watchdog needs the GIL, so it saw nothing of a stall
  in which another thread held it, or the loop held it asleep in a system call; the sampler
  does: `kernel_samples` (its rounds), `loop_kernel` (the loop's states in them, with where it
  slept) and `runnable_while_loop_waited` (each thread runnable while the loop waited in
  futex_do_wait, with its CPU: the GIL or lock holder is among them, and a host stop of its
  CPU kept the loop waiting as long). Its reads of where the loop slept make up
  `kernel_wait`, and the watchdog, whose every sample takes the GIL from the stalled loop,
  then doubles its wait after each sample (up to `LATER_SAMPLE_WAIT_MAX_S`).

`classify_stall` is the pure core that names a stall's cause from those figures.

Invariants:
- Every tick whose lag exceeds the threshold is reported once (counted and logged), whether or
  not the watchdog caught a stack (it cannot while the loop thread holds the GIL in one C call,
  e.g. a collection: the GC record covers that case).
- The monitor owns one thread and one gc callback; `close()` removes both.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import gc
import logging
import os
import resource
import select
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Final

try:
    from broker._kernel_sampler import Sampler as _KernelSampler
except ImportError:  # not built: the watchdog alone samples
    _KernelSampler = None  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_MS_DEFAULT: Final = 5
STALL_THRESHOLD_MS_DEFAULT: Final = 20
STACK_DEPTH_MAX: Final = 8
SAMPLES_PER_STALL_MAX: Final = 64
GC_RECORDED_MIN_S: Final = 0.001  # shorter collections are never a stall's cause
GC_RECORDS_MAX: Final = 256
STEAL_READ_INTERVAL_S: Final = 0.02  # /proc/stat counts steal in 10 ms ticks anyway
OTHER_THREADS_SHOWN: Final = 4  # the busiest other threads a stall line names
OTHER_THREAD_SHOWN_MIN_NS: Final = 100_000  # less CPU than that in a stall's span: not named
# Every Python thread's CPU figures, read by the tick at most this often (some 20-70 us) and
# by each late tick.
THREAD_SNAPSHOT_INTERVAL_S: Final = 0.02
THREAD_SNAPSHOTS_KEPT: Final = 16  # the last 320 ms or more
# The kernel sampler's period (broker/_kernel_sampler.c): a few /proc reads each, in a stall only.
KERNEL_SAMPLE_PERIOD_NS: Final = 1_000_000
# With the kernel sampler, the watchdog's wait between its samples of a stall doubles to this.
LATER_SAMPLE_WAIT_MAX_S: Final = 0.1
KERNEL_SAMPLER_BUILT: Final = _KernelSampler is not None
KERNEL_THREADS_WATCHED_MAX: Final = 64  # the sampler's limit
# The loop's kernel wait for the GIL or a lock: the threads runnable then are what it waits for.
FUTEX_WAIT: Final = "futex_do_wait"
# The loop's own machinery: not what the loop was running.
_MACHINERY_FILES: Final = ("asyncio/", "uvloop/", "selectors.py", "threading.py",
                           "broker/loop_monitor.py")
# No Python callback on the stack: the loop was waiting for events, or in its own C code (uvloop's
# socket reads and writes). The watchdog needs the GIL to sample, so a stall inside one long C
# call that holds the GIL is sampled only after it: named by the frame that made the call, or
# read as this when the loop went back to waiting right after it.
IDLE: Final = "(no Python callback: the loop's own C code, or waiting for events)"
_CO_COROUTINE: Final = 0x80


class StallCause(enum.Enum):
    """What took a stall's time (the `cause` label of the stall counter)."""

    GC = "gc"  # the Python garbage collector held the GIL
    BUSY = "busy"  # the loop thread ran: our code on the loop
    NOT_SCHEDULED = "not_scheduled"  # runnable, waiting for a CPU: the machine was busy
    BLOCKED = "blocked"  # off the CPU: disk, page faults, a lock or another thread's GIL
    UNKNOWN = "unknown"  # no schedstat on this system


@dataclass(frozen=True, slots=True)
class StallWindow:
    """One late tick: the window from the previous tick to this one (monotonic seconds) and
    what the loop thread did in it (None: /proc schedstat unavailable)."""

    start_s: float
    end_s: float
    lag_s: float
    on_cpu_s: float | None
    runqueue_wait_s: float | None
    # The loop thread's page faults in the window: (minor, major); None where not counted.
    page_faults: tuple[int, int] | None = None
    # Requests received in the window and being handled at its end; None where not counted.
    requests: tuple[int, int] | None = None
    # CPU time the host took from the VM in the window (all CPUs); None where not counted.
    steal_s: float | None = None
    # The CPU the loop thread was last on, at the window's end; None where not known.
    cpu: int | None = None


def classify_stall(window: StallWindow, gc_s: float) -> StallCause:
    """GC when collections took at least half the lag (a collection runs on the CPU, so it
    would otherwise read as BUSY); else whichever took most of the window: running (BUSY),
    waiting for a CPU (NOT_SCHEDULED) or off the CPU (BLOCKED)."""
    if gc_s >= window.lag_s / 2:
        return StallCause.GC
    if window.on_cpu_s is None or window.runqueue_wait_s is None:
        return StallCause.UNKNOWN
    off_cpu_s = window.end_s - window.start_s - window.on_cpu_s - window.runqueue_wait_s
    shares = {
        StallCause.BUSY: window.on_cpu_s,
        StallCause.NOT_SCHEDULED: window.runqueue_wait_s,
        StallCause.BLOCKED: off_cpu_s,
    }
    return max(shares, key=shares.__getitem__)


def format_stack(frame: FrameType | None, *, depth: int = STACK_DEPTH_MAX,
                 base: frozenset[CodeType] = frozenset()) -> tuple[str, ...]:
    """`func (file:line)` of the innermost `depth` frames outside the loop's own machinery and
    outside `base` (the frames that run the loop itself), innermost first; `(IDLE,)` when only
    those remain: the loop was not running a callback."""
    out: list[str] = []
    while frame is not None and len(out) < depth:
        code = frame.f_code
        path = code.co_filename
        if code not in base and not any(part in path for part in _MACHINERY_FILES):
            out.append(f"{code.co_qualname} ({_short_path(path)}:{frame.f_lineno})")
        frame = frame.f_back
    return tuple(out) if out else (IDLE,)


def loop_base_frames(frame: FrameType | None) -> frozenset[CodeType]:
    """The code of the frames outside the outermost coroutine of `frame`'s stack: those that
    run the loop (`main()`, `uvloop.run`, ...), seen in every sample of the loop thread."""
    codes: list[CodeType] = []
    while frame is not None:
        if frame.f_code.co_flags & _CO_COROUTINE:
            codes.clear()
        else:
            codes.append(frame.f_code)
        frame = frame.f_back
    return frozenset(codes)


def _short_path(path: str) -> str:
    parts = path.replace("\\", "/").rsplit("/", 2)
    return "/".join(parts[-2:])


def thread_page_faults() -> tuple[int, int] | None:
    """The calling thread's page faults so far, (minor, major); None without RUSAGE_THREAD
    (Linux only)."""
    who = getattr(resource, "RUSAGE_THREAD", None)
    if who is None:
        return None
    usage = resource.getrusage(who)
    return usage.ru_minflt, usage.ru_majflt


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc_keeping_the_gil() -> ctypes.PyDLL | None:
    """The C library through `ctypes.PyDLL`, whose calls keep the GIL, with the prototypes the
    monitor calls (pread, timerfd); None where any is missing (not Linux).

    Why keep the GIL: os.pread releases it for the call and takes it back after. A thread that
    wanted it meanwhile (a store worker back from its disk call) gets it, and the reader then
    waits until that thread lets go, for as long as that thread waits for a CPU if it is
    preempted first. These calls take microseconds and never block."""
    try:
        libc = ctypes.PyDLL(None)
        pread, create, settime = libc.pread, libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    pread.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long]
    pread.restype = ctypes.c_ssize_t
    create.argtypes = [ctypes.c_int, ctypes.c_int]
    create.restype = ctypes.c_int
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    settime.restype = ctypes.c_int
    return libc


_LIBC: Final = _libc_keeping_the_gil()
PROC_READ_MAX: Final = 1024


class _ProcFile:
    """One /proc file kept open and read again from its start (pread) at each sample: a few
    microseconds, no open/close per read, and the GIL kept meanwhile (`_LIBC`). Unavailable
    (None on every read) where it is missing."""

    def __init__(self, path: str) -> None:
        self._fd: int | None = None
        self._buf = ctypes.create_string_buffer(PROC_READ_MAX)
        with contextlib.suppress(OSError):
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def _read(self, size: int = 128) -> bytes | None:
        if self._fd is None:
            return None
        size = min(size, PROC_READ_MAX)
        if _LIBC is not None:
            got = _LIBC.pread(self._fd, self._buf, size, 0)
            return None if got < 0 else ctypes.string_at(self._buf, got)
        try:
            return os.pread(self._fd, size, 0)
        except OSError:
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_CLOCK_MONOTONIC: Final = 1  # time.monotonic()'s clock on Linux
_TFD_CLOEXEC: Final = os.O_CLOEXEC
_TFD_TIMER_ABSTIME: Final = 1


class OverdueTimer:
    """A timerfd on the monotonic clock: the tick arms it for when the next tick would be a
    stall (a syscall of about a microsecond, made with the GIL kept), and the watchdog waits
    for it in a blocking read, without the GIL. So the watchdog takes the GIL only when the
    loop is overdue: a watchdog that woke to check (40-100 times a second) asked for the GIL
    each time, and when the loop held it CPython had the loop drop it and wait until the
    watchdog had taken it, however long the watchdog then waited for a CPU. Linux only:
    `create()` gives None elsewhere."""

    def __init__(self, fd: int, libc: ctypes.PyDLL) -> None:
        self.fd = fd
        self._settime = libc.timerfd_settime
        self._spec = _Itimerspec()

    @classmethod
    def create(cls) -> OverdueTimer | None:
        if _LIBC is None:
            return None
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_CLOEXEC)
        return None if fd < 0 else cls(fd, _LIBC)

    def arm(self, at_s: float) -> None:
        """Fire at monotonic time `at_s` (at once if past), replacing the previous arming."""
        at_ns = max(1, int(at_s * 1e9))  # zero would disarm it
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(at_ns, 1_000_000_000)
        self._settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None)

    def wait(self) -> bool:
        """Block, without the GIL, until the timer fires (at once if it has since it was last
        armed or waited for); False if the timer cannot be read."""
        return wait_for(self.fd)

    def close(self) -> None:
        os.close(self.fd)


def wait_for(fd: int) -> bool:
    """Block, without the GIL, until the timerfd or eventfd `fd` counts something, and take the
    count; False if it cannot be read."""
    try:
        os.read(fd, 8)
    except OSError:
        return False
    return True


class SchedStat(_ProcFile):
    """A thread's /proc schedstat: (on-CPU ns, run-queue wait ns), or None. By default the
    calling thread's: open it in the thread to be watched (the loop's)."""

    def __init__(self, path: str = "/proc/thread-self/schedstat") -> None:
        super().__init__(path)

    def read(self) -> tuple[int, int] | None:
        data = self._read()
        if data is None:
            return None
        try:
            fields = data.split()
            return int(fields[0]), int(fields[1])
        except (ValueError, IndexError):
            return None


def parse_processor(stat: bytes) -> int | None:
    """The `processor` field (the 39th) of a /proc task stat line: the CPU the task last ran
    on; None if absent. The fields count on after the command name's closing parenthesis (the
    name itself may hold spaces and parentheses)."""
    _, paren, rest = stat.rpartition(b")")
    fields = rest.split()
    # After the name come field 3 (state) onwards: the 39th is the 37th of those.
    if not paren or len(fields) < 37:
        return None
    try:
        return int(fields[36])
    except ValueError:
        return None


class TaskCpu(_ProcFile):
    """The CPU the calling thread last ran on (its /proc stat), or None. Open it in the thread
    to be watched."""

    def __init__(self) -> None:
        super().__init__("/proc/thread-self/stat")

    def read(self) -> int | None:
        data = self._read(1024)
        return None if data is None else parse_processor(data)


def parse_steal_ticks(stat: bytes) -> int | None:
    """The steal field (8th number) of /proc/stat's first line, in clock ticks; None if absent."""
    fields = stat.split(b"\n", 1)[0].split()
    if len(fields) < 9 or fields[0] != b"cpu":
        return None
    try:
        return int(fields[8])
    except ValueError:
        return None


class HostSteal(_ProcFile):
    """CPU seconds the host has taken from all of this VM's CPUs since boot (/proc/stat steal,
    10 ms resolution at the usual 100 ticks a second); None where not counted."""

    def __init__(self) -> None:
        super().__init__("/proc/stat")
        self._tick_s = 1 / os.sysconf("SC_CLK_TCK")

    def read(self) -> float | None:
        data = self._read()
        ticks = None if data is None else parse_steal_ticks(data)
        return None if ticks is None else ticks * self._tick_s


class KernelWait(_ProcFile):
    """Where one thread of this process sleeps in the kernel (its /proc wchan), read from
    another thread; None while it runs, or where the kernel does not say."""

    def __init__(self, native_id: int) -> None:
        super().__init__(f"/proc/self/task/{native_id}/wchan")

    def read(self) -> str | None:
        data = self._read()
        where = "" if data is None else data.decode("ascii", "replace").strip()
        return where if where and where != "0" else None


# One thread's figures in a snapshot: (on-CPU ns, run-queue wait ns).
ThreadTimes = tuple[int, int]
# One watchdog sample: (when, the loop thread's stack, where it slept in the kernel, the
# innermost frame of each other thread running Python, by thread id).
Sample = tuple[float, tuple[str, ...], str | None, dict[int, str]]


class ThreadsCpu:
    """Every Python thread of this process (those that can hold the GIL: not libuv's) and its
    /proc schedstat so far, by thread id. Each thread's file is opened once and read again at
    each snapshot; the thread list is taken each time (threads of the default executor come
    and go). Some 20 us for nine threads in a tight loop, up to 70 us read now and then."""

    def __init__(self) -> None:
        self._files: dict[int, SchedStat] = {}
        # Each thread's name by thread id, as of the last snapshot: a stall line names threads
        # without a /proc read (each a system call that hands the GIL over and back).
        self.names: dict[int, str] = {}

    def read(self) -> dict[int, ThreadTimes]:
        self.names = {thread.native_id: thread.name for thread in threading.enumerate()
                      if thread.native_id is not None}
        tids = self.names.keys()
        for gone in self._files.keys() - tids:
            self._files.pop(gone).close()
        out: dict[int, ThreadTimes] = {}
        for tid in tids:
            stat = self._files.get(tid)
            if stat is None:
                stat = self._files[tid] = SchedStat(f"/proc/self/task/{tid}/schedstat")
            times = stat.read()
            if times is not None:
                out[tid] = times
        return out

    def close(self) -> None:
        for stat in self._files.values():
            stat.close()
        self._files.clear()


def busiest_threads(before: dict[int, ThreadTimes], after: dict[int, ThreadTimes], *,
                    exclude: int, limit: int = OTHER_THREADS_SHOWN,
                    min_ns: int = OTHER_THREAD_SHOWN_MIN_NS) -> list[tuple[int, int, int]]:
    """The threads that ran most between two snapshots, as (thread id, on-CPU ns, run-queue
    wait ns), busiest first; at most `limit`, none with under `min_ns` on a CPU, never the
    thread `exclude` (the loop's own, whose figures the stall has already). A thread that
    started in between counts from zero; one that ended is not known."""
    ran = []
    for tid, (on_cpu, waited) in after.items():
        if tid == exclude:
            continue
        on_cpu_before, waited_before = before.get(tid, (0, 0))
        if on_cpu - on_cpu_before >= min_ns:
            ran.append((tid, on_cpu - on_cpu_before, max(0, waited - waited_before)))
    ran.sort(key=lambda entry: (-entry[1], entry[0]))
    return ran[:limit]


# One sample of one thread by the kernel sampler (broker/_kernel_sampler.c): (monotonic ns,
# kernel thread id, state, CPU, where it sleeps: the loop's only).
KernelSample = tuple[int, int, str, int, str]


@dataclass(frozen=True, slots=True)
class KernelSummary:
    """What the kernel sampler saw of a stall: its rounds (each reads the loop and every watched
    thread at once), the loop's state in them (`R`, or `S`/`D` and where it slept), and the
    other threads that were runnable (`R`) in the rounds in which the loop waited in
    futex_do_wait, by (thread id, CPU): one of them held the GIL or lock the loop waited for,
    unless the holder was itself off its CPU (a thread back from a call without the GIL reads
    `R` too)."""

    rounds: int
    loop: Counter[str]
    runnable: Counter[tuple[int, int]]


def summarize_kernel_samples(samples: list[KernelSample], loop_tid: int, start_ns: int,
                             end_ns: int) -> KernelSummary:
    """The summary of the samples taken in [start_ns, end_ns]; rounds without a reading of the
    loop thread are left out."""
    rounds: dict[int, list[KernelSample]] = {}
    for sample in samples:
        if start_ns <= sample[0] <= end_ns:
            rounds.setdefault(sample[0], []).append(sample)
    loop: Counter[str] = Counter()
    runnable: Counter[tuple[int, int]] = Counter()
    counted = 0
    for round_ in rounds.values():
        mine = next((sample for sample in round_ if sample[1] == loop_tid), None)
        if mine is None or not mine[2]:
            continue
        counted += 1
        _, _, state, _, wchan = mine
        loop[f"{state}:{wchan}" if wchan and state != "R" else state] += 1
        if state != "R" and wchan == FUTEX_WAIT:
            runnable.update((tid, cpu) for _, tid, other_state, cpu, _ in round_
                            if tid != loop_tid and other_state == "R")
    return KernelSummary(counted, loop, runnable)


class LoopMonitor:
    """Samples one event loop's lag and reports its stalls. `start()` on the loop, `close()`."""

    def __init__(
        self,
        *,
        sample_interval_ms: int = SAMPLE_INTERVAL_MS_DEFAULT,
        stall_threshold_ms: int = STALL_THRESHOLD_MS_DEFAULT,
        observe_lag: Callable[[float], None] | None = None,
        count_stall: Callable[[StallCause], None] | None = None,
        count_requests: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        """`count_requests()`: the requests received so far and those being handled now
        (called on every tick, so it must be cheap)."""
        if sample_interval_ms <= 0 or stall_threshold_ms <= 0:
            raise ValueError(f"sample_interval_ms={sample_interval_ms} and stall_threshold_ms="
                             f"{stall_threshold_ms} must be positive")
        self._interval_s = sample_interval_ms / 1000
        self._threshold_s = stall_threshold_ms / 1000
        self._observe_lag = observe_lag
        self._count_stall = count_stall
        self._count_requests = count_requests
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id = 0
        self._loop_native_id = 0
        self._base: frozenset[CodeType] = frozenset()
        self._handle: asyncio.TimerHandle | None = None
        self._schedstat: SchedStat | None = None
        self._kernel_wait: KernelWait | None = None
        self._host_steal: HostSteal | None = None
        self._task_cpu: TaskCpu | None = None
        self._last_steal: float | None = None
        self._steal_read_s = 0.0
        self._due_s = 0.0
        self._last_tick_s = 0.0
        self._last_sched: tuple[int, int] | None = None
        self._last_faults: tuple[int, int] | None = None
        self._last_requests = 0
        # The request rate (per second) over the last whole second, and where that second began.
        self.request_rate = 0.0
        self._rate_mark: tuple[float, int] = (0.0, 0)
        # Written by any thread (collections) or the watchdog (samples); read by the loop.
        self._gc_records: deque[tuple[float, float, int]] = deque(maxlen=GC_RECORDS_MAX)
        self._gc_started_s = 0.0
        self._samples: deque[Sample] = deque(maxlen=SAMPLES_PER_STALL_MAX)
        # The watchdog's latest wake: when (monotonic) and its CPU time from then to its
        # latest sample.
        self._wake: tuple[float, float] = (0.0, 0.0)
        # Every Python thread's CPU figures, read by the tick: (when, snapshot).
        self._threads_cpu: ThreadsCpu | None = None
        self._thread_snapshots: deque[tuple[float, dict[int, ThreadTimes]]] = deque(
            maxlen=THREAD_SNAPSHOTS_KEPT)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._timer: OverdueTimer | None = None
        # Where built (Linux): samples the threads' kernel states without the GIL, and wakes
        # the watchdog in the timer's stead.
        self._kernel_sampler: _KernelSampler | None = None
        self._watched: frozenset[int] = frozenset()
        self.stalls = 0
        self.ticks = 0
        self.max_lag_s = 0.0
        self.reported: deque[tuple[StallWindow, StallCause, float, tuple[str, ...]]] = \
            deque(maxlen=64)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Arm the tick on the running loop and start the watchdog thread."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loop_thread_id = threading.get_ident()
        self._base = loop_base_frames(sys._getframe())
        self._schedstat = SchedStat()
        self._task_cpu = TaskCpu()
        self._loop_native_id = threading.get_native_id()
        self._kernel_wait = KernelWait(self._loop_native_id)
        self._threads_cpu = ThreadsCpu()
        self._snapshot_threads()
        self._last_sched = self._schedstat.read()
        self._last_faults = thread_page_faults()
        self._host_steal = HostSteal()
        self._last_steal = self._host_steal.read()
        now = time.monotonic()
        if self._count_requests is not None:
            self._last_requests = self._count_requests()[0]
        self._rate_mark = (now, self._last_requests)
        self._last_tick_s = now
        self._due_s = now + self._interval_s
        self._handle = loop.call_later(self._interval_s, self._tick)
        self._timer = OverdueTimer.create()
        if self._timer is not None:
            if _KernelSampler is not None:
                self._kernel_sampler = _KernelSampler(self._timer.fd, self._loop_native_id,
                                                     KERNEL_SAMPLE_PERIOD_NS)
                self._watch_threads()
            self._timer.arm(self._due_s + self._threshold_s)
        gc.callbacks.append(self._on_gc)
        self._thread = threading.Thread(target=self._watch, name="loop-monitor", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the tick and the watchdog. Idempotent."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on_gc)
        self._stop.set()
        if self._kernel_sampler is not None:
            self._kernel_sampler.close()  # ends its thread, wakes the watchdog to see the stop
        elif self._timer is not None:
            self._timer.arm(0.0)  # wakes the watchdog to see the stop
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._kernel_sampler = None  # its eventfds close with it
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        if self._schedstat is not None:
            self._schedstat.close()
            self._schedstat = None
        if self._kernel_wait is not None:
            self._kernel_wait.close()
            self._kernel_wait = None
        if self._host_steal is not None:
            self._host_steal.close()
            self._host_steal = None
        if self._task_cpu is not None:
            self._task_cpu.close()
            self._task_cpu = None
        if self._threads_cpu is not None:
            self._threads_cpu.close()
            self._threads_cpu = None

    # ------------------------------------------------------------------ on the loop

    def _tick(self) -> None:
        now = time.monotonic()
        lag = now - self._due_s
        if lag < 0.0:
            lag = 0.0  # the loop's timer clock runs a little ahead of monotonic()
        self.ticks += 1
        if self._observe_lag is not None:
            self._observe_lag(lag)
        assert self._schedstat is not None
        assert self._host_steal is not None
        assert self._loop is not None
        sched = self._schedstat.read()
        stalled = lag > self._threshold_s
        steal = self._last_steal
        if stalled or now - self._steal_read_s >= STEAL_READ_INTERVAL_S:
            steal = self._host_steal.read()
            self._steal_read_s = now
        faults = thread_page_faults()
        received, handling = (0, 0) if self._count_requests is None else self._count_requests()
        if stalled or now - self._thread_snapshots[-1][0] >= THREAD_SNAPSHOT_INTERVAL_S:
            self._snapshot_threads()  # a stall's: the first at or after its end
        window = None
        if stalled:
            before = self._last_sched
            on_cpu = wait = None
            if sched is not None and before is not None:
                on_cpu = (sched[0] - before[0]) / 1e9
                wait = (sched[1] - before[1]) / 1e9
            faulted = None
            if faults is not None and self._last_faults is not None:
                faulted = (faults[0] - self._last_faults[0], faults[1] - self._last_faults[1])
            requests = None if self._count_requests is None else (
                received - self._last_requests, handling)
            stolen = None
            if steal is not None and self._last_steal is not None:
                stolen = steal - self._last_steal
            cpu = None if self._task_cpu is None else self._task_cpu.read()
            window = StallWindow(self._last_tick_s, now, lag, on_cpu, wait, faulted, requests,
                                 stolen, cpu)
        mark_s, mark_received = self._rate_mark
        if now - mark_s >= 1.0:
            self.request_rate = (received - mark_received) / (now - mark_s)
            self._rate_mark = (now, received)
        self._last_requests = received
        self._last_steal = steal
        self._last_tick_s = now
        self._last_sched = sched
        self._last_faults = faults
        self._due_s = now + self._interval_s
        if self._timer is not None:
            self._timer.arm(self._due_s + self._threshold_s)
        self._handle = self._loop.call_later(self._interval_s, self._tick)
        if window is not None:
            # Reported here, on the loop, with the watchdog's samples of it (taken while the
            # loop was overdue, so all before now): from the watchdog, each system call of
            # the report would take the GIL back from a loop busy with the stall's backlog.
            self._report(window)

    # ------------------------------------------------------------------ any thread

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started_s = time.monotonic()
            return
        took = time.monotonic() - self._gc_started_s
        if took >= GC_RECORDED_MIN_S:
            self._gc_records.append((self._gc_started_s, took, info.get("generation", -1)))

    # ------------------------------------------------------------------ the watchdog thread

    def _watch(self) -> None:
        period = min(self._interval_s, self._threshold_s / 2)
        timer = self._timer
        # The kernel sampler waits for the timer where it runs, and wakes this thread.
        wake_fd = None if timer is None else \
            timer.fd if self._kernel_sampler is None else self._kernel_sampler.wake_fd
        while not self._stop.is_set():
            # Asleep until the tick is overdue: without the GIL on the tick's timer, else
            # waking when the tick would be overdue to check (and asking for the GIL each time).
            if wake_fd is not None and not wait_for(wake_fd):
                wake_fd = timer = None  # unreadable: check by the clock from now on
            if timer is None:
                overdue_in = self._due_s + self._threshold_s - time.monotonic()
                if overdue_in > 0 and self._stop.wait(overdue_in):
                    break
            # Then a sample every `period` for as long as it stays overdue, the other
            # threads' frames in the first only (what each ran when the stall began); the
            # loop's late tick reports the stall. Each sample takes the GIL from the stalled
            # loop (or competes with it for the GIL), so where the kernel sampler watches the
            # kernel side every millisecond, the wait doubles after each sample: a long stall
            # still gets a stack now and then, at a few GIL takes. That wait ends early when
            # the sampler wakes this thread again: the timer fired for a stall after this one
            # (or the monitor closes), which then gets a wake of its own.
            woke_s, woke_cpu_s = time.monotonic(), time.thread_time()
            sampled = 0
            wait_s = period
            sampler = None
            if self._kernel_sampler is not None and wake_fd is not None:
                sampler = select.poll()  # not select(): the fd may be past FD_SETSIZE
                sampler.register(wake_fd, select.POLLIN)
            while not self._stop.is_set() and \
                    time.monotonic() - self._due_s > self._threshold_s:
                self._sample(others=sampled == 0)
                sampled += 1
                self._wake = (woke_s, time.thread_time() - woke_cpu_s)
                if sampler is None:
                    self._stop.wait(period)
                elif sampler.poll(wait_s * 1000):
                    break
                else:
                    wait_s = min(wait_s * 2, LATER_SAMPLE_WAIT_MAX_S)
            if timer is not None and self._kernel_sampler is None:
                timer.arm(self._due_s + self._threshold_s)

    def _sample(self, *, others: bool) -> None:
        """Where the loop thread is (its Python stack, its kernel wait) and, with `others`,
        every other thread's innermost frame. The kernel wait only without the kernel
        sampler, which reads it every millisecond."""
        assert self._kernel_wait is not None
        where = self._kernel_wait.read() if self._kernel_sampler is None else None
        frames = sys._current_frames()
        self._samples.append((time.monotonic(), format_stack(
            frames.get(self._loop_thread_id), base=self._base), where,
            _innermost_frames(frames, self._loop_thread_id) if others else {}))
        del frames

    def _snapshot_threads(self) -> None:
        if self._threads_cpu is not None:
            self._thread_snapshots.append((time.monotonic(), self._threads_cpu.read()))
            self._watch_threads()

    def _watch_threads(self) -> None:
        """Hand the kernel sampler the Python threads as of the last snapshot, when they have
        changed."""
        if self._kernel_sampler is None or self._threads_cpu is None:
            return
        tids = frozenset(self._threads_cpu.names)
        if tids != self._watched:
            self._kernel_sampler.watch(sorted(tids)[:KERNEL_THREADS_WATCHED_MAX])
            self._watched = tids

    def _other_threads(self, window: StallWindow) -> tuple[list[tuple[int, int, int]], float]:
        """The other threads that ran over the window, and the span their figures cover: from
        the last snapshot at or before its start (else the oldest kept) to the first at or
        after its end (the one its late tick took)."""
        snapshots = list(self._thread_snapshots)
        after = next((snapshot for snapshot in snapshots if snapshot[0] >= window.end_s), None)
        if after is None:
            return [], 0.0
        before = snapshots[0]
        for snapshot in snapshots:
            if snapshot[0] <= window.start_s:
                before = snapshot
        ran = busiest_threads(before[1], after[1], exclude=self._loop_native_id)
        return ran, after[0] - before[0]

    def _report(self, window: StallWindow) -> None:
        """One stall's WARNING, with the CPU time the watchdog spent from its wake in the
        stall to its latest sample (its samples, and its waits for the GIL's hand-over)."""
        woke_s, watchdog_cpu_s = self._wake
        if not window.start_s <= woke_s <= window.end_s:
            watchdog_cpu_s = 0.0  # it did not wake for this one
        gc_s = 0.0
        generations: set[int] = set()
        for started, took, generation in list(self._gc_records):
            overlap = min(started + took, window.end_s) - max(started, window.start_s)
            if overlap > 0:
                gc_s += overlap
                generations.add(generation)
        in_window = [sample for sample in list(self._samples)
                     if window.start_s <= sample[0] <= window.end_s]
        samples = [(stack, where) for _, stack, where, _ in in_window]
        stacks = Counter(stack for stack, _ in samples if stack)
        stack, seen = stacks.most_common(1)[0] if stacks else ((), 0)
        kernel = summarize_kernel_samples(
            [] if self._kernel_sampler is None else
            self._kernel_sampler.samples(int(window.start_s * 1e9)),
            self._loop_native_id, int(window.start_s * 1e9), int(window.end_s * 1e9))
        # Where the loop slept: the watchdog's samples and the kernel sampler's (which sees it
        # also while another thread, or the loop itself, holds the GIL).
        waits = Counter(where for _, where in samples if where is not None)
        waits.update({state.partition(":")[2]: count for state, count in kernel.loop.items()
                      if ":" in state})
        kernel_wait = waits.most_common(1)[0][0] if waits else "-"
        cause = classify_stall(window, gc_s)
        others, span_s = self._other_threads(window)
        names = {} if self._threads_cpu is None else self._threads_cpu.names
        self.stalls += 1
        self.max_lag_s = max(self.max_lag_s, window.lag_s)
        self.reported.append((window, cause, gc_s, stack))
        if self._count_stall is not None:
            self._count_stall(cause)
        log.warning(
            "event loop stall lag_ms=%.1f cause=%s on_cpu_ms=%s runqueue_wait_ms=%s "
            "page_faults=%s kernel_wait=%s gc_ms=%.1f%s requests=%s host_steal_ms=%s "
            "other_threads=%s other_threads_span_ms=%.1f watchdog_cpu_ms=%.2f "
            "kernel_samples=%d loop_kernel=%s runnable_while_loop_waited=%s cpu=%s "
            "end_unix_s=%.3f samples=%d running=%s",
            window.lag_s * 1000, cause.value, _ms(window.on_cpu_s), _ms(window.runqueue_wait_s),
            "-" if window.page_faults is None else "{}/{}".format(*window.page_faults),
            kernel_wait,
            gc_s * 1000, f" gc_generations={sorted(generations)}" if generations else "",
            self._format_requests(window), _ms(window.steal_s),
            ",".join(f"{names.get(tid, str(tid))}:{on_cpu / 1e6:.1f}/{waited / 1e6:.1f}"
                     f"{_seen_in(tid, in_window)}" for tid, on_cpu, waited in others) or "-",
            span_s * 1000, watchdog_cpu_s * 1000, kernel.rounds,
            ",".join(f"{state}/{count}" for state, count in kernel.loop.most_common()) or "-",
            ",".join(f"{names.get(tid, str(tid))}@{cpu}/{count}"
                     for (tid, cpu), count in kernel.runnable.most_common()) or "-",
            "-" if window.cpu is None else window.cpu,
            time.time() - (time.monotonic() - window.end_s), seen,
            " <- ".join(stack) if stack else "-",
        )

    def _format_requests(self, window: StallWindow) -> str:
        """`received/share handling=N`: the share is what the second before the window would
        have brought in the window's time."""
        if window.requests is None:
            return "-"
        received, handling = window.requests
        share = self.request_rate * (window.end_s - window.start_s)
        return f"{received}/{share:.0f} handling={handling}"


def _innermost_frames(frames: dict[int, FrameType], loop_thread_id: int) -> dict[int, str]:
    """The innermost frame outside the loop's machinery of every thread running Python but
    the loop's and the calling one (the watchdog), by kernel thread id."""
    out = {}
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or 0)
        if (frame is not None and thread.native_id is not None
                and thread.ident not in (loop_thread_id, threading.get_ident())):
            out[thread.native_id] = format_stack(frame, depth=1)[0].replace(" (", "(")
    return out


def _seen_in(tid: int, samples: list[Sample]) -> str:
    """`:frame`, the innermost frame the watchdog saw thread `tid` in most often over a
    stall's samples (the first of each wake takes the other threads' frames); empty when it
    saw none."""
    seen = Counter(sample[3][tid] for sample in samples if tid in sample[3])
    return f":{seen.most_common(1)[0][0]}" if seen else ""


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"
