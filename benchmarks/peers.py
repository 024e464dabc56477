"""Processes of the broker benchmark besides the brokers: Redis and the Python load generator,
plus what the benchmark reads about processes (CPU time) and does to them (pause, resume).

The brokers and name servers come from the interop harnesses (tests/interop/harness.py for Java,
tests/interop/pyrmq_env.py for pyrmq). Every other process is a `Child`: a real child process
with its stdout and stderr in files under a work directory, waited on with deadlines and stopped
(SIGTERM, then SIGKILL) at teardown.

Invariants:
- A child dies with the thread that started it (PR_SET_PDEATHSIG) and sits in its own process
  group, so `stop()` reaches anything it started; `stop()` is idempotent.
- Every wait has a deadline and fails with the tails of the child's output.
- A process `paused()` is always resumed when the block ends, however it ends.
- redis-server gets a port that was free a moment ago (bound to 0, released).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyrmq_client import BrokerClient
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import GetRouteInfoRequestHeader
from tests.interop.network import free_port
from tests.support.processes import die_with_parent, tail, terminate, wait_for_match

REPO: Final = Path(__file__).resolve().parents[1]
START_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 20.0
OUTPUT_TAIL_LINES: Final = 20
CLOCK_TICKS_PER_S: Final = os.sysconf("SC_CLK_TCK")



class BenchmarkSetupError(Exception):
    """A benchmark process did not start, died, or did not print what it should in time."""




def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process (all its threads), from /proc/<pid>/stat."""
    return _stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


def _stat_cpu_seconds(stat: str) -> float:
    """utime + stime of a /proc/<pid>/stat line, in seconds."""
    # Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def _all_cpu_ticks() -> list[int]:
    """The first line of /proc/stat, all CPUs since boot in clock ticks: user nice system idle
    iowait irq softirq steal."""
    with open("/proc/stat") as stat:
        return [int(value) for value in stat.readline().split()[1:9]]


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (everything but idle and iowait)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = _all_cpu_ticks()
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS_PER_S


def steal_seconds() -> float:
    """CPU seconds the host took from all of this VM's CPUs since boot (steal): time no code in
    the guest ran, whatever the guest shows for it."""
    return _all_cpu_ticks()[7] / CLOCK_TICKS_PER_S


def cpu_seconds_by_process() -> dict[int, tuple[str, float]]:
    """{pid: (command name, user + system CPU seconds)} of every process readable now."""
    found: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        found[int(entry.name)] = (name, _stat_cpu_seconds(stat))
    return found


def busiest(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
            seconds: float, *, top: int = 4) -> str:
    """The processes that used the most CPU between two `cpu_seconds_by_process()` snapshots
    taken `seconds` apart, as "name pid: N % of a core, ..." (those above 2 % only)."""
    used = sorted(
        ((cpu - before.get(pid, (name, 0.0))[1], name, pid)
         for pid, (name, cpu) in after.items()),
        reverse=True,
    )
    shown = [f"{name} {pid}: {100 * cpu / max(seconds, 1e-9):.0f} %"
             for cpu, name, pid in used[:top] if cpu / max(seconds, 1e-9) > 0.02]
    return ", ".join(shown) or "nothing above 2 %"


