"""GET_BROKER_HA_STATUS's body (RocketMQ's HARuntimeInfo) and the per-second flow meter behind
its `transferredByteInSecond`."""

from __future__ import annotations

import json

import pytest

from ha.flow import FlowMeter
from remoting.bodies import HAClientRuntimeInfo, HAConnectionRuntimeInfo, HARuntimeInfo


@pytest.mark.parametrize(("adds", "at_ms", "rate"), [
    ([], 5_000, 0),  # nothing moved
    ([(100, 10)], 900, 0),  # the first window has not closed
    ([(100, 10), (50, 999)], 1_000, 150),  # the closed window's bytes
    ([(100, 10), (7, 1_200)], 1_500, 100),  # bytes of the open window do not count yet
    ([(100, 10), (7, 1_200)], 2_000, 7),
    ([(100, 10)], 2_500, 0),  # a whole idle second after it: 0
])
def test_flow_meter_reports_the_last_whole_second(adds: list[tuple[int, int]], at_ms: int,
                                                  rate: int) -> None:
    meter = FlowMeter(0)
    for nbytes, now in adds:
        meter.add(nbytes, now)
    assert meter.per_second(at_ms) == rate


def test_master_runtime_info_golden_json() -> None:
    info = HARuntimeInfo(
        master=True, master_commit_log_max_offset=9_007_199_254_740_993, in_sync_slave_nums=1,
        ha_connection_info=(HAConnectionRuntimeInfo(
            addr="127.0.0.1:40001", slave_ack_offset=1000, diff=24, in_sync=True,
            transferred_byte_in_second=2048, transfer_from_where=1024),),
    )
    assert info.encode() == (
        b'{"haClientRuntimeInfo":{"lastReadTimestamp":0,"lastWriteTimestamp":0,'
        b'"masterAddr":null,"masterFlushOffset":0,"maxOffset":0,"transferredByteInSecond":0},'
        b'"haConnectionInfo":[{"addr":"127.0.0.1:40001","diff":24,"inSync":true,'
        b'"slaveAckOffset":1000,"transferFromWhere":1024,"transferredByteInSecond":2048}],'
        b'"inSyncSlaveNums":1,"master":true,"masterCommitLogMaxOffset":9007199254740993}'
    )


def test_slave_runtime_info_carries_the_client_view() -> None:
    info = HARuntimeInfo(ha_client_runtime_info=HAClientRuntimeInfo(
        master_addr="127.0.0.1:10912", max_offset=77, transferred_byte_in_second=5,
        last_read_timestamp=1_700_000_000_001, last_write_timestamp=1_700_000_000_002))
    decoded = json.loads(info.encode())
    assert decoded["master"] is False
    assert decoded["haConnectionInfo"] == []
    assert decoded["haClientRuntimeInfo"] == {
        "lastReadTimestamp": 1_700_000_000_001, "lastWriteTimestamp": 1_700_000_000_002,
        "masterAddr": "127.0.0.1:10912", "masterFlushOffset": 0, "maxOffset": 77,
        "transferredByteInSecond": 5,
    }


def test_runtime_info_decodes_back_and_reads_javas_nulls() -> None:
    """What pyrmq-admin haStatus reads: pyrmq's own answer decodes to the same value, and a
    Java broker's slave answer with no master yet (masterAddr null) reads as None."""
    info = HARuntimeInfo(
        master=True, master_commit_log_max_offset=4096, in_sync_slave_nums=2,
        ha_connection_info=(
            HAConnectionRuntimeInfo("127.0.0.1:1", 4000, 96, True, 10, 4096),
            HAConnectionRuntimeInfo("127.0.0.1:2", -1, 4097, False, 0, -1),
        ),
    )
    assert HARuntimeInfo.decode(info.encode()) == info
    slave = HARuntimeInfo.decode(
        b'{"haClientRuntimeInfo":{"masterAddr":null,"maxOffset":12},"haConnectionInfo":[],'
        b'"master":false}')
    assert slave == HARuntimeInfo(ha_client_runtime_info=HAClientRuntimeInfo(max_offset=12))
