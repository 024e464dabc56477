"""pyrmq's controller client against the real Apache RocketMQ controller (each release).

A standalone `ControllerStartup` (DLedger, one node, loopback, free ports) is started; pyrmq's
`ControllerClient` runs the shared scenario of tests/controller/controller_scenarios.py against
it (the same scenario runs against pyrmq's embedded controller): the persistent broker id
protocol (GET_NEXT_BROKER_ID, APPLY_BROKER_ID, REGISTER_BROKER), heartbeats, the first election,
ALTER_SYNC_STATE_SET, and every refusal code the scenario provokes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.controller.controller_scenarios import register_heartbeat_elect_alter
from tests.interop.harness import JavaEnv, _write_properties
from tests.interop.network import free_port, port_accepts

pytestmark = pytest.mark.interop

CONTROLLER_MAIN = "org.apache.rocketmq.controller.ControllerStartup"
START_TIMEOUT_S = 30.0
CLUSTER, BROKER = "DefaultCluster", "broker-a"


def start_controller(java: JavaEnv, work_dir: Path) -> str:
    """ControllerStartup, one DLedger node on 127.0.0.1; returns its remoting address."""
    # With DLedger the controller serves remoting on its Raft peer address (no other port).
    port = free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    conf = _write_properties(
        work_dir / "controller.conf",
        {
            "controllerType": "DLedger",
            "controllerDLegerGroup": "pyrmq",
            "controllerDLegerPeers": f"n0-127.0.0.1:{port}",
            "controllerDLegerSelfId": "n0",
            "controllerStorePath": str(work_dir / "store"),
        },
    )
    process = java.start_java(
        CONTROLLER_MAIN,
        ["-c", str(conf)],
        name="controller",
        # hessian (the controller's Raft log codec) reflects into java.lang on JDK 17.
        jvm_args=("--add-opens", "java.base/java.lang=ALL-UNNAMED"),
    )
    addr = f"127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not port_accepts(addr):
        if not process.alive() or time.monotonic() > deadline:
            raise AssertionError(f"controller did not listen on {addr}\n{process.diagnostics()}")
        time.sleep(0.2)
    return addr


async def test_register_heartbeat_elect_alter(java_env: JavaEnv, tmp_path: Path) -> None:
    """The scenario of tests/controller/controller_scenarios.py, which also runs against pyrmq's
    embedded controller (tests/controller/test_controller_server.py)."""
    addr = start_controller(java_env, tmp_path / "controller")
    await register_heartbeat_elect_alter(addr, tmp_path, leader_timeout_s=START_TIMEOUT_S)
