"""pyrmq-broker against Apache RocketMQ (NEWEST of tests/interop: 5.5.0) and Redis 7, in one run,
on the same machine.

Servers (started once for the module, all on loopback, all stopped at teardown):
- pyrmq: its name server and broker as real processes (`python -m controller` and `python -m
  broker -c broker.conf`, i.e. pyrmq-controller and pyrmq-broker, from tests/interop/pyrmq_env.py):
  a standalone ASYNC_MASTER with ASYNC_FLUSH, metrics off;
- Apache RocketMQ NEWEST (5.5.0, the newest release users compare with): the Java name server
  and broker of tests/interop (ASYNC_MASTER, ASYNC_FLUSH), the broker with a 1 GiB heap, G1
  and C2 (`BROKER_JVM_ARGS`, after the harness's start-up flags), as runbroker.sh runs it but
  smaller;
- Redis 7 (Debian's redis-server): AOF on, fsync every second, no RDB snapshots.
Both brokers use 1 GiB commitlog files (their default) and topics of 8 queues created up front.

Workloads (16 producers, 1 KiB bodies, each producer waiting for its answer before the next send;
a warm-up, then a measured window):
1. Java client (tests/interop/java/.../LoadGen.java: 16 threads sharing one DefaultMQProducer, so
   one client instance and one connection, as applications use it) against both brokers: single
   sync sends, and batches of 32. (16 producers with a client instance each spend most of the
   2 cores on the clients' own threads: about 3,000 msg/s for either broker.)
2. Java DefaultLitePullConsumer reading stored messages from each broker.
3. pyrmq's Python load generator (benchmarks/loadgen.py: asyncio + uvloop, pyrmq_client, or
   redis-py) against pyrmq and against Redis XADD: single sends, and batches of 32 (one
   SEND_BATCH_MESSAGE, or a pipeline of 32 XADDs).

Before the measurements each broker gets one warm-up run (batches, 8 s: the Java broker's JIT
compiles its hot paths, and both brokers store what the pull test reads). While one server is
measured, every other server is paused (SIGSTOP): an idle Java broker alone uses 10-15 % of a core.

Each figure is printed with the peer's and the ratio pyrmq/peer, plus the CPU each server and
load generator used over the window (per cent of one core) to show who was the bottleneck on
these 2 cores. No time is asserted; a run must only measure something.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from benchmarks.conftest import record
from benchmarks.peers import (
    Child,
    Server,
    create_topic,
    last_json_line,
    machine_busy_seconds,
    paused,
    process_cpu_seconds,
    route_ready,
    start_redis,
)
from pyrmq_client import BrokerClient
from tests.interop.harness import (
    CLIENT_SYSPROPS,
    NEWEST,
    InteropSetupError,
    JavaEnv,
    JavaProcess,
    JavaServer,
    ensure_built,
)
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess

pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

PRODUCERS: Final = 16
BODY_BYTES: Final = 1024
BATCH_SIZE: Final = 32
QUEUES: Final = 8
# A fresh JVM per Java run: its JIT needs a longer warm-up than the Python load generator.
JAVA_WARMUP_S: Final = 5
PY_WARMUP_S: Final = 2
# CI-sized (was 10 s until 2026-11-25): 5 s windows still count 15,000-250,000 sends each, and
# save 40 s of the CI budget (4 workloads x 2 servers).
WINDOW_S: Final = 5
PULL_WARMUP_S: Final = 2
PULL_WINDOW_S: Final = 8
BROKER_WARMUP_S: Final = 8
COMMITLOG_FILE_BYTES: Final = 1024 * 1024 * 1024

LOADGEN_MAIN: Final = "pyrmq.interop.LoadGen"
# After the harness's JVM_FLAGS (serial GC, C1 only: quick start-up), so these win: runbroker.sh's
# G1 and the full JIT, with a heap sized for the benchmark.
BROKER_HEAP_MB: Final = 1024
BROKER_JVM_ARGS: Final = ("-XX:-UseSerialGC", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=4")
LOADGEN_HEAP_MB: Final = 512
LOADGEN_JVM_ARGS: Final = BROKER_JVM_ARGS
JAVA_BROKER_CONF: Final[dict[str, str | int | bool]] = {
    "mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES,
    "flushDiskType": "ASYNC_FLUSH",
    "brokerRole": "ASYNC_MASTER",
}
# Over PyrmqEnv's test defaults (1 MiB segments): both brokers' defaults, as for Java.
PYRMQ_BROKER_CONF: Final[dict[str, str | int | bool]] = {
    **JAVA_BROKER_CONF,
    "mappedFileSizeConsumeQueue": 300_000 * 20,
}

SYNC_TOPIC: Final = "BenchSync"
BATCH_TOPIC: Final = "BenchBatch"
PY_SYNC_TOPIC: Final = "PyBenchSync"
PY_BATCH_TOPIC: Final = "PyBenchBatch"
TOPICS: Final = (SYNC_TOPIC, BATCH_TOPIC, PY_SYNC_TOPIC, PY_BATCH_TOPIC)

MACHINE_CPU_PCT: Final = 100 * (os.cpu_count() or 1)
ROUTE_TIMEOUT_S: Final = 30.0
RUN_EXTRA_S: Final = 60.0  # start-up and shut-down of a load generator, beyond its windows


@dataclass(frozen=True, slots=True)
class Peers:
    java_env: JavaEnv
    java_namesrv: JavaServer
    java_broker: JavaServer
    pyrmq_namesrv: PyrmqProcess
    pyrmq_broker: PyrmqProcess
    redis: Server

    @property
    def java_pids(self) -> tuple[int, ...]:
        return (self.java_namesrv.process.pid, self.java_broker.process.pid)

    @property
    def pyrmq_pids(self) -> tuple[int, ...]:
        return (self.pyrmq_namesrv.pid, self.pyrmq_broker.pid)

    @property
    def redis_pids(self) -> tuple[int, ...]:
        return (self.redis.child.pid,)


@dataclass(frozen=True, slots=True)
class Window:
    """CPU used over a measured window, in per cent of one core: by the server measured, and by
    the whole machine (all processes and the kernel; 100 % per core)."""

    server_cpu_pct: float
    machine_cpu_pct: float


@dataclass(frozen=True, slots=True)
class Run:
    """One load generator run: its JSON line plus the CPU used over its window."""

    result: dict[str, object]
    window: Window

    @property
    def msgs_per_s(self) -> float:
        return float(self.result["msgs_per_s"])  # type: ignore[arg-type]

    def latency(self) -> str:
        p50, p99 = self.result["p50_ms"], self.result["p99_ms"]
        if p50 is None or p99 is None:
            return ""
        return f", p50 {p50:.2f} ms, p99 {p99:.2f} ms"

    def describe(self, name: str, server: str) -> str:
        """One line: msg/s, latency, counts, and CPU. "everything else" is the machine's busy CPU
        minus server and client: kernel threads, and any other job sharing the machine (a large
        figure means the run was disturbed)."""
        errors = self.result["errors"]
        client_pct = float(self.result["client_cpu_pct"])  # type: ignore[arg-type]
        other_pct = max(
            0.0, self.window.machine_cpu_pct - self.window.server_cpu_pct - client_pct
        )
        return (
            f"{name} {self.msgs_per_s:,.0f} msg/s{self.latency()}"
            f" ({self.result['messages']:,} msgs in {self.result['seconds']} s"
            f"{f', {errors} ERRORS' if errors else ''};"
            f" CPU: {server} {self.window.server_cpu_pct:.0f} %, client {client_pct:.0f} %,"
            f" everything else {other_pct:.0f} % of {MACHINE_CPU_PCT} %)"
        )


def _compare(what: str, ours: Run, peer: Run, peer_name: str, peer_server: str) -> None:
    assert ours.result["messages"], "the pyrmq run measured nothing"
    assert peer.result["messages"], f"the {peer_name} run measured nothing"
    ratio = ours.msgs_per_s / peer.msgs_per_s
    record(f"{what}: {ours.describe('pyrmq', 'broker')}")
    record(f"    {peer.describe(peer_name, peer_server)}")
    record(f"    ratio pyrmq/{peer_name}: {ratio:.1%} of the msgs/s")


# --- servers ------------------------------------------------------------------------------------


async def _wait_for_routes(namesrv: str, topics: Sequence[str]) -> None:
    """Poll the name server until it routes every topic (no event to wait on: another process)."""
    async with asyncio.timeout(ROUTE_TIMEOUT_S):
        for topic in topics:
            while not await route_ready(namesrv, topic):  # noqa: ASYNC110
                await asyncio.sleep(0.05)


async def _create_topics(broker: str, namesrv: str) -> None:
    for topic in TOPICS:
        await create_topic(broker, topic, queues=QUEUES)
    await _wait_for_routes(namesrv, TOPICS)


def _remove_stored_data(base: Path) -> None:
    """Delete what the servers stored (several GiB per run) but keep their logs and configs."""
    for pattern in ("pyrmq/*/store", "java/*/store", "redis/appendonlydir"):
        for path in base.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peers]:
    try:
        classpath = ensure_built(NEWEST)
    except InteropSetupError as err:
        pytest.fail(f"interop set-up: {err}", pytrace=False)
    base = tmp_path_factory.mktemp("broker-bench")
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        # Torn down in reverse: the JVMs, Redis, pyrmq (its broker before its name server), and
        # last, once nothing runs any more, the gigabytes they stored.
        stack.callback(_remove_stored_data, base)
        pyrmq_env = stack.enter_context(PyrmqEnv(base / "pyrmq"))
        pyrmq_namesrv = pyrmq_env.start_namesrv()
        pyrmq_broker = pyrmq_env.start_broker(pyrmq_namesrv, extra_conf=PYRMQ_BROKER_CONF)
        redis = start_redis(base / "redis")
        stack.callback(redis.child.stop)
        env = stack.enter_context(JavaEnv(classpath, base / "java"))
        java_namesrv = env.start_java_namesrv()
        java_broker = env.start_java_broker(
            java_namesrv, extra_conf=JAVA_BROKER_CONF, heap_mb=BROKER_HEAP_MB,
            jvm_args=BROKER_JVM_ARGS,
        )
        asyncio.run(_create_topics(pyrmq_broker.addr, pyrmq_namesrv.addr))
        asyncio.run(_create_topics(java_broker.addr, java_namesrv.addr))
        peers = Peers(env, java_namesrv, java_broker, pyrmq_namesrv, pyrmq_broker, redis)
        up_s = time.monotonic() - started
        warmups = [
            _java_run(peers, "pyrmq", BATCH_TOPIC, "batch", "warmup-pyrmq",
                      {"warmup-s": 0, "duration-s": BROKER_WARMUP_S}),
            _java_run(peers, "java", BATCH_TOPIC, "batch", "warmup-java",
                      {"warmup-s": 0, "duration-s": BROKER_WARMUP_S}),
        ]
        print(f"\nbroker benchmark: servers up in {up_s:.1f} s, warm-up runs "
              f"{warmups[0].msgs_per_s:,.0f} msg/s (pyrmq) and {warmups[1].msgs_per_s:,.0f} "
              f"msg/s (RocketMQ) in {time.monotonic() - started - up_s:.1f} s")
        record(f"Broker throughput ({os.cpu_count()} cores; windows: Java clients "
               f"{JAVA_WARMUP_S} s warm-up + {WINDOW_S} s, Python {PY_WARMUP_S} s + {WINDOW_S} s, "
               f"pull {PULL_WARMUP_S} s + up to {PULL_WINDOW_S} s; unmeasured servers paused)")
        yield peers


# --- load generators ----------------------------------------------------------------------------


def _windowed(server_pid: int, wait_for: Callable[[str], object]) -> Window:
    """Wait for WINDOW_OPEN and WINDOW_CLOSED; the CPU used between them."""
    wait_for("WINDOW_OPEN")
    opened = (process_cpu_seconds(server_pid), machine_busy_seconds(), time.monotonic())
    wait_for("WINDOW_CLOSED")
    closed = (process_cpu_seconds(server_pid), machine_busy_seconds(), time.monotonic())
    wall_s = max(closed[2] - opened[2], 1e-9)
    return Window(server_cpu_pct=100 * (closed[0] - opened[0]) / wall_s,
                  machine_cpu_pct=100 * (closed[1] - opened[1]) / wall_s)


def run_java_loadgen(env: JavaEnv, namesrv: str, server_pid: int, topic: str, mode: str,
                     name: str, options: Mapping[str, int | str] | None = None) -> Run:
    """Run LoadGen to its end; raises (with its output) if it fails or outlives its windows.
    `options` are LoadGen's --name=value options, over the module's workload."""
    opts: dict[str, int | str] = {
        "producers": PRODUCERS, "shared-producer": "true", "body-bytes": BODY_BYTES,
        "batch-size": BATCH_SIZE, "warmup-s": JAVA_WARMUP_S, "duration-s": WINDOW_S,
        **(options or {}),
    }
    timeout_s = float(opts["warmup-s"]) + float(opts["duration-s"]) + RUN_EXTRA_S
    opts["timeout-s"] = int(timeout_s)
    args = [namesrv, topic, mode, *(f"--{key}={value}" for key, value in opts.items())]
    process: JavaProcess = env.start_java(
        LOADGEN_MAIN, args, name=name, heap_mb=LOADGEN_HEAP_MB, sysprops=CLIENT_SYSPROPS,
        jvm_args=LOADGEN_JVM_ARGS,
    )
    try:
        deadline = time.monotonic() + timeout_s
        window = _windowed(
            server_pid,
            lambda line: process.wait_for_stdout(
                f"(?m)^{line}$", timeout_s=max(deadline - time.monotonic(), 1.0)
            ),
        )
        code = process.wait(max(deadline - time.monotonic(), 1.0))
    finally:
        process.kill()
    assert code == 0, process.diagnostics()
    return Run(last_json_line(process.stdout(), what=name), window)


def run_python_loadgen(work_dir: Path, target: str, addr: str, server_pid: int, topic: str,
                       mode: str, *, rate: float = 0.0, producers: int = PRODUCERS,
                       window_s: float = WINDOW_S) -> Run:
    """Run benchmarks/loadgen.py in its own process to its end (`rate` > 0: open loop at that
    many msg/s), measuring `window_s` after its warm-up."""
    command = [
        sys.executable, "-m", "benchmarks.loadgen", target, addr, topic, mode,
        "--producers", str(producers), "--body-bytes", str(BODY_BYTES),
        "--batch-size", str(BATCH_SIZE), "--queues", str(QUEUES),
        "--warmup-s", str(PY_WARMUP_S), "--duration-s", str(window_s), "--rate", str(rate),
    ]
    child = Child.start(f"loadgen-{target}-{mode}", command, work_dir / f"loadgen-{target}-{mode}")
    try:
        deadline = time.monotonic() + PY_WARMUP_S + window_s + RUN_EXTRA_S
        window = _windowed(
            server_pid,
            lambda line: child.wait_for_output(
                f"(?m)^{line}$", timeout_s=max(deadline - time.monotonic(), 1.0)
            ),
        )
        code = child.wait(max(deadline - time.monotonic(), 1.0))
    finally:
        child.stop()
    assert code == 0, child.diagnostics()
    return Run(last_json_line(child.stdout(), what=child.name), window)


# --- the benchmarks -----------------------------------------------------------------------------


def _java_run(peers: Peers, broker: str, topic: str, mode: str, name: str,
              options: Mapping[str, int | str] | None = None) -> Run:
    """LoadGen against pyrmq or the Java broker ("pyrmq" | "java"), every other server paused."""
    if broker == "pyrmq":
        namesrv, pid = peers.pyrmq_namesrv.addr, peers.pyrmq_broker.pid
        others = (*peers.java_pids, *peers.redis_pids)
    else:
        namesrv, pid = peers.java_namesrv.addr, peers.java_broker.process.pid
        others = (*peers.pyrmq_pids, *peers.redis_pids)
    with paused(others):
        return run_java_loadgen(peers.java_env, namesrv, pid, topic, mode, name, options)


def test_java_client_sync_sends(peers: Peers) -> None:
    ours = _java_run(peers, "pyrmq", SYNC_TOPIC, "sync", "loadgen-sync-pyrmq")
    theirs = _java_run(peers, "java", SYNC_TOPIC, "sync", "loadgen-sync-java")
    _compare(f"Java client, sync sends of 1 KiB, {PRODUCERS} threads", ours, theirs,
             f"RocketMQ-{peers.java_env.version}", "broker")


def test_java_client_batch_sends(peers: Peers) -> None:
    ours = _java_run(peers, "pyrmq", BATCH_TOPIC, "batch", "loadgen-batch-pyrmq")
    theirs = _java_run(peers, "java", BATCH_TOPIC, "batch", "loadgen-batch-java")
    _compare(f"Java client, batches of {BATCH_SIZE} x 1 KiB, {PRODUCERS} threads", ours, theirs,
             f"RocketMQ-{peers.java_env.version}", "broker")


async def _stored(broker: str, topic: str) -> int:
    host, port = broker.rsplit(":", 1)
    async with await BrokerClient.connect(host, int(port)) as client:
        return sum([await client.max_offset(topic, queue_id) for queue_id in range(QUEUES)])


def test_java_lite_pull(peers: Peers) -> None:
    """Reads the batch topic (warm-up and batch test) from its start; the window ends early if
    the consumer reaches the end of the topic."""
    runs = []
    for broker, addr in (("pyrmq", peers.pyrmq_broker.addr), ("java", peers.java_broker.addr)):
        stored = asyncio.run(_stored(addr, BATCH_TOPIC))
        runs.append(_java_run(
            peers, broker, BATCH_TOPIC, "pull", f"loadgen-pull-{broker}",
            {"group": f"bench_pull_{broker}", "count": stored, "warmup-s": PULL_WARMUP_S,
             "duration-s": PULL_WINDOW_S},
        ))
    _compare("Java lite pull consumer, 1 KiB messages already stored", runs[0], runs[1],
             f"RocketMQ-{peers.java_env.version}", "broker")


def _python_sends(peers: Peers, tmp_path: Path, topic: str, mode: str, what: str) -> None:
    with paused((*peers.java_pids, *peers.redis_pids)):
        ours = run_python_loadgen(tmp_path, "pyrmq", peers.pyrmq_broker.addr,
                                  peers.pyrmq_broker.pid, topic, mode)
    with paused((*peers.java_pids, *peers.pyrmq_pids)):
        theirs = run_python_loadgen(tmp_path, "redis", peers.redis.addr, peers.redis.child.pid,
                                    topic, mode)
    _compare(what, ours, theirs, "Redis-7-XADD", "redis-server")


def test_python_client_sync_sends(peers: Peers, tmp_path: Path) -> None:
    _python_sends(peers, tmp_path, PY_SYNC_TOPIC, "sync",
                  f"Python client (asyncio+uvloop), sync sends of 1 KiB, {PRODUCERS} producers")


def test_python_client_batch_sends(peers: Peers, tmp_path: Path) -> None:
    _python_sends(peers, tmp_path, PY_BATCH_TOPIC, "batch",
                  f"Python client (asyncio+uvloop), batches of {BATCH_SIZE} x 1 KiB, "
                  f"{PRODUCERS} producers")
