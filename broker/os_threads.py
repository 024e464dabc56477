"""The broker's threads, named for the operating system.

Python 3.11 leaves every thread with the process's name in the kernel (its /proc `comm`), so
`top -H`, `ps -L`, perf and scheduler traces cannot tell the event loop from the store's
workers, the log writer or the loop monitor. Each is given its Python name (`store-io_0`,
`pyrmq-log`, `loop-monitor`, `pyrmq-aux_0`). The main thread, the event loop's, keeps the
process's name: `ps` and `pgrep` show it. Linux only, as the broker is; a refusal is ignored.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Final

# The kernel keeps a name in 16 bytes with its NUL (TASK_COMM_LEN).
COMM_BYTES: Final = 15
# The loop's default executor (asyncio.to_thread, run_in_executor(None)): asyncio's own size.
AUX_THREAD_PREFIX: Final = "pyrmq-aux"


def name_os_thread(thread: threading.Thread) -> None:
    """Give `thread` its Python name in the kernel. Written through /proc rather than
    pthread_setname_np: a thread that has ended meanwhile is a missing file, not a stale
    handle."""
    if thread.native_id is None or thread is threading.main_thread():
        return
    name = thread.name.encode("utf-8", "replace")[:COMM_BYTES]
    with contextlib.suppress(OSError), open(
            f"/proc/self/task/{thread.native_id}/comm", "wb") as comm:
        comm.write(name)


def name_os_threads() -> None:
    """Name every thread running now (the log writer, the store's workers, the loop monitor);
    the loop's default executor names those it starts later itself."""
    for thread in threading.enumerate():
        name_os_thread(thread)


def _name_current() -> None:
    name_os_thread(threading.current_thread())


def aux_executor() -> ThreadPoolExecutor:
    """The loop's default executor, its threads named as they start."""
    return ThreadPoolExecutor(thread_name_prefix=AUX_THREAD_PREFIX, initializer=_name_current)
