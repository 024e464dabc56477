"""broker/os_threads.py: the broker's threads carry their Python names in the kernel."""

from __future__ import annotations

import threading
from pathlib import Path

from broker.os_threads import COMM_BYTES, aux_executor, name_os_thread, name_os_threads


def comm_of(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().rstrip("\n")


def started(name: str) -> tuple[threading.Thread, threading.Event]:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name=name, daemon=True)
    thread.start()
    return thread, release


def test_a_thread_gets_its_python_name_in_the_kernel() -> None:
    thread, release = started("store-io_7")
    try:
        assert thread.native_id is not None
        name_os_thread(thread)
        assert comm_of(thread.native_id) == "store-io_7"
    finally:
        release.set()
        thread.join()


def test_a_long_name_is_cut_to_the_kernels_fifteen_bytes() -> None:
    long_name = "a-thread-name-longer-than-the-kernel-keeps"
    thread, release = started(long_name)
    try:
        assert thread.native_id is not None
        name_os_thread(thread)
        assert comm_of(thread.native_id) == long_name[:COMM_BYTES] == "a-thread-name-l"
    finally:
        release.set()
        thread.join()


def test_every_running_thread_but_the_main_one_is_named() -> None:
    process_name = Path("/proc/self/comm").read_text()
    thread, release = started("pyrmq-test-x")
    try:
        name_os_threads()
        assert thread.native_id is not None
        assert comm_of(thread.native_id) == "pyrmq-test-x"
        assert Path("/proc/self/comm").read_text() == process_name  # what ps and pgrep show
    finally:
        release.set()
        thread.join()


def test_a_thread_that_has_ended_is_skipped() -> None:
    thread, release = started("gone")
    release.set()
    thread.join()
    name_os_thread(thread)  # its /proc entry is gone: nothing to name, nothing raised


def test_the_loops_default_executor_names_its_threads() -> None:
    with aux_executor() as executor:
        names = {executor.submit(lambda: comm_of(threading.get_native_id())).result()
                 for _ in range(3)}
    assert names <= {f"pyrmq-aux_{i}" for i in range(64)}
    assert "pyrmq-aux_0" in names
