"""`mqadmin haStatus` (each RocketMQ release's tools) against pyrmq brokers in AutoSwitchHA:
GET_BROKER_HA_STATUS (907) answers Java's HARuntimeInfo, which mqadmin decodes and prints.

One pyrmq master and one pyrmq slave (roles from `broker.conf`, tests/integration/
test_ha_processes.py), 200 messages sent through the master (each acked by the slave), then:
- on the master, haStatus prints its commitlog max offset, one slave, one in-sync slave, and the
  slave's row: its address, acked offset = max offset, diff 0, status OK;
- on the slave, it prints the master's HA address and the slave's own max offset (the same);
- `pyrmq-admin haStatus` prints the same lines as mqadmin for both (only the transfer speed and
  the slave's read/write times, which move, may differ in value, not in form);
- GET_BROKER_EPOCH_CACHE (1007, `mqadmin getBrokerEpoch`) answers each broker's epoch cache: the
  master as role id 0, the slave as its controller id, both with the master's one open epoch.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.messages import EpochEntryCache
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from store.epoch_cache import EpochEntry
from tests.integration.test_ha_processes import send_all, start, sync_state_set_of
from tests.interop.harness import JavaEnv
from tests.interop.pyrmq_env import PyrmqEnv, wait_until

pytestmark = pytest.mark.interop


@pytest.fixture
def env(tmp_path: Path) -> Iterator[PyrmqEnv]:
    with PyrmqEnv(tmp_path / "pyrmq") as made:
        yield made


def _ha_lines(out: str) -> list[str]:
    """haStatus's own lines (mqadmin's JVM may print others)."""
    return [line for line in out.splitlines() if line.startswith(("#", "127.0.0.1:"))]


async def _pyrmq_admin_ha_status(addr: str) -> str:
    result = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "controller.admin", "haStatus", "-b", addr],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _same_but_moving(ours: list[str], theirs: list[str]) -> None:
    """Equal line for line, except the values that move between two calls: a row's transfer
    speed (its 4th column) and the slave's speed and read/write times (same form)."""
    assert ours, "pyrmq-admin printed no haStatus line"
    assert len(ours) == len(theirs), (ours, theirs)
    moving = ("#TransferSpeed(KB/s)\t", "#LastReadTime\t", "#LastWriteTime\t")
    for mine, java in zip(ours, theirs, strict=True):
        if mine.startswith(moving):
            name, value = mine.split("\t")
            assert java.startswith(f"{name}\t"), (mine, java)
            form = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}" if "Time" in name \
                else r"\d+\.\d{2}"
            assert re.fullmatch(form, value), mine
            assert re.fullmatch(form, java.split("\t")[1]), java
        elif mine.startswith("127.0.0.1:"):
            mine_columns, java_columns = mine.split(), java.split()
            del mine_columns[3], java_columns[3]
            assert mine_columns == java_columns, (mine, java)
            assert len(mine) == len(java), (mine, java)  # the same fixed widths
        else:
            assert mine == java


def _field(out: str, name: str) -> str:
    found = re.search(rf"^#{re.escape(name)}\t(.*)$", out, re.MULTILINE)
    assert found, f"no #{name} in mqadmin's output:\n{out}"
    return found.group(1).strip()


async def test_mqadmin_ha_status_on_a_pyrmq_master_and_slave(env: PyrmqEnv,
                                                            java_env: JavaEnv) -> None:
    namesrv = env.start_namesrv()
    master = start(env, 1, "master")
    master_ha = f"127.0.0.1:{master.port + 1}"
    slave = start(env, 2, "slave", master_ha=master_ha)
    wait_until(lambda: sync_state_set_of(master) == {1, 2}, timeout_s=30,
               what="the slave in the master's SyncStateSet", process=master)
    codes = await send_all(master.addr, 200, tag="ha-status")
    assert codes == [ResponseCode.SUCCESS] * 200

    out = java_env.mqadmin(namesrv.addr, "haStatus", "-b", master.addr).stdout
    max_offset = int(_field(out, "MasterCommitLogMaxOffset"))
    assert max_offset > 200 * 100, out
    assert _field(out, "MasterAddr") == master.addr
    assert _field(out, "SlaveNum") == "1"
    assert _field(out, "InSyncSlaveNum") == "1"
    rows = [line.split() for line in out.splitlines()
            if line.startswith("127.0.0.1:") and not line.startswith("#")]
    assert len(rows) == 1, out
    addr, ack, diff, speed, status, transfer_from = rows[0]  # 6 columns when "OK"
    assert addr.startswith("127.0.0.1:"), out
    assert int(ack) == max_offset, out
    assert int(diff) == 0, out
    assert float(speed) >= 0.0, out
    assert status == "OK", out
    assert int(transfer_from) == max_offset, out

    out = java_env.mqadmin(namesrv.addr, "haStatus", "-b", slave.addr).stdout
    assert _field(out, "MasterAddr") == master_ha, out
    assert int(_field(out, "CommitLogMaxOffset")) == max_offset, out
    assert float(_field(out, "TransferSpeed(KB/s)")) >= 0.0, out
    assert re.match(r"\d{4}-\d{2}-\d{2} ", _field(out, "LastReadTime")), out
    assert _field(out, "MasterFlushOffset") == "0", out
    slave_out = out
    master_out = java_env.mqadmin(namesrv.addr, "haStatus", "-b", master.addr).stdout
    for process, java_out in ((master, master_out), (slave, slave_out)):
        _same_but_moving(_ha_lines(await _pyrmq_admin_ha_status(process.addr)),
                         _ha_lines(java_out))
    for process, role_id in ((master, 0), (slave, 2)):
        host, port = process.addr.rsplit(":", 1)
        client = await RemotingClient.connect(host, int(port))
        try:
            response = await client.invoke(
                RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE), timeout_ms=5_000)
        finally:
            await client.close()
        assert response.code == ResponseCode.SUCCESS, response.remark
        cache = EpochEntryCache.decode(response.body)
        assert (cache.broker_name, cache.broker_id, cache.max_offset) == (
            "broker-a", role_id, max_offset)
        assert cache.epoch_list == (EpochEntry(1, 0, 2**63 - 1),)

    for process in (master, slave):
        assert process.terminate() == 0, process.diagnostics()
