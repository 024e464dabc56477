"""Fixtures of the interop tests: the Java classpath (built once per session and release), a
JavaEnv per test, and real Apache RocketMQ name servers and brokers.

Every fixture here that runs Java depends on `rocketmq_version`, parametrized over
ROCKETMQ_VERSIONS (tests/interop/build.py): each interop test runs once per release, with the
release in its id (`test_x[rocketmq-5.5.0]`). pytest groups the tests by release, so the
module-scoped clusters start once per module and release.

Interop tests never skip: without a JDK or Maven, or when the Maven build fails, the classpath
fixture fails the test with the reason and the fix.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.interop.harness import (
    ROCKETMQ_VERSIONS,
    Classpath,
    InteropSetupError,
    JavaEnv,
    JavaServer,
    ensure_built,
)
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess, live_envs


@dataclass(frozen=True, slots=True)
class JavaCluster:
    """A real Java name server and one real Java broker (ASYNC_MASTER) registered with it."""

    env: JavaEnv
    namesrv: JavaServer
    broker: JavaServer


@pytest.fixture(
    scope="session",
    params=ROCKETMQ_VERSIONS,
    ids=[f"rocketmq-{version}" for version in ROCKETMQ_VERSIONS],
)
def rocketmq_version(request: pytest.FixtureRequest) -> str:
    """The Apache RocketMQ release of this test run: every release in ROCKETMQ_VERSIONS."""
    version: str = request.param
    return version


@pytest.fixture(scope="session")
def interop_classpath(rocketmq_version: str) -> Classpath:
    """The built classpath of rocketmq_version (Maven runs only when tests/interop/java
    changed)."""
    try:
        return ensure_built(rocketmq_version)
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


@dataclass(slots=True)
class PyrmqCluster:
    """pyrmq's name server and one pyrmq broker registered with it, and a JavaEnv for the Java
    clients. `broker` is the current broker process (a test may restart it)."""

    env: PyrmqEnv
    java: JavaEnv
    namesrv: PyrmqProcess
    broker: PyrmqProcess


@pytest.fixture(scope="module")
def pyrmq_cluster(
    interop_classpath: Classpath, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PyrmqCluster]:
    """pyrmq's name server and broker (real processes) shared by one test module. Teardown
    stops them with SIGTERM and fails unless every one exited 0 (a clean stop)."""
    base = tmp_path_factory.mktemp("pyrmq-cluster")
    with PyrmqEnv(base / "pyrmq") as env, JavaEnv(interop_classpath, base / "java") as java:
        namesrv = env.start_namesrv()
        broker = env.start_broker(namesrv)
        yield PyrmqCluster(env, java, namesrv, broker)
        exit_codes = env.stop_all()
        assert set(exit_codes.values()) == {0}, f"{exit_codes}\n{env.diagnostics()}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report carries the log tail of every pyrmq process still running."""
    report = yield
    if report.failed:
        envs = live_envs()
        if envs:
            report.sections.append(
                ("pyrmq processes", "\n".join(env.diagnostics() for env in envs))
            )
    return report