@dataclass(eq=False)
class Child:
    """One child process and its output files (stdout.txt, stderr.txt in work_dir)."""

    name: str
    work_dir: Path
    popen: subprocess.Popen[bytes]

    @classmethod
    def start(cls, name: str, command: Sequence[str], work_dir: Path) -> Child:
        work_dir.mkdir(parents=True, exist_ok=True)
        (work_dir / "command.txt").write_text(" ".join(command) + "\n")
        with (
            (work_dir / "stdout.txt").open("wb") as stdout,
            (work_dir / "stderr.txt").open("wb") as stderr,
        ):
            popen = subprocess.Popen(
                command,
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl, no locks taken
            )
        return cls(name, work_dir, popen)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        """stdout and stderr, in that order (the pyrmq servers log to stderr)."""
        return "".join(
            (self.work_dir / name).read_text(errors="replace")
            for name in ("stdout.txt", "stderr.txt")
        )

    def stdout(self) -> str:
        return (self.work_dir / "stdout.txt").read_text(errors="replace")

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.pid)

    def wait_for_output(self, pattern: str, *, timeout_s: float) -> re.Match[str]:
        """The first match of `pattern` in stdout or stderr; raises if the child exits first
        or time runs out."""
        return wait_for_match(
            pattern, read=self.output, alive=self.alive,
            exit_code=lambda: self.popen.returncode, name=self.name,
            diagnostics=self.diagnostics, timeout_s=timeout_s, error=BenchmarkSetupError,
        )

    def wait(self, timeout_s: float) -> int:
        """The exit code; raises BenchmarkSetupError (with the output) if still running."""
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            raise BenchmarkSetupError(
                f"{self.name} still running after {timeout_s} s\n{self.diagnostics()}"
            ) from err

    def stop(self, *, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to the process group (a graceful stop), SIGKILL after timeout_s. Idempotent;
        also stops a child that `paused()` left stopped (SIGCONT after the SIGTERM)."""
        terminate(self.popen, timeout_s=timeout_s, group=True, name=self.name,
                  error=BenchmarkSetupError)

    def diagnostics(self) -> str:
        return (
            f"--- {self.name} pid={self.pid} work_dir={self.work_dir}\n"
            f"--- stdout:\n{tail(self.work_dir / 'stdout.txt', OUTPUT_TAIL_LINES)}\n"
            f"--- stderr:\n{tail(self.work_dir / 'stderr.txt', OUTPUT_TAIL_LINES)}"
        )


@contextlib.contextmanager
def paused(pids: Sequence[int]) -> Iterator[None]:
    """SIGSTOP these processes (every thread of each) for the block, SIGCONT after it.

    A benchmark pauses the servers it does not measure: an idle Java broker alone keeps 10-15 %
    of a core busy (and much more while its JIT compiles), which would tax whichever server
    shares the machine with it.
    """
    stopped: list[int] = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@dataclass(frozen=True, slots=True)
class Server:
    """A running server child and its address ("127.0.0.1:port")."""

    addr: str
    child: Child


def start_redis(work_dir: Path) -> Server:
    """Debian's redis-server on 127.0.0.1: AOF on, fsync every second, no RDB snapshots, its
    files in work_dir. Returns once it accepts commands."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise BenchmarkSetupError(
            "redis-server not found: ./scripts/setup.sh installs it (apt-get install redis-server)"
        )
    work_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    child = Child.start(
        "redis-server",
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(work_dir),
         "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
         "--daemonize", "no", "--logfile", ""],
        work_dir,
    )
    try:
        child.wait_for_output(r"Ready to accept connections", timeout_s=START_TIMEOUT_S)
    except BenchmarkSetupError:
        child.stop()
        raise
    return Server(f"127.0.0.1:{port}", child)


async def create_topic(broker: str, topic: str, *, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC on a pyrmq or Java broker (both speak it)."""
    host, port = broker.rsplit(":", 1)
    async with await BrokerClient.connect(host, int(port)) as client:
        await client.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)


async def route_ready(namesrv: str, topic: str) -> bool:
    """Whether the name server answers GET_ROUTEINFO_BY_TOPIC for `topic` with a route."""
    host, port = namesrv.rsplit(":", 1)
    async with await RemotingClient.connect(host, int(port)) as client:
        request = RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            GetRouteInfoRequestHeader(topic=topic).to_ext_fields(),
        )
        response = await client.invoke(request, 3_000)
    return response.code == ResponseCode.SUCCESS and b"queueDatas" in response.body


def last_json_line(text: str, *, what: str) -> dict[str, object]:
    """The last line of `text` that is a JSON object (a load generator's result)."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    raise BenchmarkSetupError(f"{what}: no JSON result line in its output:\n{text[-2000:]}")
