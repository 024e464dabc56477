"""The leak check of tests/conftest.py: an orphaned child of the run is found, and killed."""

from __future__ import annotations

import os
import subprocess
import time

from tests.support import leaks


def _wait_for(condition: object, deadline_s: float = 10.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.02)


def test_an_orphaned_child_is_found_and_killed() -> None:
    token = os.environ[leaks.MARK_KEY]
    # The shell starts `sleep` in the background and exits: sleep is re-parented away from us.
    shell = subprocess.run(["sh", "-c", "sleep 120 >/dev/null 2>&1 & echo $!"],
                           capture_output=True, text=True, check=True)
    orphan = int(shell.stdout)
    try:
        _wait_for(lambda: any(pid == orphan for pid, _ in leaks.orphans(token)))
    finally:
        leaks.kill([(orphan, "sleep")])
    _wait_for(lambda: all(pid != orphan for pid, _ in leaks.marked_processes(token)))


def test_a_running_child_is_not_an_orphan() -> None:
    token = os.environ[leaks.MARK_KEY]
    with subprocess.Popen(["sleep", "120"]) as child:
        try:
            assert child.pid in dict(leaks.marked_processes(token))
            assert child.pid not in dict(leaks.orphans(token))
        finally:
            child.kill()
