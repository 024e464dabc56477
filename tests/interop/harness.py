"""Runs real Apache RocketMQ Java components (client, name server, broker, mqadmin) on loopback.

A `JavaEnv` runs one Apache RocketMQ release: `JavaEnv.of_version("5.5.0", base_dir)`, or
`JavaEnv(ensure_built(version), base_dir)`; the releases are `ROCKETMQ_VERSIONS` (newest first,
`NEWEST` is the reference). It owns every JVM it starts, each in its own work directory under one
base directory: `user.home`, `java.io.tmpdir`, `ROCKETMQ_HOME`, the log file, stdout and stderr
all live there, so a JVM writes nothing elsewhere. The client programs
(tests/interop/java/src/main/java/pyrmq/interop) print one line per event, parsed by
tests/interop/output.py; this module re-exports that module's and tests/interop/network.py's
names, so tests import everything from here.

Invariants:
- Every JVM is killed (SIGKILL to its process group) by `JavaEnv.close()`, which the fixtures call
  at teardown whatever the outcome; a JVM also dies with the process that started it
  (PR_SET_PDEATHSIG), and the client programs halt themselves after their timeout (watchdog).
- Every wait has a deadline and fails with the process's own output and log tail.
- Ports come from binding to port 0; a broker's block (listenPort - 2 .. listenPort + 1: fast
  remoting, listen, HA) is checked free as a whole.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import subprocess
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from tests.interop.build import (
    NEWEST,
    ROCKETMQ_VERSIONS,
    Classpath,
    InteropSetupError,
    ensure_built,
)
from tests.interop.network import (
    NetworkError,
    free_broker_port,
    free_port,
    namesrv_cluster_info,
    port_accepts,
)
from tests.interop.output import (
    ConsumeResult,
    ProduceResult,
    Received,
    Rejected,
    Sent,
    expected_body,
    expected_body_crc32,
    keys_of,
    parse_consume_output,
    parse_produce_output,
)
from tests.support.processes import (
    die_with_parent,
    kill,
    nice_child,
    set_autogroup_nice,
    tail,
    terminate,
    wait_for_match,
)

__all__ = [
    "ADMIN_MAIN",
    "BROKER_MAIN",
    "BROKER_STARTUP_MAIN",
    "LITE_PULL_MAIN",
    "MQADMIN_MAIN",
    "NAMESRV_MAIN",
    "NEWEST",
    "PRODUCE_MAIN",
    "PUSH_CONSUME_MAIN",
    "ROCKETMQ_VERSIONS",
    "Classpath",
    "ConsumeResult",
    "InteropError",
    "InteropSetupError",
    "JavaEnv",
    "JavaProcess",
    "JavaServer",
    "NetworkError",
    "PortTakenError",
    "ProduceResult",
    "Received",
    "Rejected",
    "Sent",
    "ensure_built",
    "expected_body",
    "expected_body_crc32",
    "free_broker_port",
    "free_port",
    "keys_of",
    "namesrv_cluster_info",
    "parse_consume_output",
    "parse_produce_output",
]

NAMESRV_MAIN: Final = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_STARTUP_MAIN: Final = "org.apache.rocketmq.broker.BrokerStartup"
# BrokerStartup plus one prompt registration with the name server (see Broker.java for why).
BROKER_MAIN: Final = "pyrmq.interop.Broker"
MQADMIN_MAIN: Final = "org.apache.rocketmq.tools.command.MQAdminStartup"
# MQAdminStartup exits 0 even when its command failed; Admin runs the same commands and does not.
ADMIN_MAIN: Final = "pyrmq.interop.Admin"
PRODUCE_MAIN: Final = "pyrmq.interop.Produce"
PUSH_CONSUME_MAIN: Final = "pyrmq.interop.PushConsume"
LITE_PULL_MAIN: Final = "pyrmq.interop.LitePull"

ProduceMode = Literal["sync", "async", "oneway", "batch"]

# Short-lived JVMs on a shared 2-core machine: C1 only and the serial collector start fastest;
# no hsperfdata file in /tmp.
JVM_FLAGS: Final = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData")
CLIENT_HEAP_MB: Final = 128
NAMESRV_HEAP_MB: Final = 128
BROKER_HEAP_MB: Final = 256
COMMITLOG_FILE_BYTES: Final = 64 * 1024 * 1024
# Clients rebalance every second instead of every 20 s, so a consumer starts reading at once.
CLIENT_SYSPROPS: Final = {"rocketmq.client.rebalance.waitInterval": "1000"}

NAMESRV_START_TIMEOUT_S: Final = 60.0
BROKER_START_TIMEOUT_S: Final = 90.0
POLL_INTERVAL_S: Final = 0.05
OUTPUT_TAIL_LINES: Final = 30


class InteropError(Exception):
    """A Java component did not start, died, timed out or printed something unexpected."""


# --- processes ---------------------------------------------------------------------------------


@dataclass(eq=False)
class JavaProcess:
    """One JVM started by a JavaEnv, with its stdout, stderr and log file in work_dir."""

    name: str
    main_class: str
    args: tuple[str, ...]
    work_dir: Path
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def stdout_path(self) -> Path:
        return self.work_dir / "stdout.txt"

    @property
    def stderr_path(self) -> Path:
        return self.work_dir / "stderr.txt"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "java.log"

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait(self, timeout_s: float) -> int:
        """The exit code; raises InteropError (with the output) if still running at timeout_s."""
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            raise InteropError(
                f"{self.name} still running after {timeout_s} s\n{self.diagnostics()}"
            ) from err

    def wait_for_stdout(self, pattern: str, *, timeout_s: float) -> re.Match[str]:
        """The first match of `pattern` in stdout; raises if the JVM exits or time runs out."""
        return wait_for_match(
            pattern, read=self.stdout, alive=self.alive,
            exit_code=lambda: self.popen.returncode, name=self.name,
            diagnostics=self.diagnostics, timeout_s=timeout_s, error=InteropError,
        )

    def kill(self) -> None:
        """SIGKILL to the JVM's process group, then reap it. Idempotent."""
        kill(self.popen, group=True, name=self.name, error=InteropError)

    def terminate(self, *, timeout_s: float = 30.0) -> int:
        """SIGTERM (shutdown hooks run: a graceful broker stop), then SIGKILL after timeout_s."""
        return terminate(self.popen, timeout_s=timeout_s, group=True, name=self.name,
                         error=InteropError)

    def diagnostics(self) -> str:
        """The tails of stdout, stderr and the log file, for failure messages."""
        return (
            f"--- {self.name} ({self.main_class}) work_dir={self.work_dir}\n"
            f"--- stdout:\n{tail(self.stdout_path, OUTPUT_TAIL_LINES)}\n"
            f"--- stderr:\n{tail(self.stderr_path, OUTPUT_TAIL_LINES)}\n"
            f"--- log:\n{tail(self.log_path, OUTPUT_TAIL_LINES)}"
        )


