"""The ReplicasManager inside a broker node, without a controller that answers: the broker stays
fenced, and the lostCommitted mark (docs/reliability.md M9) survives a clean restart until a
controller has given the broker a role. (With the real controller: tests/interop/
test_controller_mode.py.)"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from broker.config import MetricsExporterType
from broker.node import BrokerNode
from broker.replicas_manager import LOST_COMMITTED_FILE_NAME, mark_lost_committed
from pyrmq_client import Message
from pyrmq_client.errors import BrokerClientError
from remoting.codes import ResponseCode
from tests.broker.support import (
    FakeNameServer,
    broker_config,
    connected,
    running_broker,
    wait_until,
)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def controller_mode() -> dict[str, object]:
    return {"enable_controller_mode": True,
            "controller_addr": f"127.0.0.1:{closed_port()}",
            "metrics_exporter_type": MetricsExporterType.DISABLE}


async def refused_send(node: BrokerNode) -> BrokerClientError:
    async with connected(node) as client:
        with pytest.raises(BrokerClientError) as refused:
            await client.send(Message("T", b"x"), producer_group="g", queue_id=0)
    return refused.value


async def test_without_a_role_sends_are_refused_and_nothing_registers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="broker.replicas_manager")
    async with FakeNameServer() as namesrv:
        config = broker_config(tmp_path, namesrv_addr=namesrv.address, **controller_mode())
        async with running_broker(config) as node:
            assert node.replicas is not None
            await wait_until(lambda: "controller startup attempt failed" in caplog.text,
                             timeout_s=10, what="a failed attempt to reach the controller")
            assert node.replicas.isolated
            err = await refused_send(node)
            assert err.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "fenced" in (err.remark or "")
            assert namesrv.registrations == []


async def test_the_lost_committed_mark_outlives_a_clean_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="broker.replicas_manager")
    mark_lost_committed(tmp_path)
    for _ in range(2):  # stopped cleanly before any controller saw it: still marked
        config = broker_config(tmp_path, **controller_mode())
        async with running_broker(config) as node:
            assert node.replicas is not None
            assert node.replicas.lost_committed
            await wait_until(lambda: "staying away from the controller" in caplog.text,
                             timeout_s=10, what="the M9 hold is logged")
            assert (await refused_send(node)).code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert (tmp_path / LOST_COMMITTED_FILE_NAME).exists()
        caplog.clear()
