"""tests/support/processes.py: a child's lower CPU weight, for itself and for its session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import nice_child, set_autogroup_nice

# A child that prints its own nice, then waits on stdin (so that its autogroup can be read).
_CHILD = "import os, sys; print(os.nice(0), flush=True); sys.stdin.read()"


def _autogroup_name(pid: int) -> str:
    """`pid`'s autogroup, as /proc shows it ("/autogroup-<id>"). The kernel shows nothing for
    the root group, the one of every process whose session goes back to init's (CI's runner)."""
    shown = Path(f"/proc/{pid}/autogroup").read_text().split()
    return shown[0] if shown else "(root)"


def test_a_child_in_a_session_of_its_own_gets_the_lower_weight_and_so_does_its_group() -> None:
    base = os.nice(0)
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, start_new_session=True,
                             preexec_fn=nice_child(7))  # noqa: PLW1509 - as the harness
    try:
        assert child.stdout is not None
        assert int(child.stdout.readline()) == min(base + 7, 19)
        autogroup = Path(f"/proc/{child.pid}/autogroup")
        if autogroup.exists():  # kernels with autogroups: the session's group starts at nice 0
            assert autogroup.read_text().split()[-1] == "0"
            set_autogroup_nice(child.pid, 7)
            assert autogroup.read_text().split()[-1] == "7"
            assert _autogroup_name(child.pid).startswith("/autogroup-")  # a group of its own
            assert _autogroup_name(child.pid) != _autogroup_name(os.getpid())
        else:  # the threads' nice is all there is: set_autogroup_nice has nothing to change
            set_autogroup_nice(child.pid, 7)
    finally:
        child.kill()
        child.wait()