@dataclass(frozen=True, slots=True)
class JavaServer:
    """A running name server or broker: its remoting address and its process."""

    addr: str
    process: JavaProcess
    config_path: Path
    store_dir: Path | None = None

    def __str__(self) -> str:
        return self.addr


_LIVE_ENVS: weakref.WeakSet[JavaEnv] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for env in list(_LIVE_ENVS):
        env.close()


class JavaEnv:
    """Starts and owns the JVMs of one RocketMQ release (`version`, from the classpath);
    `close()` kills every one of them. Use as a context manager."""

    def __init__(self, classpath: Classpath, base_dir: Path) -> None:
        self.classpath = classpath
        self.base_dir = base_dir
        self._processes: list[JavaProcess] = []
        self._names: Counter[str] = Counter()
        base_dir.mkdir(parents=True, exist_ok=True)
        _LIVE_ENVS.add(self)

    @classmethod
    def of_version(cls, version: str, base_dir: Path) -> JavaEnv:
        """A JavaEnv running RocketMQ `version` (one of ROCKETMQ_VERSIONS; built if needed)."""
        return cls(ensure_built(version), base_dir)

    @property
    def version(self) -> str:
        """The RocketMQ release this env runs, e.g. "5.5.0"."""
        return self.classpath.version

    def __enter__(self) -> JavaEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def processes(self) -> tuple[JavaProcess, ...]:
        return tuple(self._processes)

    def close(self) -> None:
        """SIGKILL every JVM this env started (running or not) and reap it."""
        errors = []
        for process in self._processes:
            try:
                process.kill()
            except InteropError as err:
                errors.append(str(err))
        _LIVE_ENVS.discard(self)
        if errors:
            raise InteropError("; ".join(errors))

    # -- generic ------------------------------------------------------------------------------

    def _work_dir(self, name: str) -> tuple[str, Path]:
        self._names[name] += 1
        unique = name if self._names[name] == 1 else f"{name}-{self._names[name]}"
        work_dir = self.base_dir / unique
        for sub in ("home", "tmp", "logs"):
            (work_dir / sub).mkdir(parents=True, exist_ok=True)
        return unique, work_dir

    def _command(
        self,
        main_class: str,
        args: Sequence[str],
        *,
        work_dir: Path,
        heap_mb: int,
        sysprops: Mapping[str, str],
        jvm_args: Sequence[str],
    ) -> list[str]:
        home = work_dir / "home"
        props = {
            "user.home": str(home),
            "java.io.tmpdir": str(work_dir / "tmp"),
            "rocketmq.home.dir": str(home),
            "rocketmq.client.logRoot": str(work_dir / "logs"),
            "rocketmq.log.root": str(work_dir / "logs"),
            "rmq.logback.configurationFile": str(self.classpath.logback_config),
            "pyrmq.interop.logFile": str(work_dir / "java.log"),
            "com.rocketmq.sendMessageWithVIPChannel": "false",
            **sysprops,
        }
        return [
            "java",
            *JVM_FLAGS,
            f"-Xms{heap_mb}m",
            f"-Xmx{heap_mb}m",
            f"-XX:ErrorFile={work_dir / 'hs_err_%p.log'}",
            *(f"-D{key}={value}" for key, value in props.items()),
            *jvm_args,
            main_class,
            *args,
        ]

    def _environ(self, work_dir: Path) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if k not in ("NAMESRV_ADDR", "JAVA_TOOL_OPTIONS")
        }
        # On the environment rather than -cp: ps and error messages stay readable.
        env["CLASSPATH"] = str(self.classpath)
        env["ROCKETMQ_HOME"] = str(work_dir / "home")
        return env

    def start_java(
        self,
        main_class: str,
        args: Sequence[str] = (),
        *,
        name: str | None = None,
        heap_mb: int = CLIENT_HEAP_MB,
        sysprops: Mapping[str, str] | None = None,
        jvm_args: Sequence[str] = (),
        nice: int = 0,
    ) -> JavaProcess:
        """Start a JVM in the background; its stdout, stderr and log go to files in its work_dir.

        `name` (default: the class's simple name) names the work dir, made unique with -2, -3...
        `nice` above 0 lowers its CPU weight, its threads' and its session's
        (`set_autogroup_nice`): a load generator that must not compete as an equal with the
        server it measures.
        """
        unique, work_dir = self._work_dir(name or main_class.rsplit(".", 1)[-1].lower())
        return self._start(
            main_class,
            args,
            unique,
            work_dir,
            heap_mb=heap_mb,
            sysprops=sysprops or {},
            jvm_args=jvm_args,
            nice=nice,
        )

    def _start(
        self,
        main_class: str,
        args: Sequence[str],
        unique: str,
        work_dir: Path,
        *,
        heap_mb: int,
        sysprops: Mapping[str, str],
        jvm_args: Sequence[str],
        nice: int = 0,
    ) -> JavaProcess:
        command = self._command(
            main_class,
            args,
            work_dir=work_dir,
            heap_mb=heap_mb,
            sysprops=sysprops,
            jvm_args=jvm_args,
        )
        (work_dir / "command.txt").write_text(" ".join(command) + "\n")
        with (
            (work_dir / "stdout.txt").open("wb") as stdout,
            (work_dir / "stderr.txt").open("wb") as stderr,
        ):
            popen = subprocess.Popen(
                command,
                cwd=work_dir,
                env=self._environ(work_dir),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                preexec_fn=nice_child(nice) if nice else die_with_parent,  # noqa: PLW1509 - no locks
            )
        if nice:
            set_autogroup_nice(popen.pid, nice)
        process = JavaProcess(unique, main_class, tuple(args), work_dir, popen)
        self._processes.append(process)
        return process

    def run_java(
        self,
        main_class: str,
        args: Sequence[str] = (),
        *,
        timeout_s: float,
        name: str | None = None,
        heap_mb: int = CLIENT_HEAP_MB,
        sysprops: Mapping[str, str] | None = None,
        jvm_args: Sequence[str] = (),
    ) -> subprocess.CompletedProcess[str]:
        """Run a JVM to its end; raises InteropError (and kills it) if it outlives timeout_s."""
        process = self.start_java(
            main_class, args, name=name, heap_mb=heap_mb, sysprops=sysprops, jvm_args=jvm_args
        )
        try:
            returncode = process.wait(timeout_s)
        finally:
            process.kill()
        return subprocess.CompletedProcess(
            [main_class, *args], returncode, process.stdout(), process.stderr()
        )

    # -- servers -------------------------------------------------------------------------------

    def start_java_namesrv(
        self,
        port: int | None = None,
        *,
        extra_conf: Mapping[str, str | int | bool] | None = None,
        name: str = "namesrv",
        timeout_s: float = NAMESRV_START_TIMEOUT_S,
    ) -> JavaServer:
        """Start org.apache.rocketmq.namesrv.NamesrvStartup on 127.0.0.1:port.

        Returns once it printed its boot line and accepts connections. Without a port it takes a
        free one, and another if that was taken before the JVM bound it.
        """

        def start(port: int) -> JavaServer:
            unique, work_dir = self._work_dir(name)
            config = {"listenPort": port, "bindAddress": "127.0.0.1", **(extra_conf or {})}
            config_path = _write_properties(work_dir / "namesrv.properties", config)
            process = self._start(
                NAMESRV_MAIN,
                ["-c", str(config_path)],
                unique,
                work_dir,
                heap_mb=NAMESRV_HEAP_MB,
                sysprops={},
                jvm_args=(),
            )
            addr = f"127.0.0.1:{port}"
            with _port_taken_check(process):
                process.wait_for_stdout(r"The Name Server boot success", timeout_s=timeout_s)
                _wait_until(lambda: port_accepts(addr), process, timeout_s, f"{addr} accepts")
            return JavaServer(addr, process, config_path)

        return _start_on_free_port(start, port, free_port)

    def start_java_broker(
        self,
        namesrv: str | JavaServer,
        listen_port: int | None = None,
        store_dir: Path | None = None,
        extra_conf: Mapping[str, str | int | bool] | None = None,
        *,
        broker_name: str = "broker-a",
        cluster_name: str = "DefaultCluster",
        name: str | None = None,
        timeout_s: float = BROKER_START_TIMEOUT_S,
        heap_mb: int = BROKER_HEAP_MB,
        jvm_args: Sequence[str] = (),
    ) -> JavaServer:
        """Start org.apache.rocketmq.broker.BrokerStartup -c broker.conf (an ASYNC_MASTER).

        The main class is pyrmq.interop.Broker, which runs BrokerStartup and then registers once
        more as soon as the name server is reachable (Broker.java says why). Defaults: 127.0.0.1,
        a free port block (listenPort - 2 fast remoting, listenPort, listenPort + 1 HA), the store
        in its work dir, 64 MiB commitlog files, autoCreateTopicEnable=true; extra_conf adds or
        overrides broker.conf keys. `heap_mb` and `jvm_args` (added after JVM_FLAGS, so they can
        override them) are for benchmarks. Returns once the name server lists the broker's address.
        """
        namesrv_addr = str(namesrv)

        def start(listen_port: int) -> JavaServer:
            unique, work_dir = self._work_dir(name or broker_name)
            store = store_dir or work_dir / "store"
            config: dict[str, str | int | bool] = {
                "brokerClusterName": cluster_name,
                "brokerName": broker_name,
                "brokerId": 0,
                "brokerRole": "ASYNC_MASTER",
                "flushDiskType": "ASYNC_FLUSH",
                "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1",
                "listenPort": listen_port,
                "haListenPort": listen_port + 1,
                "namesrvAddr": namesrv_addr,
                "storePathRootDir": str(store),
                "storePathCommitLog": str(store / "commitlog"),
                "mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES,
                "autoCreateTopicEnable": True,
                "autoCreateSubscriptionGroup": True,
                # A shared disk that is 75-90 % full must not make writes fail.
                "diskMaxUsedSpaceRatio": 95,
                **(extra_conf or {}),
            }
            config_path = _write_properties(work_dir / "broker.conf", config)
            process = self._start(
                BROKER_MAIN,
                ["-c", str(config_path)],
                unique,
                work_dir,
                heap_mb=heap_mb,
                sysprops={},
                jvm_args=jvm_args,
            )
            addr = f"{config['brokerIP1']}:{config['listenPort']}"
            with _port_taken_check(process):
                process.wait_for_stdout(r"The broker\[.*\] boot success", timeout_s=timeout_s)
                _wait_until(
                    lambda: f'"{addr}"' in namesrv_cluster_info(namesrv_addr),
                    process,
                    timeout_s,
                    f"name server {namesrv_addr} lists broker {addr}",
                )
            return JavaServer(addr, process, config_path, store)

        return _start_on_free_port(start, listen_port, free_broker_port)

    # -- clients -------------------------------------------------------------------------------

    def produce(
        self,
        namesrv: str | JavaServer,
        topic: str,
        count: int,
        mode: ProduceMode,
        tag: str = "TagA",
        *,
        key_prefix: str | None = None,
        body_bytes: int = 128,
        options: Mapping[str, str | int] | None = None,
        timeout_s: float = 60.0,
        check: bool = True,
    ) -> ProduceResult:
        """Run Produce; with check, raise InteropError unless it exited 0 with `count` lines."""
        opts: dict[str, str | int] = {"body-bytes": body_bytes, "timeout-s": int(timeout_s)}
        if key_prefix is not None:
            opts["key-prefix"] = key_prefix
        opts.update(options or {})
        args = [str(namesrv), topic, str(count), mode, tag, *_options(opts)]
        done = self.run_java(
            PRODUCE_MAIN,
            args,
            timeout_s=timeout_s + 30,
            name=f"produce-{mode}",
            sysprops=CLIENT_SYSPROPS,
        )
        result = ProduceResult(
            parse_produce_output(done.stdout), done.returncode, done.stdout, done.stderr
        )
        if check and (done.returncode != 0 or len(result.sent) != count):
            raise InteropError(
                f"Produce {mode} x{count} to {topic}: exit {done.returncode}, "
                f"{len(result.sent)} lines\nstdout:\n{_last_lines(done.stdout)}\n"
                f"stderr:\n{_last_lines(done.stderr)}"
            )
        return result

    def start_push_consume(
        self,
        namesrv: str | JavaServer,
        group: str,
        topic: str,
        tag_expression: str,
        expected: int,
        *,
        fail_every: int = 0,
        linger_ms: int = 0,
        options: Mapping[str, str | int] | None = None,
        timeout_s: float = 60.0,
    ) -> JavaProcess:
        """Start PushConsume in the background (e.g. before producing); see push_consume."""
        opts: dict[str, str | int] = {
            "fail-every": fail_every,
            "linger-ms": linger_ms,
            "timeout-s": int(timeout_s),
            **(options or {}),
        }
        args = [str(namesrv), group, topic, tag_expression, str(expected), *_options(opts)]
        return self.start_java(
            PUSH_CONSUME_MAIN, args, name=f"push-{group}", sysprops=CLIENT_SYSPROPS
        )

    def push_consume(
        self,
        namesrv: str | JavaServer,
        group: str,
        topic: str,
        tag_expression: str,
        expected: int,
        *,
        fail_every: int = 0,
        linger_ms: int = 0,
        options: Mapping[str, str | int] | None = None,
        timeout_s: float = 60.0,
        check: bool = True,
    ) -> ConsumeResult:
        """Run PushConsume until `expected` distinct keys were consumed (check: or raise)."""
        process = self.start_push_consume(
            namesrv,
            group,
            topic,
            tag_expression,
            expected,
            fail_every=fail_every,
            linger_ms=linger_ms,
            options=options,
            timeout_s=timeout_s,
        )
        return self.finish_consume(process, timeout_s=timeout_s + linger_ms / 1000, check=check)

    def lite_pull(
        self,
        namesrv: str | JavaServer,
        group: str,
        topic: str,
        tag_expression: str,
        expected: int,
        *,
        linger_ms: int = 0,
        options: Mapping[str, str | int] | None = None,
        timeout_s: float = 60.0,
        check: bool = True,
    ) -> ConsumeResult:
        """Run LitePull until `expected` distinct keys were received (check: or raise)."""
        opts: dict[str, str | int] = {
            "linger-ms": linger_ms,
            "timeout-s": int(timeout_s),
            **(options or {}),
        }
        args = [str(namesrv), group, topic, tag_expression, str(expected), *_options(opts)]
        process = self.start_java(
            LITE_PULL_MAIN, args, name=f"litepull-{group}", sysprops=CLIENT_SYSPROPS
        )
        return self.finish_consume(process, timeout_s=timeout_s + linger_ms / 1000, check=check)

    def finish_consume(
        self, process: JavaProcess, *, timeout_s: float, check: bool = True
    ) -> ConsumeResult:
        """Wait for a consumer program to exit and parse its lines (check: raise unless DONE)."""
        try:
            returncode = process.wait(timeout_s + 30)  # its own watchdog fires first
        finally:
            process.kill()
        result = parse_consume_output(
            process.stdout(), returncode=returncode, stderr=process.stderr()
        )
        if check and (returncode != 0 or not result.done):
            raise InteropError(
                f"{process.name} exited {returncode} with {len(result.key_counts())} distinct "
                f"keys\n{process.diagnostics()}"
            )
        return result

    def mqadmin(
        self,
        namesrv: str | JavaServer,
        subcommand: str,
        *args: str,
        timeout_s: float = 60.0,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run `mqadmin <subcommand> -n <namesrv> <args>` (via Admin: a failure exits 1)."""
        done = self.run_java(
            ADMIN_MAIN,
            [subcommand, "-n", str(namesrv), *args],
            timeout_s=timeout_s,
            name=f"mqadmin-{subcommand}",
        )
        if check and done.returncode != 0:
            raise InteropError(
                f"mqadmin {subcommand} {' '.join(args)} exited {done.returncode}\n"
                f"stdout:\n{_last_lines(done.stdout)}\nstderr:\n{_last_lines(done.stderr)}"
            )
        return done


class PortTakenError(InteropError):
    """A server JVM could not bind its port: another process took it after free_port()."""


START_ATTEMPTS: Final = 3


def _start_on_free_port(
    start: Callable[[int], JavaServer], port: int | None, pick: Callable[[], int]
) -> JavaServer:
    """start(port), or with ports from pick() until one was not taken meanwhile (3 tries)."""
    if port is not None:
        return start(port)
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return start(pick())
        except PortTakenError:
            if attempt == START_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _port_taken_check(process: JavaProcess) -> Iterator[None]:
    """Turn a start-up failure caused by a port already in use into PortTakenError."""
    try:
        yield
    except InteropError as err:
        process.kill()
        output = process.stdout() + process.stderr() + tail(process.log_path, 200)
        if "Address already in use" in output:
            raise PortTakenError(str(err)) from err
        raise


def _options(options: Mapping[str, str | int]) -> Iterator[str]:
    return (f"--{key}={value}" for key, value in options.items())


def _last_lines(text: str) -> str:
    return "\n".join(text.splitlines()[-OUTPUT_TAIL_LINES:]) or "(empty)"


def _write_properties(path: Path, config: Mapping[str, str | int | bool]) -> Path:
    """A Java .properties file; booleans as true/false. Values must not need escaping."""
    lines = []
    for key, value in config.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if any(c in text for c in "\\\n"):
            raise ValueError(f"{path.name}: {key}={text!r} would need escaping")
        lines.append(f"{key}={text}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _wait_until(
    predicate: Callable[[], bool], process: JavaProcess, timeout_s: float, what: str
) -> None:
    """Poll predicate until true; raise with the process's output if it dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    last_error: str | None = None
    while True:
        try:
            if predicate():
                return
        except (OSError, NetworkError, ValueError) as err:
            last_error = f"{type(err).__name__}: {err}"
        if not process.alive():
            raise InteropError(
                f"{process.name} exited with {process.popen.returncode} while waiting until "
                f"{what}\n{process.diagnostics()}"
            )
        if time.monotonic() > deadline:
            raise InteropError(
                f"timed out after {timeout_s} s waiting until {what} (last error: {last_error})\n"
                f"{process.diagnostics()}"
            )
        time.sleep(POLL_INTERVAL_S)
