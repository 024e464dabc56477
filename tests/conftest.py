"""Shared test configuration: every async test runs on uvloop, as the broker does, and a run
fails if any test leaves a process running (tests/support/leaks.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping

import pytest
import uvloop
from hypothesis import HealthCheck, settings

from tests.support.leaks import (  # noqa: F401 (pytest finds them here)
    _no_process_left_behind,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

# CI runs derandomized so a failure replays; locally hypothesis explores.
settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"uvloop": uvloop.new_event_loop}


# CI runs the suite in two passes (scripts/test.sh). The first runs every test not marked
# `serial` as two pytest processes side by side: one runs the JVM tests (tests/interop,
# tests/spark) of the reference release, the other the Python-only tests and then the other
# releases' interop tests, so never more than two JVM tests at once. The second pass runs the
# `serial` tests, those whose outcome or printed figures depend on timing: first the `alone`
# ones with nothing beside them, then the rest as the same two streams. Those wait on
# heartbeats, leases and elections: alone, the serial pass kept the machine 38 % busy (vmstat,
# 2026-12-02), so one beside another still has most of a core.
SERIAL_PATHS: tuple[str, ...] = (
    "tests/integration/test_embedded_controller_failover.py",
    "tests/integration/test_ha_processes.py",
    "tests/interop/test_controller_mode.py",
    "tests/interop/test_java_ha_deltas.py",  # its controller's timeout is 6 s
    "tests/spark/test_failover_streaming.py",
)
ALONE_PATHS: tuple[str, ...] = (
    # They time the event loop, the host or a close deadline.
    "tests/broker/test_loop_monitor.py",
    "tests/remoting/test_hostile_clients.py",
    "tests/controller/test_admin.py",
    "tests/integration/test_ha_replication.py",
    "tests/unit/test_host_pauses.py",
    # Their Java brokers heartbeat with a 3 s timeout: beside another JVM test, the first one's
    # Java master heartbeated late and the controller elected its slave (2026-12-02); the
    # mixed group has Java brokers on the same timeout.
    "tests/interop/test_java_brokers_pyrmq_controller.py",
    "tests/interop/test_mixed_ha_group.py",
)


def pytest_itemcollected(item: pytest.Item) -> None:
    path = item.path.relative_to(item.config.rootpath).as_posix()
    if path.startswith(ALONE_PATHS):
        item.add_marker(pytest.mark.alone)
        item.add_marker(pytest.mark.serial)
    elif path.startswith(SERIAL_PATHS):
        item.add_marker(pytest.mark.serial)
