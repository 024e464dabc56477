"""The controller's event log: records replay in order; a torn last record is dropped alone
(a typed error, handled at open); damage before the end refuses the start; kill -9 of a real
controller process loses nothing it acknowledged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.errors import EventDecodeError, EventLogCorruptError, TruncatedLastRecordError
from controller.event_log import (
    EVENT_LOG_FILE_NAME,
    RECORD_HEADER,
    EventLog,
    encode_record,
    read_records,
)
from controller.events import (
    ApplyBrokerIdEvent,
    ElectMasterEvent,
    Event,
    decode_event,
    encode_event,
)
from controller_client.client import ControllerClient
from tests.interop.network import free_port

CLUSTER, BROKER = "DefaultCluster", "broker-a"
ROOT = Path(__file__).resolve().parents[2]


def events(count: int) -> list[Event]:
    return [ApplyBrokerIdEvent(CLUSTER, BROKER, i, f"127.0.0.1:{i};1") for i in range(1, count + 1)]


def test_append_then_reopen_replays_in_order(tmp_path: Path) -> None:
    log, replayed = EventLog.open(tmp_path)
    assert replayed == []
    log.append_sync(tuple(events(2)))
    log.append_sync((ElectMasterEvent(BROKER, 1),))
    log.close()
    _, replayed = EventLog.open(tmp_path)
    assert replayed == [*events(2), ElectMasterEvent(BROKER, 1)]


@given(
    payloads=st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=5), data=st.data()
)
def test_any_cut_of_the_last_record_is_a_typed_error_with_the_good_prefix(
    payloads: list[bytes], data: st.DataObject
) -> None:
    good = b"".join(encode_record(p) for p in payloads[:-1])
    last = encode_record(payloads[-1])
    cut = data.draw(st.integers(1, len(last) - 1))
    with pytest.raises(TruncatedLastRecordError) as raised:
        read_records(good + last[:cut], source="t")
    assert raised.value.valid_bytes == len(good)
    assert read_records(good, source="t") == payloads[:-1]


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        pytest.param("cut-last", TruncatedLastRecordError, id="cut-last"),
        pytest.param("flip-last", TruncatedLastRecordError, id="crc-of-last"),
        pytest.param("zeros-appended", TruncatedLastRecordError, id="zero-tail"),
        pytest.param("flip-first", EventLogCorruptError, id="crc-of-first"),
        pytest.param("huge-length-first", EventLogCorruptError, id="length-of-first"),
    ],
)
def test_damage(damage: str, error: type[Exception], tmp_path: Path) -> None:
    log, _ = EventLog.open(tmp_path)
    log.append_sync(tuple(events(3)))
    log.close()
    path = tmp_path / EVENT_LOG_FILE_NAME
    data = bytearray(path.read_bytes())
    first_size = RECORD_HEADER.size + RECORD_HEADER.unpack_from(data, 0)[0]
    match damage:
        case "cut-last":
            data = data[:-3]
        case "flip-last":
            data[-1] ^= 0xFF
        case "zeros-appended":
            data += bytes(11)
        case "flip-first":
            data[first_size - 1] ^= 0xFF
        case "huge-length-first":
            data[0] = 0x7F
    path.write_bytes(bytes(data))
    with pytest.raises(error):
        read_records(bytes(data), source=str(path))
    if error is TruncatedLastRecordError:
        # Open drops that one record only, and the file is cut back to the good records.
        log, replayed = EventLog.open(tmp_path)
        kept = 3 if damage == "zeros-appended" else 2
        assert replayed == events(kept)
        log.append_sync((ElectMasterEvent(BROKER, 1),))
        log.close()
        _, replayed = EventLog.open(tmp_path)
        assert replayed == [*events(kept), ElectMasterEvent(BROKER, 1)]
    else:
        with pytest.raises(EventLogCorruptError):
            EventLog.open(tmp_path)


async def test_kill_9_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """A real `pyrmq-controller` process: ids applied and a master elected, then SIGKILL;
    the restarted process knows all of it."""
    port = free_port()
    conf = tmp_path / "controller.conf"
    conf.write_text(
        f"listenPort={port}\nbindAddress=127.0.0.1\ncontrollerStorePath={tmp_path / 'store'}\n"
    )

    async def start() -> asyncio.subprocess.Process:
        with (tmp_path / "controller.log").open("ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "controller",
                "-c",
                str(conf),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
            )
        async with asyncio.timeout(20):
            while True:
                assert process.returncode is None, (tmp_path / "controller.log").read_text()
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                return process

    process = await start()
    client = ControllerClient((f"127.0.0.1:{port}",))
    try:
        for name in ("b1", "b2", "b3"):
            (tmp_path / name).mkdir()
            await client.register(tmp_path / name, CLUSTER, BROKER, f"127.0.0.1:{free_port()}")
        elected, _ = await client.elect_master(CLUSTER, BROKER, 2)
        assert elected.master_broker_id == 2
    finally:
        await client.close()
        process.send_signal(signal.SIGKILL)
        await process.wait()
    process = await start()
    client = ControllerClient((f"127.0.0.1:{port}",))
    try:
        info = await client.get_replica_info(BROKER)
        assert info.header.master_broker_id == 2
        assert info.header.master_epoch == 1
        assert info.sync_state_set.sync_state_set == {2}
        assert await client.get_next_broker_id(CLUSTER, BROKER) == 4
        again = await client.register(tmp_path / "b1", CLUSTER, BROKER, "127.0.0.1:1")
        assert again.broker_id == 1
    finally:
        await client.close()
        process.terminate()
        async with asyncio.timeout(20):
            assert await process.wait() == 0


async def test_a_damaged_log_refuses_the_start_with_one_line(tmp_path: Path) -> None:
    log, _ = EventLog.open(tmp_path / "store")
    log.append_sync(tuple(events(2)))
    log.close()
    path = tmp_path / "store" / EVENT_LOG_FILE_NAME
    data = bytearray(path.read_bytes())
    data[RECORD_HEADER.size] ^= 0xFF  # the first record's payload: damage, not a torn tail
    path.write_bytes(bytes(data))
    conf = tmp_path / "controller.conf"
    conf.write_text(
        f"listenPort={free_port()}\nbindAddress=127.0.0.1\n"
        f"controllerStorePath={tmp_path / 'store'}\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "controller", "-c", str(conf),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(30):
        _, stderr = await process.communicate()
    assert process.returncode == 1
    errors = [line for line in stderr.decode().splitlines() if " ERROR " in line]
    assert len(errors) == 1
    assert "cannot start the controller: event log" in errors[0]
    assert "record 0 at byte 0: crc32" in errors[0]


@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_give_records_or_a_typed_error(data: bytes) -> None:
    try:
        payloads = read_records(data, source="fuzz")
    except (TruncatedLastRecordError, EventLogCorruptError):
        return
    for payload in payloads:
        with contextlib.suppress(EventDecodeError):
            decode_event(payload)


@given(
    payload=st.one_of(
        st.binary(max_size=80),
        st.builds(
            lambda obj: json.dumps(obj).encode(),
            st.dictionaries(
                st.sampled_from(["type", "broker_name", "broker_id", "sync_state_set"]),
                st.one_of(
                    st.sampled_from(["ElectMaster", "AlterSyncStateSet", "x"]),
                    st.integers(),
                    st.none(),
                    st.lists(st.integers(), max_size=3),
                ),
            ),
        ),
    )
)
def test_decode_event_gives_an_event_or_event_decode_error(payload: bytes) -> None:
    try:
        event = decode_event(payload)
    except EventDecodeError:
        return
    assert decode_event(encode_event(event)) == event
