"""Retention on a master keeps the commitlog files a connected slave still needs (pyrmq's choice;
Java's CleanCommitLogService never looks at slaves), except under disk pressure, where the master
stays writable and the slave is left behind with a WARNING; a disconnected slave pins nothing.

The lagging slave is a raw TCP peer speaking the HA protocol: it handshakes and acks one offset
in the master's second commitlog file, then never acks again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ha.frames import SlaveAck, SlaveHandshake
from tests.integration.test_ha_replication import Cluster, address, send
from tests.remoting.support import wait_until


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        await made.close()


def age_all_but_the_last(paths: list[Path]) -> None:
    old = time.time() - 100 * 3600  # past the default fileReservedTime (72 h)
    for path in paths[:-1]:
        os.utime(path, (old, old))


async def test_a_lagging_connected_slave_pins_retention_until_disk_pressure(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    master = await cluster.node(1, ha_housekeeping_interval_ms=60_000)
    await master.service.become_master(1, frozenset({1}), 1)
    assert await send(master, 400) == [True] * 400
    files = list(master.store.commitlog.files.files)
    assert len(files) >= 4
    need = files[1].file_from_offset + 100  # inside the second file

    _, writer = await asyncio.open_connection(*address(master))
    writer.write(SlaveHandshake(False, False, 2).encode() + SlaveAck(need).encode())
    await writer.drain()
    await wait_until(lambda: master.service.offset_needed_by_slaves() == need, timeout_s=10,
                     what="the raw slave's ack seen by the master")

    age_all_but_the_last([m.path for m in files])
    now_ms = int(time.time() * 1000)
    # deleteWhen (04) is due, every file but the last expired: only the first file goes.
    assert await master.store.clean_expired_files(now_ms=now_ms, current_hour=4) == 1
    assert master.store.min_phy_offset == files[1].file_from_offset
    assert await master.store.clean_expired_files(now_ms=now_ms, current_hour=4) == 0

    # Disk pressure: the slave's need no longer protects; the master logs whom it leaves.
    monkeypatch.setattr(master.store, "disk_used_ratio", lambda: 0.95)
    with caplog.at_level(logging.WARNING, logger="store.message_store"):
        deleted = await master.store.clean_expired_files(now_ms=now_ms, current_hour=10)
    assert deleted >= 1
    assert master.store.min_phy_offset > need
    assert any("a connected slave still needs" in r.getMessage() and f"slave_needs_from={need}"
               in r.getMessage() for r in caplog.records)

    writer.close()
    await wait_until(lambda: master.service.offset_needed_by_slaves() is None, timeout_s=10,
                     what="a disconnected slave pins nothing")


async def test_no_pin_without_slaves_or_off_the_master_role(cluster: Cluster) -> None:
    master = await cluster.node(1)
    assert master.service.offset_needed_by_slaves() is None  # no role yet
    await master.service.become_master(1, frozenset({1}), 1)
    assert master.service.offset_needed_by_slaves() is None  # master, no slave connected
    assert master.store.replica_need is not None
    assert master.store.replica_need() is None
