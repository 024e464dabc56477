"""`pyrmq-quickstart`: an embedded controller and a three-broker group on loopback.

    pyrmq-quickstart [--data-dir ./run/quickstart] [--namesrv-port 9876]

Starts one `pyrmq-controller` (the name server and the embedded controller on one port) and three
`pyrmq-broker`s of one broker set (`broker-a`, controller mode, allAckInSyncStateSet=true), each a
child process with its own listen, HA and metrics ports (free ports, remembered in
`<data-dir>/ports.properties` and reused on the next start when still free, so a restart keeps
the addresses the controller knows). Stores, generated configs and logs live under
`<data-dir>/<name>/`. Progress is printed while it starts (controller up, each broker registered
with the controller, master elected, SyncStateSet of 3, master routed by the name server), then a
line beginning `pyrmq-quickstart: ready`.

Once ready, a child that exits (say a master killed with kill -9, to watch a failover) is started
again on its config and store, and every change of the controller's master, masterEpoch and
SyncStateSet is printed (`controller: master b2 ...`). SIGINT (Ctrl-C) or SIGTERM stops the
brokers (SIGTERM: their graceful stop), then the controller; a child still running after
STOP_TIMEOUT_S is killed. Children run in their own session (a
terminal's Ctrl-C reaches only this process, which stops them in order) and die with it if it is
killed (PR_SET_PDEATHSIG). Exit status 0 after a requested stop; 1 if the group does not come up
within START_TIMEOUT_S or a child started again exits within MIN_UPTIME_S (its log tail is
printed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from controller.messages import BrokerReplicasInfo, ReplicasInfo, encode_broker_names
from remoting.bodies import ClusterInfo
from remoting.client import invoke_once
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.properties import PropertiesSyntaxError, parse_properties

CLUSTER: Final = "DefaultCluster"
BROKER_NAME: Final = "broker-a"
BROKERS: Final = ("b1", "b2", "b3")
HOST: Final = "127.0.0.1"
START_TIMEOUT_S: Final = 120.0
STOP_TIMEOUT_S: Final = 20.0
POLL_INTERVAL_S: Final = 0.1
SUPERVISE_INTERVAL_S: Final = 0.3
MIN_UPTIME_S: Final = 10.0  # a child that exits sooner is not started again
REQUEST_TIMEOUT_MS: Final = 2_000
LOG_TAIL_LINES: Final = 20
READY: Final = "pyrmq-quickstart: ready"
EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1

T = TypeVar("T")

_PR_SET_PDEATHSIG: Final = 1
_LIBC: Final = ctypes.CDLL(None, use_errno=True)  # loaded here: the forked child only calls it


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when this process dies (even by kill -9)."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class QuickstartError(Exception):
    """The group did not come up: the message names the child and quotes its log."""


def say(text: str) -> None:
    print(f"pyrmq-quickstart: {text}", flush=True)


def _bindable(port: int) -> bool:
    """Whether nothing holds `port` (connections of an earlier run left in TIME_WAIT do not
    count: the servers bind with SO_REUSEADDR, as asyncio does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _ports(data_dir: Path, namesrv_port: int) -> dict[str, int]:
    """Every port the group uses, by key (`namesrv`, `b1.listen`, `b1.ha`, `b1.metrics`, ...):
    the remembered ones that are still free, new free ones otherwise."""
    path = data_dir / "ports.properties"
    remembered: dict[str, int] = {}
    with contextlib.suppress(OSError, PropertiesSyntaxError):
        for entry in parse_properties(path.read_text(encoding="latin-1")):
            if entry.value.isdigit():
                remembered[entry.key] = int(entry.value)
    keys = [f"{name}.{kind}" for name in BROKERS for kind in ("listen", "ha", "metrics")]
    if namesrv_port and not _bindable(namesrv_port):
        raise QuickstartError(f"port {namesrv_port} is in use (another name server?); "
                              "pass --namesrv-port 0 for a free one")
    ports = {"namesrv": namesrv_port} if namesrv_port else {}
    for key in ["namesrv", *keys]:
        if key in ports:
            continue
        old = remembered.get(key)
        ports[key] = old if old and old not in ports.values() and _bindable(old) else 0
        while not ports[key] or list(ports.values()).count(ports[key]) > 1:
            ports[key] = _free_port()
    path.write_text("".join(f"{key}={port}\n" for key, port in ports.items()))
    return ports


def _write_conf(path: Path, values: Mapping[str, object]) -> Path:
    lines = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass(eq=False)
class Child:
    name: str
    addr: str
    work_dir: Path
    module: str
    conf: Path
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarted: bool = False

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self.popen is not None
        return self.popen

    @property
    def log_path(self) -> Path:
        return self.work_dir / "pyrmq.log"

    def spawn(self) -> Child:
        """Start (or start again, on the same config and store) this child."""
        command = [sys.executable, "-m", self.module, "-c", str(self.conf)]
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(  # noqa: S603 - our own interpreter and modules
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, no locks taken
            )
        self.started_at = time.monotonic()
        return self

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def check_alive(self) -> None:
        if not self.alive():
            raise QuickstartError(
                f"{self.name} ({self.addr}) exited with status {self.process.returncode}; "
                f"the end of {self.log_path}:\n{self.tail()}"
            )


async def _invoke(addr: str, request: RemotingCommand) -> RemotingCommand | None:
    """One request; None while the address does not answer."""
    try:
        return await invoke_once(addr, request, REQUEST_TIMEOUT_MS)
    except (RemotingError, OSError):
        return None


async def cluster_info(namesrv: str) -> ClusterInfo | None:
    response = await _invoke(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    if response is None or response.code != ResponseCode.SUCCESS:
        return None
    return ClusterInfo.decode(response.body)


async def replicas_info(controller: str) -> ReplicasInfo | None:
    """The controller's view of `broker-a` (GET_SYNC_STATE_DATA), None while it has none."""
    response = await _invoke(controller, RemotingCommand.request(
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=encode_broker_names([BROKER_NAME])))
    if response is None or response.code != ResponseCode.SUCCESS:
        return None
    return BrokerReplicasInfo.decode(response.body).replicas_info_table.get(BROKER_NAME)


class Quickstart:
    """The children and the start-up sequence; `stop()` stops every child."""

    def __init__(self, data_dir: Path, namesrv_port: int) -> None:
        self.data_dir = data_dir
        self.namesrv_port = namesrv_port
        self.controller: Child | None = None
        self.brokers: list[Child] = []

    @property
    def children(self) -> list[Child]:
        return [*self.brokers, *([self.controller] if self.controller else [])]

    def _start_children(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ports = _ports(self.data_dir, self.namesrv_port)
        namesrv = f"{HOST}:{ports['namesrv']}"
        work_dir = self.data_dir / "controller"
        work_dir.mkdir(exist_ok=True)
        conf = _write_conf(work_dir / "controller.conf", {
            "listenPort": ports["namesrv"],
            "bindAddress": HOST,
            "controllerStorePath": work_dir / "store",
            "enableControllerInNamesrv": True,
            "scanNotActiveBrokerInterval": 1000,
            "scanInactiveMasterInterval": 1000,
        })
        self.controller = Child("controller", namesrv, work_dir, "controller", conf).spawn()
        say(f"started the controller (also the name server): {namesrv}, log "
            f"{work_dir / 'pyrmq.log'}")
        for name in BROKERS:
            work_dir = self.data_dir / name
            work_dir.mkdir(exist_ok=True)
            addr = f"{HOST}:{ports[f'{name}.listen']}"
            conf = _write_conf(work_dir / "broker.conf", {
                "brokerClusterName": CLUSTER,
                "brokerName": BROKER_NAME,
                "brokerId": 0,
                "brokerIP1": HOST,
                "brokerIP2": HOST,
                "bindAddress": HOST,
                "listenPort": ports[f"{name}.listen"],
                "haListenPort": ports[f"{name}.ha"],
                "metricsExporterType": "PROM",
                "metricsPromExporterHost": HOST,
                "metricsPromExporterPort": ports[f"{name}.metrics"],
                "namesrvAddr": namesrv,
                "enableControllerMode": True,
                "controllerAddr": namesrv,
                "allAckInSyncStateSet": True,
                "autoCreateTopicEnable": True,
                "autoCreateSubscriptionGroup": True,
                "storePathRootDir": work_dir / "store",
            })
            self.brokers.append(Child(name, addr, work_dir, "broker", conf).spawn())
            say(f"started {name}: {addr} (HA {HOST}:{ports[f'{name}.ha']}, metrics "
                f"http://{HOST}:{ports[f'{name}.metrics']}/metrics), log {work_dir / 'pyrmq.log'}")

    async def _wait(self, what: str, deadline: float, check: Callable[[], Awaitable[T]]) -> T:
        """Poll `check` until it returns a true value; fails if a child exits meanwhile."""
        while True:
            for child in self.children:
                child.check_alive()
            result = await check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise QuickstartError(f"timed out after {START_TIMEOUT_S:.0f} s waiting until "
                                      f"{what}")
            await asyncio.sleep(POLL_INTERVAL_S)

    async def start(self) -> str:
        """Start everything and wait until the group serves; the master's address."""
        started = time.monotonic()
        deadline = started + START_TIMEOUT_S
        say(f"data under {self.data_dir.resolve()}")
        self._start_children()
        assert self.controller is not None
        namesrv = self.controller.addr

        async def controller_up() -> bool:
            return await cluster_info(namesrv) is not None

        await self._wait("the controller answers", deadline, controller_up)
        say(f"controller and name server up: {namesrv} ({time.monotonic() - started:.1f} s)")
        registered: set[str] = set()
        by_addr = {b.addr: b.name for b in self.brokers}

        async def all_registered() -> bool:
            info = await replicas_info(namesrv)
            members = () if info is None else (*info.in_sync_replicas,
                                               *info.not_in_sync_replicas)
            for member in members:  # a replayed member counts once it is alive again
                name = by_addr.get(member.broker_address)
                if name and member.alive and name not in registered:
                    registered.add(name)
                    say(f"{name} registered with the controller: brokerId {member.broker_id} "
                        f"({time.monotonic() - started:.1f} s)")
            return len(registered) == len(self.brokers)

        await self._wait("every broker registered with the controller", deadline, all_registered)

        async def master() -> ReplicasInfo | None:
            info = await replicas_info(namesrv)
            alive = () if info is None else {m.broker_id for m in info.in_sync_replicas
                                             if m.alive}
            return info if info is not None and info.master_broker_id in alive else None

        info = await self._wait("a master is elected", deadline, master)
        assert info is not None
        say(f"master elected: {by_addr.get(info.master_address or '', '?')} "
            f"{info.master_address} (brokerId {info.master_broker_id}, masterEpoch "
            f"{info.master_epoch}) ({time.monotonic() - started:.1f} s)")

        async def full_set() -> ReplicasInfo | None:
            info = await replicas_info(namesrv)
            in_sync = () if info is None else [m for m in info.in_sync_replicas if m.alive]
            return info if len(in_sync) == len(self.brokers) else None

        info = await self._wait("the SyncStateSet holds all three brokers", deadline, full_set)
        assert info is not None
        ids = sorted(m.broker_id for m in info.in_sync_replicas)
        say(f"SyncStateSet of 3: brokerIds {ids} (epoch {info.sync_state_set_epoch}) "
            f"({time.monotonic() - started:.1f} s)")
        master_addr = info.master_address or ""

        async def routed() -> bool:
            cluster = await cluster_info(namesrv)
            data = None if cluster is None else cluster.broker_addr_table.get(BROKER_NAME)
            return data is not None and data.broker_addrs.get(0) == master_addr

        await self._wait("the name server routes to the master", deadline, routed)
        return master_addr

    def stop(self) -> None:
        """SIGTERM the brokers, then the controller; SIGKILL whatever is left after the
        deadline. Idempotent."""
        for group in (self.brokers, [self.controller] if self.controller else []):
            for child in group:
                if child.alive():
                    child.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for child in group:
                try:
                    child.process.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    say(f"{child.name} did not stop within {STOP_TIMEOUT_S:.0f} s: killing it")
                    child.process.kill()
                    child.process.wait()


async def _run(quickstart: Quickstart) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    starting = asyncio.create_task(quickstart.start())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        return EXIT_OK
    stopping.cancel()
    master = starting.result()  # raises QuickstartError
    assert quickstart.controller is not None
    namesrv = quickstart.controller.addr
    members = ", ".join(f"{b.name} {b.addr}" for b in quickstart.brokers)
    say(f"brokers of {BROKER_NAME}: {members}")
    say(f"try: .venv/bin/python examples/quickstart.py --namesrv {namesrv}")
    say(f"     .venv/bin/pyrmq-admin getSyncStateSet -a {namesrv} -b {BROKER_NAME}")
    say(f"ready: name server and controller {namesrv}, master {master} (Ctrl-C to stop)")
    await _supervise(quickstart, stop)
    return EXIT_OK


async def _supervise(quickstart: Quickstart, stop: asyncio.Event) -> None:
    """Until `stop`: restart a child that exits (a kill -9 to watch a failover) on its config and
    store, unless it exits again within MIN_UPTIME_S of that restart (QuickstartError); print
    every change of the controller's master, masterEpoch and SyncStateSet."""
    assert quickstart.controller is not None
    controller = quickstart.controller.addr
    names = {b.addr: b.name for b in quickstart.brokers}
    shown: tuple[object, ...] | None = None
    while not stop.is_set():
        for child in quickstart.children:
            if child.alive():
                continue
            if child.restarted and time.monotonic() - child.started_at < MIN_UPTIME_S:
                child.check_alive()  # it cannot start: give up
            child.restarted = True
            say(f"{child.name} exited with status {child.process.returncode}; starting it again "
                "on its store")
            child.spawn()
        info = await replicas_info(controller)
        if info is not None:
            in_sync = sorted(m.broker_id for m in info.in_sync_replicas)
            view = (info.master_address, info.master_epoch, in_sync)
            if shown is not None and view != shown:
                master = info.master_address or ""
                say(f"controller: master {names.get(master, '-')} {master or 'none'} "
                    f"(brokerId {info.master_broker_id}, masterEpoch {info.master_epoch}), "
                    f"SyncStateSet {in_sync}")
            shown = view
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=SUPERVISE_INTERVAL_S)


def main(argv: list[str] | None = None) -> int:
    """The `pyrmq-quickstart` command; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="pyrmq-quickstart", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("run/quickstart"),
                        help="stores, configs and logs (default ./run/quickstart)")
    parser.add_argument("--namesrv-port", type=int, default=9876,
                        help="the name server's and controller's port (0: a free one)")
    args = parser.parse_args(argv)
    quickstart = Quickstart(args.data_dir, args.namesrv_port)
    status = EXIT_FAILURE
    try:
        status = asyncio.run(_run(quickstart))
    except QuickstartError as err:
        say(f"error: {err}")
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):  # the stop below is bounded anyway
            signal.signal(signum, signal.SIG_IGN)
        say("stopping")
        quickstart.stop()
        say("stopped: " + ", ".join(f"{c.name} exit {c.process.returncode}"
                                   for c in quickstart.children))
    return status


if __name__ == "__main__":
    sys.exit(main())
