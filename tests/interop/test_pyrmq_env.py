"""The pyrmq process harness: a port taken between picking and binding is retried, not failed.

Tests run in parallel streams on one host, so a port that was free when picked can be taken by
the time the broker binds it. The broker reports that as one line ("cannot listen on ...:
already in use"); the harness must see it as a taken port and try another block.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop import pyrmq_env
from tests.interop.network import free_broker_port, free_port
from tests.interop.pyrmq_env import PyrmqEnv, _PortTakenError


def _held(port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def _slave_conf() -> dict[str, str | int | bool]:
    """A static-role slave (no controller needed): it opens its HA port, listenPort + 1."""
    return {"enableControllerMode": True, "brokerId": 2, "pyrmqHaRole": "slave",
            "pyrmqHaMasterAddress": f"127.0.0.1:{free_port()}"}


def test_a_taken_ha_port_fails_the_start_as_port_taken(tmp_path: Path) -> None:
    port = free_broker_port()
    with _held(port + 1), PyrmqEnv(tmp_path) as env, pytest.raises(
            _PortTakenError, match="haListenPort"):
        env.start_broker(None, listen_port=port, extra_conf=_slave_conf())


def test_a_start_on_a_taken_block_moves_to_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = free_broker_port()
    picks: Iterator[int] = iter([taken, free_broker_port()])
    monkeypatch.setattr(pyrmq_env, "free_broker_port", lambda: next(picks))
    with _held(taken + 1), PyrmqEnv(tmp_path) as env:
        broker = env.start_broker(None, extra_conf=_slave_conf())
        assert broker.addr != f"127.0.0.1:{taken}"
        assert next(picks, None) is None  # both picks were used: the first failed as taken
