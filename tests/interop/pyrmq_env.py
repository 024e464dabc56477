"""Runs pyrmq's own name server (`python -m controller`) and broker (`python -m broker`) as real
subprocesses on loopback, for the interop tests that point the Java programs at pyrmq.

A `PyrmqEnv` owns every process it starts, each in its own work directory under one base
directory: the generated `controller.conf` / `broker.conf`, the store, and `pyrmq.log` (the
process's stdout and stderr, where its logging goes). Failure messages quote the log tails;
`conftest.py` also attaches every live env's logs to the report of a failed test.

Invariants:
- `PyrmqEnv.close()` stops every process: SIGTERM, then SIGKILL after a deadline; a process also
  dies with the thread that started it (PR_SET_PDEATHSIG), so a killed pytest leaves none behind.
- Every wait has a deadline and fails with the process's log tail, never a bare sleep.
- Ports come from binding to port 0; a start that lost its port to another process meanwhile is
  retried on a new one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.interop.network import (
    NetworkError,
    free_broker_port,
    free_port,
    namesrv_cluster_info,
    port_accepts,
)
from tests.support.processes import die_with_parent, kill, tail, terminate

__all__ = [
    "BROKER_START_TIMEOUT_S",
    "PyrmqEnv",
    "PyrmqError",
    "PyrmqProcess",
    "live_envs",
    "wait_until",
]

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
NAMESRV_START_TIMEOUT_S: Final = 20.0
BROKER_START_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 15.0
POLL_INTERVAL_S: Final = 0.05
LOG_TAIL_LINES: Final = 40
START_ATTEMPTS: Final = 3
# 1 MiB commitlog files: a test's few hundred messages still roll over segments.
COMMITLOG_FILE_BYTES: Final = 1024 * 1024
CONSUME_QUEUE_FILE_BYTES: Final = 1000 * 20
# Matches both asyncio's bind error ("address already in use") and the broker's one-line
# PortInUseError ("cannot listen on ...: already in use"), lowercased.
_ADDRESS_IN_USE: Final = "already in use"



class PyrmqError(Exception):
    """A pyrmq process did not start, died, or did not stop in time."""


class _PortTakenError(PyrmqError):
    """The process could not bind its port: another process took it after free_port()."""




def _answers_cluster_info(namesrv: str) -> bool:
    """Whether the name server answers GET_BROKER_CLUSTER_INFO (raises NetworkError/OSError
    while it does not)."""
    namesrv_cluster_info(namesrv, timeout_s=1.0)
    return True


def _write_properties(path: Path, config: Mapping[str, str | int | bool]) -> Path:
    lines = []
    for key, value in config.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if any(c in text for c in "\\\n"):
            raise ValueError(f"{path.name}: {key}={text!r} would need escaping")
        lines.append(f"{key}={text}")
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass(eq=False)
class PyrmqProcess:
    """One pyrmq process: `addr` is where it serves remoting ("127.0.0.1:port")."""

    name: str
    addr: str
    work_dir: Path
    config_path: Path
    popen: subprocess.Popen[bytes]
    store_dir: Path | None = None

    def __str__(self) -> str:
        return self.addr

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def port(self) -> int:
        return int(self.addr.rsplit(":", 1)[1])

    @property
    def log_path(self) -> Path:
        return self.work_dir / "pyrmq.log"

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def diagnostics(self) -> str:
        """The process's state and log tail, for failure messages."""
        state = "running" if self.alive() else f"exited {self.popen.returncode}"
        return (
            f"--- pyrmq {self.name} pid={self.pid} {state} addr={self.addr} "
            f"work_dir={self.work_dir}\n{tail(self.log_path, LOG_TAIL_LINES)}"
        )

    def terminate(self, *, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM (a graceful stop), then SIGKILL if it still runs after timeout_s.

        Returns the exit status (negative: killed by that signal). Idempotent.
        """
        return terminate(self.popen, timeout_s=timeout_s, group=False, name=self.name,
                         error=PyrmqError)

    def kill(self) -> None:
        """SIGKILL, then reap. Idempotent."""
        kill(self.popen, group=False, name=self.name, error=PyrmqError)


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout_s: float,
    what: str,
    process: PyrmqProcess | None = None,
) -> None:
    """Poll `predicate` until true; raise PyrmqError (with the log tail) at the deadline, or at
    once if `process` exits. OSError, NetworkError and ValueError from `predicate` count as
    "not yet" and the last one is quoted."""
    deadline = time.monotonic() + timeout_s
    last_error: str | None = None
    while True:
        try:
            if predicate():
                return
        except (OSError, NetworkError, ValueError) as err:
            last_error = f"{type(err).__name__}: {err}"
        if process is not None and not process.alive():
            raise PyrmqError(
                f"{process.name} exited with {process.popen.returncode} while waiting until "
                f"{what}\n{process.diagnostics()}"
            )
        if time.monotonic() > deadline:
            diagnostics = "" if process is None else f"\n{process.diagnostics()}"
            raise PyrmqError(
                f"timed out after {timeout_s} s waiting until {what} "
                f"(last error: {last_error}){diagnostics}"
            )
        time.sleep(POLL_INTERVAL_S)


_LIVE_ENVS: weakref.WeakSet[PyrmqEnv] = weakref.WeakSet()


def live_envs() -> tuple[PyrmqEnv, ...]:
    """Every PyrmqEnv not closed yet (conftest attaches their logs to a failed test's report)."""
    return tuple(_LIVE_ENVS)


class PyrmqEnv:
    """Starts and owns pyrmq processes; `close()` stops every one. Use as a context manager."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self._processes: list[PyrmqProcess] = []
        self._names: Counter[str] = Counter()
        base_dir.mkdir(parents=True, exist_ok=True)
        _LIVE_ENVS.add(self)

    def __enter__(self) -> PyrmqEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def processes(self) -> tuple[PyrmqProcess, ...]:
        return tuple(self._processes)

    def close(self) -> None:
        """Stop every process this env started (SIGTERM, then SIGKILL after a deadline)."""
        errors = []
        for process in reversed(self._processes):  # brokers before their name server
            try:
                process.terminate()
            except PyrmqError as err:
                errors.append(str(err))
        _LIVE_ENVS.discard(self)
        if errors:
            raise PyrmqError("; ".join(errors))

    def stop_all(self) -> dict[str, int]:
        """Stop every process (SIGTERM, SIGKILL after a deadline), brokers before name servers;
        returns each one's exit status by name (0: a clean stop)."""
        return {p.name: p.terminate() for p in reversed(self._processes)}

    def diagnostics(self) -> str:
        """Every process's state and log tail."""
        return "\n".join(p.diagnostics() for p in self._processes) or "(no pyrmq process)"

    # -- starting ----------------------------------------------------------------------------

    def _work_dir(self, name: str) -> tuple[str, Path]:
        self._names[name] += 1
        unique = name if self._names[name] == 1 else f"{name}-{self._names[name]}"
        work_dir = self.base_dir / unique
        work_dir.mkdir(parents=True, exist_ok=True)
        return unique, work_dir

    def _spawn(
        self, module: str, config_path: Path, name: str, work_dir: Path, addr: str,
        store_dir: Path | None = None,
    ) -> PyrmqProcess:
        command = [sys.executable, "-m", module, "-c", str(config_path)]
        (work_dir / "command.txt").write_text(" ".join(command) + "\n")
        env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
        env["PYTHONPATH"] = str(REPO_ROOT)
        env["HOME"] = str(work_dir)  # the controller's default store path lives under it
        with (work_dir / "pyrmq.log").open("ab") as log:
            popen = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # A session (so a scheduler autogroup) of its own, as each JVM of the interop
                # harness and a broker run as a service: sharing the pytest process's gave twice
                # the latency benchmark's event-loop stalls over 10 ms (4 paired runs, 2026-11-27).
                start_new_session=True,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl, no locks taken
            )
        process = PyrmqProcess(name, addr, work_dir, config_path, popen, store_dir)
        self._processes.append(process)
        return process

    def start_namesrv(
        self,
        *,
        name: str = "namesrv",
        listen_port: int | None = None,
        store_dir: Path | None = None,
        extra_conf: Mapping[str, str | int | bool] | None = None,
    ) -> PyrmqProcess:
        """Start `python -m controller` (pyrmq's name server and embedded controller) on a free
        127.0.0.1 port (or `listen_port`, and the event log in `store_dir`, to restart one).

        Returns once it answers GET_BROKER_CLUSTER_INFO.
        """

        def start(port: int) -> PyrmqProcess:
            unique, work_dir = self._work_dir(name)
            config_path = _write_properties(
                work_dir / "controller.conf",
                {
                    "listenPort": port,
                    "bindAddress": "127.0.0.1",
                    "controllerStorePath": str(store_dir or work_dir / "controller-store"),
                    **(extra_conf or {}),
                },
            )
            process = self._spawn("controller", config_path, unique, work_dir, f"127.0.0.1:{port}")
            with self._port_taken_check(process):
                wait_until(
                    lambda: _answers_cluster_info(process.addr),
                    timeout_s=NAMESRV_START_TIMEOUT_S,
                    what=f"name server {process.addr} answers GET_BROKER_CLUSTER_INFO",
                    process=process,
                )
            return process

        return self._start_on_free_port(start, listen_port)

    def start_broker(
        self,
        namesrv: object,
        *,
        listen_port: int | None = None,
        store_dir: Path | None = None,
        extra_conf: Mapping[str, str | int | bool] | None = None,
        broker_name: str = "broker-a",
        cluster_name: str = "DefaultCluster",
        name: str | None = None,
        timeout_s: float = BROKER_START_TIMEOUT_S,
    ) -> PyrmqProcess:
        """Start `python -m broker -c broker.conf` (a standalone master) on 127.0.0.1.

        `namesrv` (a "host:port" string or anything whose str() is one: a PyrmqProcess, a
        JavaServer) is `namesrvAddr`; None runs without one. Defaults: a free listenPort (or
        `listen_port`, to restart on the same address), the store in its work dir (or
        `store_dir`, to restart on the same store), 1 MiB commitlog files,
        autoCreateTopicEnable=true, metrics off; `extra_conf` adds or overrides keys. Returns
        once the broker logged its start and, with a name server, once the name server lists
        its address.
        """
        namesrv_addr = None if namesrv is None else str(namesrv)

        def start(port: int) -> PyrmqProcess:
            unique, work_dir = self._work_dir(name or broker_name)
            store = store_dir or work_dir / "store"
            config: dict[str, str | int | bool] = {
                "brokerClusterName": cluster_name,
                "brokerName": broker_name,
                "brokerId": 0,
                "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1",
                "listenPort": port,
                "storePathRootDir": str(store),
                "mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES,
                "mappedFileSizeConsumeQueue": CONSUME_QUEUE_FILE_BYTES,
                "autoCreateTopicEnable": True,
                "autoCreateSubscriptionGroup": True,
                "metricsExporterType": "DISABLE",
                # A shared disk that is 75-90 % full must not make writes fail.
                "diskMaxUsedSpaceRatio": 95,
                "diskSpaceWarningLevelRatio": 98,
                **({"namesrvAddr": namesrv_addr} if namesrv_addr else {}),
                **(extra_conf or {}),
            }
            config_path = _write_properties(work_dir / "broker.conf", config)
            addr = f"127.0.0.1:{port}"
            process = self._spawn("broker", config_path, unique, work_dir, addr, store)
            with self._port_taken_check(process):
                wait_until(
                    lambda: "broker started" in process.log() and port_accepts(addr),
                    timeout_s=timeout_s,
                    what=f"broker {addr} started",
                    process=process,
                )
                if namesrv_addr is not None:
                    wait_until(
                        lambda: f'"{addr}"' in namesrv_cluster_info(namesrv_addr, timeout_s=1.0),
                        timeout_s=timeout_s,
                        what=f"name server {namesrv_addr} lists broker {addr}",
                        process=process,
                    )
            return process

        # A broker also listens on listenPort - 2 (VIP channel) and listenPort + 1 (HA).
        return self._start_on_free_port(start, listen_port, pick=free_broker_port)

    @staticmethod
    @contextlib.contextmanager
    def _port_taken_check(process: PyrmqProcess) -> Iterator[None]:
        """A start-up failure caused by a port already in use becomes _PortTakenError; any
        start-up failure kills the process."""
        try:
            yield
        except PyrmqError as err:
            process.kill()
            if _ADDRESS_IN_USE in process.log().lower():
                raise _PortTakenError(str(err)) from err
            raise

    @staticmethod
    def _start_on_free_port(
        start: Callable[[int], PyrmqProcess], port: int | None,
        *, pick: Callable[[], int] = free_port,
    ) -> PyrmqProcess:
        if port is not None:
            return start(port)
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return start(pick())
            except _PortTakenError:
                if attempt == START_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")
