"""A full disk (a real small tmpfs): typed refusal, no SIGBUS, reads work, writes resume."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    if os.geteuid() != 0 and os.environ.get("CI"):
        pytest.fail("the disk-full test needs root to mount a tmpfs (CI runs as root)")
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1536k", "tmpfs", str(mount_point)],
                   check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_disk_full_refuses_without_sigbus_and_recovers(small_tmpfs: Path) -> None:
    ballast = small_tmpfs / "ballast"
    ballast.write_bytes(b"\xff" * 512 * 1024)
    root = small_tmpfs / "store"
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.disk_full_child", str(root), str(ballast)],
        cwd=repo, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, (
        f"child exited {proc.returncode} (-7 is SIGBUS)\n{proc.stdout}\n{proc.stderr}"
    )
    assert "refused after" in proc.stdout
    assert "no space" in proc.stdout
    assert "reads ok" in proc.stdout
    assert "writes resumed" in proc.stdout
    assert "reopen ok" in proc.stdout
