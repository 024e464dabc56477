"""Test hooks reach a process only when asked for (issue 13): a stray PYRMQ_FAULTPOINTS or
PYRMQ_DURABILITY_FD in a production broker's environment is ignored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from store import testhooks

REPO = Path(__file__).resolve().parents[2]
KILL_ON_FIRST_APPEND = "commitlog.append.before_position:1:kill"

APPEND_ONE = """
import sys
from pathlib import Path
from store import testhooks
from store.message_store import MessageStore
from tests.support.store_helpers import message, small_config
if sys.argv[2] == "enable":
    testhooks.enable_from_environment()
store = MessageStore(small_config(Path(sys.argv[1])))
store.open()
store.append_message(message(b"x"))
store.close()
print("appended", testhooks.FAULTS_ON)
"""


def _run(code: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env}, check=False)


def test_a_fault_point_in_the_environment_is_ignored_unless_enabled(tmp_path: Path) -> None:
    env = {"PYRMQ_FAULTPOINTS": KILL_ON_FIRST_APPEND, "PYRMQ_DURABILITY_FD": "1"}
    ignored = _run(APPEND_ONE, str(tmp_path / "a"), "no", env=env)
    assert ignored.returncode == 0, ignored.stderr
    assert ignored.stdout.strip() == "appended False"
    enabled = _run(APPEND_ONE, str(tmp_path / "b"), "enable", env=env)
    assert enabled.returncode == -9  # the same variable, asked for: the fault point fired


def test_a_malformed_variable_does_not_break_the_import(tmp_path: Path) -> None:
    result = _run(APPEND_ONE, str(tmp_path / "a"), "no", env={"PYRMQ_FAULTPOINTS": "garbage"})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("flag", "code"), [([], 0), (["--test-hooks"], 2)])
def test_the_broker_reads_the_variables_only_with_test_hooks(flag: list[str], code: int) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker", *flag, "-m"], cwd=REPO, capture_output=True, text=True,
        timeout=60, env={**os.environ, "PYRMQ_FAULTPOINTS": "garbage"}, check=False)
    assert result.returncode == code, result.stderr
    if code:
        assert result.stderr.strip().splitlines() == [
            "pyrmq-broker: PYRMQ_FAULTPOINTS: fault point 'garbage': expected "
            "name:count[:action] with count >= 1"]


def test_enable_from_environment_turns_both_on(monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()
    monkeypatch.setenv("PYRMQ_FAULTPOINTS", "cq.write:3:eio")
    monkeypatch.setenv("PYRMQ_DURABILITY_FD", str(write))
    try:
        testhooks.enable_from_environment()
        assert testhooks.FAULTS_ON
        assert testhooks.JOURNAL_ON
        assert testhooks.armed("cq.write")
        testhooks.journal_new_file("x")
        assert os.read(read, 100) == b"N x\n"
    finally:
        testhooks.configure_faults("")
        testhooks.configure_journal(None)
        os.close(read)
        os.close(write)
    assert not testhooks.FAULTS_ON
    assert not testhooks.JOURNAL_ON
