"""Fixtures of the interop tests: the Java classpath (built once per session), a JavaEnv per test,
and real Apache RocketMQ name servers and brokers.

Interop tests never skip: without a JDK or Maven, or when the Maven build fails, the classpath
fixture fails the test with the reason and the fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.interop.harness import (
    Classpath,
    InteropSetupError,
    JavaEnv,
    JavaServer,
    ensure_built,
)


@dataclass(frozen=True, slots=True)
class JavaCluster:
    """A real Java name server and one real Java broker (ASYNC_MASTER) registered with it."""

    env: JavaEnv
    namesrv: JavaServer
    broker: JavaServer


@pytest.fixture(scope="session")
def interop_classpath() -> Classpath:
    """The built classpath (Maven runs only when tests/interop/java changed)."""
    try:
        return ensure_built()
    except InteropSetupError as err:
        reason = str(err)
    pytest.fail(f"interop set-up: {reason}", pytrace=False)  # outside `except`: no chained trace


@pytest.fixture
def java_env(interop_classpath: Classpath, tmp_path: Path) -> Iterator[JavaEnv]:
    """A JavaEnv for one test; every JVM it started is killed at teardown, pass or fail."""
    with JavaEnv(interop_classpath, tmp_path / "java") as env:
        yield env


@pytest.fixture
def java_namesrv(java_env: JavaEnv) -> JavaServer:
    """A real Java name server for one test."""
    return java_env.start_java_namesrv()


@pytest.fixture
def java_broker(java_env: JavaEnv, java_namesrv: JavaServer) -> JavaServer:
    """A real Java broker for one test, registered with java_namesrv."""
    return java_env.start_java_broker(java_namesrv)


@pytest.fixture(scope="module")
def java_cluster(
    interop_classpath: Classpath, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaCluster]:
    """A real Java name server and broker shared by one test module; killed after the module."""
    with JavaEnv(interop_classpath, tmp_path_factory.mktemp("java-cluster")) as env:
        namesrv = env.start_java_namesrv()
        broker = env.start_java_broker(namesrv)
        yield JavaCluster(env, namesrv, broker)
