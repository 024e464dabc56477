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

