"""Builds the Java side of the interop tests: Maven resolves RocketMQ, javac compiles our programs.

Every Apache RocketMQ release in `ROCKETMQ_VERSIONS` gets its own build of the same pom.xml
(`mvn -Drocketmq.version=X`), with its own output directory `target/rocketmq-X/` (classes,
classpath.txt, stamp); the jars of every release are cached side by side in ~/.m2.

`ensure_built(version)` runs Maven at most once per change of tests/interop/java (pom.xml or
sources) and version: a stamp file records the hash it built. It tries `mvn -o` (offline) first, so
that a machine whose ~/.m2 already holds everything never touches the network, and falls back to
an online build. `python -m tests.interop.build` builds every release, from ./scripts/setup.sh.

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

# The Apache RocketMQ releases pyrmq is tested against, newest first: THE one list (fixtures,
# setup.sh and the benchmarks read it). NEWEST is the reference release (the benchmarks' peer).
# To add a release: put it here, run ./scripts/setup.sh, and run the interop tests.
ROCKETMQ_VERSIONS: Final[tuple[str, ...]] = ("5.5.0", "5.3.3")
NEWEST: Final = ROCKETMQ_VERSIONS[0]

JAVA_DIR: Final = Path(__file__).resolve().parent / "java"
POM_FILE: Final = JAVA_DIR / "pom.xml"
SOURCE_DIR: Final = JAVA_DIR / "src"
LOGBACK_CONFIG: Final = JAVA_DIR / "logback.xml"
TARGET_DIR: Final = JAVA_DIR / "target"
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
    """Java or Maven is missing or too old, the version is not in ROCKETMQ_VERSIONS, or the Maven
    build failed."""


@dataclass(frozen=True, slots=True)
class BuildDir:
    """Where the build of one RocketMQ release goes: target/rocketmq-<version>/."""

    version: str

    @property
    def root(self) -> Path:
        return TARGET_DIR / f"rocketmq-{self.version}"

    @property
    def classes(self) -> Path:
        return self.root / "classes"

    @property
    def classpath_file(self) -> Path:
        return self.root / "classpath.txt"

    @property
    def stamp_file(self) -> Path:
        return self.root / "pyrmq-build.stamp"


@dataclass(frozen=True, slots=True)
class Classpath:
    """The runtime classpath of the interop JVMs of one RocketMQ release: our compiled classes
    first, then the jars."""

    version: str
    entries: tuple[Path, ...]
    logback_config: Path

    def __str__(self) -> str:
        return os.pathsep.join(str(entry) for entry in self.entries)


_built: dict[str, Classpath] = {}


def ensure_built(version: str, *, java: str = "java", mvn: str = "mvn") -> Classpath:
    """The classpath of a complete build of RocketMQ `version` (one of ROCKETMQ_VERSIONS), building
    first if pom.xml or a source changed.

    Cached for the life of the process. Raises InteropSetupError (with Maven's last lines) when
    Java or Maven is missing or the build fails; it never returns a partial classpath.
    """
    if version in _built:
        return _built[version]
    if version not in ROCKETMQ_VERSIONS:
        raise InteropSetupError(
            f"RocketMQ {version} is not one of ROCKETMQ_VERSIONS {ROCKETMQ_VERSIONS} "
            "(tests/interop/build.py)"
        )
    check_java(java)
    build = BuildDir(version)
    build.root.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        digest = source_digest(version)
        classpath = _read_classpath(build) if _read_stamp(build) == digest else None
        if classpath is None:
            _run_maven(mvn, version)
            classpath = _read_classpath(build)
            if classpath is None:
                raise InteropSetupError(
                    f"maven succeeded but {build.classpath_file} is incomplete"
                )
            _write_stamp(build, digest)
    _built[version] = classpath
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


def source_digest(version: str) -> str:
    """sha256 over the version, pom.xml and every file under src/, names included (a rename
    rebuilds)."""
    digest = hashlib.sha256(version.encode() + b"\0")
    files = [POM_FILE, *sorted(path for path in SOURCE_DIR.rglob("*") if path.is_file())]
    for path in files:
        digest.update(str(path.relative_to(JAVA_DIR)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _read_stamp(build: BuildDir) -> str | None:
    try:
        return build.stamp_file.read_text().strip()
    except FileNotFoundError:
        return None


def _read_classpath(build: BuildDir) -> Classpath | None:
    """The classpath Maven wrote, or None if the file or anything it names is missing."""
    try:
        text = build.classpath_file.read_text().strip()
    except FileNotFoundError:
        return None
    jars = [Path(entry) for entry in text.split(os.pathsep)]
    entries = (build.classes, *jars)
    if not all(entry.exists() for entry in entries) or not any(build.classes.rglob("*.class")):
        return None
    return Classpath(version=build.version, entries=entries, logback_config=LOGBACK_CONFIG)


def _run_maven(mvn: str, version: str) -> None:
    """Compile and write the classpath file: offline first, then online. Raises on failure."""
    path = shutil.which(mvn)
    if path is None:
        raise InteropSetupError(f"`{mvn}` not found: {INSTALL_HINT}")
    goals = [
        f"-Drocketmq.version={version}",
        "compile",
        "dependency:build-classpath",
        f"-Dmdep.outputFile={BuildDir(version).classpath_file}",
        "-Dmdep.includeScope=runtime",
    ]
    offline = _maven(path, ["-o", *goals])
    if offline.returncode == 0:
        return
    online = _maven(path, goals)
    if online.returncode != 0:
        tail = "\n".join((online.stdout + online.stderr).splitlines()[-OUTPUT_TAIL_LINES:])
        raise InteropSetupError(
            f"maven build of {POM_FILE} for RocketMQ {version} failed "
            f"(exit {online.returncode}); last lines:\n{tail}"
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
            f"maven build of {POM_FILE} ({' '.join(args[:2])}) did not finish within "
            f"{MAVEN_TIMEOUT_S} s"
        ) from err


def _write_stamp(build: BuildDir, digest: str) -> None:
    temp = build.stamp_file.with_suffix(".tmp")
    temp.write_text(digest + "\n")
    os.replace(temp, build.stamp_file)


def main(argv: list[str] | None = None) -> int:
    """Build (or check) the interop classpath of every release in ROCKETMQ_VERSIONS (or of the
    versions given as arguments); for ./scripts/setup.sh."""
    versions = (argv if argv is not None else sys.argv[1:]) or list(ROCKETMQ_VERSIONS)
    for version in versions:
        started = time.monotonic()
        try:
            classpath = ensure_built(version)
        except InteropSetupError as err:
            print(f"interop: RocketMQ {version}: {err}", file=sys.stderr)
            return 1
        print(
            f"interop: RocketMQ {version} Java classpath ready "
            f"({len(classpath.entries) - 1} jars, {time.monotonic() - started:.1f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
