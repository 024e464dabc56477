"""Builds the Java side of the interop tests: Maven resolves RocketMQ, javac compiles our programs.

`ensure_built()` runs Maven at most once per change of tests/interop/java (pom.xml or sources):
a stamp file under target/ records the hash it built. It tries `mvn -o` (offline) first, so that a
machine whose ~/.m2 already holds everything never touches the network, and falls back to an
online build. `python -m tests.interop.build` does the same from ./scripts/setup.sh.

Invariants:
- Only one process builds at a time: builds hold an exclusive flock on target/.build.lock.
- The stamp is written last, atomically, and only after Maven succeeded and every classpath entry
  exists: a present stamp means a complete build.
- Only the standard library is imported here, so that setup.sh can run it before pytest.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

JAVA_DIR: Final = Path(__file__).resolve().parent / "java"
POM_FILE: Final = JAVA_DIR / "pom.xml"
SOURCE_DIR: Final = JAVA_DIR / "src"
LOGBACK_CONFIG: Final = JAVA_DIR / "logback.xml"
TARGET_DIR: Final = JAVA_DIR / "target"
CLASSES_DIR: Final = TARGET_DIR / "classes"
CLASSPATH_FILE: Final = TARGET_DIR / "classpath.txt"
STAMP_FILE: Final = TARGET_DIR / "pyrmq-build.stamp"
LOCK_FILE: Final = TARGET_DIR / ".build.lock"

JAVA_MAJOR_MIN: Final = 17
# A first build downloads ~120 MiB from Maven Central; later ones take seconds.
MAVEN_TIMEOUT_S: Final = 900
OUTPUT_TAIL_LINES: Final = 40

INSTALL_HINT: Final = (
    "the interop tests run real Apache RocketMQ (Java) and need a JDK >= 17 and Maven on PATH "
    "(Debian: apt-get install openjdk-17-jdk-headless maven)"
)


class InteropSetupError(Exception):
    """Java or Maven is missing or too old, or the Maven build failed."""


@dataclass(frozen=True, slots=True)
class Classpath:
    """The runtime classpath of the interop JVMs: our compiled classes first, then the jars."""

    entries: tuple[Path, ...]
    logback_config: Path

    def __str__(self) -> str:
        return os.pathsep.join(str(entry) for entry in self.entries)


_built: Classpath | None = None


def ensure_built(*, java: str = "java", mvn: str = "mvn") -> Classpath:
    """The classpath of a complete build, building first if pom.xml or a source changed.

    Cached for the life of the process. Raises InteropSetupError (with Maven's last lines) when
    Java or Maven is missing or the build fails; it never returns a partial classpath.
    """
    global _built  # noqa: PLW0603 - one build per process, shared by every fixture
    if _built is not None:
        return _built
    check_java(java)
    TARGET_DIR.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        digest = source_digest()
        classpath = _read_classpath() if _read_stamp() == digest else None
        if classpath is None:
            _run_maven(mvn)
            classpath = _read_classpath()
            if classpath is None:
                raise InteropSetupError(f"maven succeeded but {CLASSPATH_FILE} is incomplete")
            _write_stamp(digest)
    _built = classpath
    return classpath


def check_java(java: str = "java") -> int:
    """The major version of `java`; raises InteropSetupError if it is missing or below 17."""
    path = shutil.which(java)
    if path is None:
        raise InteropSetupError(f"`{java}` not found: {INSTALL_HINT}")
    result = subprocess.run(
        [path, "-version"], capture_output=True, text=True, timeout=60, check=False
    )
    # `openjdk version "17.0.15" 2025-04-15` (Java 8 would say "1.8.0_...")
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if result.returncode != 0 or match is None:
        raise InteropSetupError(
            f"`{path} -version` failed: {result.stderr.strip()}; {INSTALL_HINT}"
        )
    major = int(match.group(1))
    if major == 1 and match.group(2) is not None:
        major = int(match.group(2))
    if major < JAVA_MAJOR_MIN:
        raise InteropSetupError(f"{path} is Java {major}, below {JAVA_MAJOR_MIN}: {INSTALL_HINT}")
    return major


def source_digest() -> str:
    """sha256 over pom.xml and every file under src/, names included (a rename rebuilds)."""
    digest = hashlib.sha256()
    files = [POM_FILE, *sorted(path for path in SOURCE_DIR.rglob("*") if path.is_file())]
    for path in files:
        digest.update(str(path.relative_to(JAVA_DIR)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _read_stamp() -> str | None:
    try:
        return STAMP_FILE.read_text().strip()
    except FileNotFoundError:
        return None


def _read_classpath() -> Classpath | None:
    """The classpath Maven wrote, or None if the file or anything it names is missing."""
    try:
        jars = [Path(entry) for entry in CLASSPATH_FILE.read_text().strip().split(os.pathsep)]
    except FileNotFoundError:
        return None
    entries = (CLASSES_DIR, *jars)
    if not all(entry.exists() for entry in entries) or not any(CLASSES_DIR.rglob("*.class")):
        return None
    return Classpath(entries=entries, logback_config=LOGBACK_CONFIG)


def _run_maven(mvn: str) -> None:
    """Compile and write the classpath file: offline first, then online. Raises on failure."""
    path = shutil.which(mvn)
    if path is None:
        raise InteropSetupError(f"`{mvn}` not found: {INSTALL_HINT}")
    goals = [
        "compile",
        "dependency:build-classpath",
        f"-Dmdep.outputFile={CLASSPATH_FILE}",
        "-Dmdep.includeScope=runtime",
    ]
    offline = _maven(path, ["-o", *goals])
    if offline.returncode == 0:
        return
    online = _maven(path, goals)
    if online.returncode != 0:
        tail = "\n".join((online.stdout + online.stderr).splitlines()[-OUTPUT_TAIL_LINES:])
        raise InteropSetupError(
            f"maven build of {POM_FILE} failed (exit {online.returncode}); last lines:\n{tail}"
        )


def _maven(mvn_path: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [mvn_path, "-B", "-q", "-f", str(POM_FILE), *args],
            cwd=JAVA_DIR,
            capture_output=True,
            text=True,
            timeout=MAVEN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise InteropSetupError(
            f"maven build of {POM_FILE} did not finish within {MAVEN_TIMEOUT_S} s"
        ) from err


def _write_stamp(digest: str) -> None:
    temp = STAMP_FILE.with_suffix(".tmp")
    temp.write_text(digest + "\n")
    os.replace(temp, STAMP_FILE)


def main() -> int:
    """Build (or check) the interop classpath; for ./scripts/setup.sh."""
    started = time.monotonic()
    try:
        classpath = ensure_built()
    except InteropSetupError as err:
        print(f"interop: {err}", file=sys.stderr)
        return 1
    print(
        f"interop: RocketMQ Java classpath ready ({len(classpath.entries) - 1} jars, "
        f"{time.monotonic() - started:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
