"""store/_native.c under AddressSanitizer and UndefinedBehaviorSanitizer.

The C extension parses client bytes (SEND_BATCH_MESSAGE bodies) and writes into the commitlog
mapping, so a stray read or write would be silent corruption, not an exception. This builds the
extension with `-fsanitize=address,undefined` into a copy of the `store` package and runs the
tests that drive every C function (including the hypothesis properties over damaged and
truncated input) against it, in a child process with the sanitizer runtime preloaded: any
out-of-bounds access, overflow or undefined shift aborts the child.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = [
    "tests/unit/test_native.py",
    "tests/property/test_message_format_props.py",
    "tests/property/test_fast_scan.py",
    "tests/integration/test_native_fallback.py",
    "tests/integration/test_append_message_fields.py",
]


def _runtime(name: str) -> str:
    found = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert os.path.isabs(found), f"gcc has no {name} (Debian: libasan8, libubsan1)"
    return found


def test_native_tests_pass_under_asan_and_ubsan(tmp_path: Path) -> None:
    overlay = tmp_path / "store"
    shutil.copytree(REPO / "store", overlay,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    target = overlay / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(
        ["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=all", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
         f"-I{sysconfig.get_paths()['include']}", str(overlay / "_native.c"), "-o", str(target)],
        check=True, capture_output=True, text=True,
    )
    env = {
        **os.environ,
        "LD_PRELOAD": f"{_runtime('libasan.so')} {_runtime('libubsan.so')}",
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",  # CPython's own allocations
        "PYTHONMALLOC": "malloc",  # every object its own malloc block, so ASan sees its bounds
        "UBSAN_OPTIONS": "print_stacktrace=1",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}",
    }
    # Import the sanitized build first: the tests' own imports then find it in sys.modules,
    # whatever pytest puts on sys.path.
    script = (
        "import sys, pytest, store._native as native\n"
        f"assert native.__file__ == {str(target)!r}, native.__file__\n"
        "sys.exit(pytest.main(sys.argv[1:]))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, "-q", "-p", "no:cacheprovider", "--rootdir", str(REPO),
         "-c", str(REPO / "pyproject.toml"), *(str(REPO / test) for test in TESTS)],
        env=env, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )
    # A sanitizer report comes first on stderr, then the abort's traceback.
    assert run.returncode == 0, run.stderr[:6000] + run.stdout[-2000:]
    assert " passed" in run.stdout
