"""HA bad input in both directions (docs/reliability.md §8, HA rows): a bad frame closes only its
own connection, and nothing is appended or acknowledged that should not be."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ha.config import HAConfig
from ha.frames import (
    MasterHandshake,
    SlaveAck,
    SlaveFrameDecoder,
    SlaveHandshake,
    TransferHeader,
)
from ha.service import AutoSwitchHAService
from store.errors import DataInvariantError
from store.message_store import MessageStore
from tests.integration.test_ha_replication import Cluster, Node, address, fill_to, send
from tests.remoting.support import wait_until
from tests.support.store_helpers import small_config


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        await made.close()


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    """Read until EOF (or a reset); True once the peer closed."""
    try:
        async with asyncio.timeout(10):
            while await reader.read(65536):
                pass
    except ConnectionResetError:
        pass
    return True


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param(b"\x00\x00\x00\x07" + bytes(12), id="unknown-state"),
        pytest.param(SlaveAck(0).encode(), id="ack-before-handshake"),
        pytest.param(b"\x00\x00\x00\x01\x00\x05\x00\x00" + (2).to_bytes(8, "big"),
                     id="flag-outside-0-1"),
        pytest.param(SlaveHandshake(False, False, -5).encode(), id="negative-broker-id"),
        pytest.param(SlaveHandshake(False, False, 2).encode() + SlaveAck(10).encode()
                     + SlaveAck(5).encode(), id="decreasing-ack"),
        pytest.param(SlaveHandshake(False, False, 2).encode() + SlaveAck(1 << 40).encode(),
                     id="ack-beyond-bytes-sent-1155"),
    ],
)
async def test_bad_slave_frames_close_only_their_connection(
    cluster: Cluster, frames: bytes
) -> None:
    master = await cluster.node(1)
    await master.service.become_master(1, frozenset({1}), 1)
    await send(master, 20)
    healthy = await cluster.node(3)
    await healthy.service.become_slave(address(master), 1)
    await wait_until(lambda: master.service.sync_state_set is not None
                     and master.service.sync_state_set.local == {1, 3}, timeout_s=20,
                     what="healthy slave joined")
    reader, writer = await asyncio.open_connection(*address(master))
    writer.write(frames)
    await writer.drain()
    assert await closed_by_peer(reader)
    writer.close()
    assert 2 not in master.service.ack_by_slave()
    assert master.service.sync_state_set is not None
    assert master.service.sync_state_set.local == {1, 3}
    assert await send(master, 5, tag="after") == [True] * 5  # the healthy slave still acks


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.binary(min_size=1, max_size=64))
async def test_arbitrary_bytes_never_ack_or_join(tmp_path: Path, garbage: bytes) -> None:
    made = Cluster(tmp_path / f"g{next(_runs)}")
    try:
        master = await made.node(1)
        await master.service.become_master(1, frozenset({1}), 1)
        reader, writer = await asyncio.open_connection(*address(master))
        writer.write(garbage)
        await writer.drain()
        writer.write_eof()
        await closed_by_peer(reader)
        writer.close()
        acks = master.service.ack_by_slave()
        assert all(ack <= master.store.max_phy_offset for ack in acks.values())
        assert master.service.sync_state_set is not None
        assert master.service.sync_state_set.local == {1}
    finally:
        await made.close()


_runs = itertools.count()


@pytest.mark.parametrize("backlog", [False, True], ids=["idle", "socket-full"])
async def test_a_silent_slave_is_dropped_after_the_housekeeping_interval(
    cluster: Cluster, backlog: bool
) -> None:
    """A slave that handshakes, acks once and then says nothing is dropped after
    haHousekeepingInterval: with nothing to send (the master's writer idle), and with a backlog
    it never reads (the master's socket full, its writer waiting in drain)."""
    master = await cluster.node(1, ha_housekeeping_interval_ms=1000)
    await master.service.become_master(1, frozenset({1}), 1)
    await send(master, 3)
    if backlog:
        await fill_to(master, 8 * 1024 * 1024, bytes(4096))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # fills at once
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, address(master))
    _reader, writer = await asyncio.open_connection(sock=sock)
    # Acked from 0 the slave is owed everything; acked at the end, nothing.
    ack = 0 if backlog else master.store.max_phy_offset
    writer.write(SlaveHandshake(False, False, 2).encode() + SlaveAck(ack).encode())
    await writer.drain()
    await wait_until(lambda: 2 in master.service.ack_by_slave(), timeout_s=10,
                     what="the slave's connection up")
    silent_from = asyncio.get_running_loop().time()
    await wait_until(lambda: 2 not in master.service.ack_by_slave(), timeout_s=10,
                     what="the silent slave dropped")
    waited = asyncio.get_running_loop().time() - silent_from
    assert 0.5 < waited < 5, waited
    assert all(c.protocol.slave_broker_id != 2 for c in master.service.connections)
    writer.close()


class FakeMaster:
    """A master that answers the handshake correctly, then sends the frames it is given; it
    records the slave's ACKs."""

    def __init__(
        self, frames: bytes, *, max_offset: int, entries: tuple[tuple[int, int], ...],
        once: bool = False,
    ) -> None:
        self.frames = frames
        self.once = once  # send the frames after the first ACK only (else after every ACK)
        self.max_offset = max_offset
        self.entries = entries
        self.acks: list[int] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        decoder = SlaveFrameDecoder("slave")
        replied = False
        try:
            while data := await reader.read(65536):
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    if isinstance(frame, SlaveHandshake) and not replied:
                        writer.write(MasterHandshake(self.max_offset, self.entries).encode())
                        replied = True
                    elif isinstance(frame, SlaveAck):
                        self.acks.append(frame.max_offset)
                        if not self.once or len(self.acks) == 1:
                            writer.write(self.frames)
                    await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return ("127.0.0.1", self.server.sockets[0].getsockname()[1])

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def fake_masters_slave(root: Path) -> tuple[MessageStore, AutoSwitchHAService]:
    """A slave (broker 2, epoch 1 from offset 0, an empty log in `root`/slave) for a
    FakeMaster; it retries every 50 ms. The caller closes the service, then the store."""
    store = MessageStore(small_config(root / "slave", enable_controller_mode=True))
    await asyncio.to_thread(store.open)
    await store.append_epoch(1, 0)
    service = AutoSwitchHAService(
        store, HAConfig(broker_id=2, ha_listen_port=0, bind_address="127.0.0.1",
                        reconnect_interval_ms=50),
        replica_ids=lambda: {1, 2}, propose_sync_state_set=lambda *_: None,
    )
    return store, service


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param(TransferHeader(4, 12345, 1, 0, 0).encode() + b"abcd",
                     id="offset-not-local-end"),
        pytest.param(TransferHeader(0, 0, 3, 0, 0).encode()
                     + TransferHeader(0, 0, 2, 0, 0).encode(), id="epoch-goes-back"),
        pytest.param(b"\x00\x00\x00\x02\x7f\xff\xff\xff" + bytes(28), id="body-too-large"),
        pytest.param(b"\x00\x00\x00\x09" + bytes(40), id="unknown-state"),
        pytest.param(MasterHandshake(0, ()).encode(), id="second-handshake-reply"),
    ],
)
async def test_bad_master_frames_close_and_append_nothing(tmp_path: Path, frames: bytes) -> None:
    store, service = await fake_masters_slave(tmp_path)
    fake = FakeMaster(frames, max_offset=0, entries=((1, 0),))
    try:
        async with fake as master_address:
            await service.become_slave(master_address, 1)
            await wait_until(lambda: fake.connections >= 3, timeout_s=20,
                             what="the slave closed and reconnected, twice")
        assert store.max_phy_offset == 0  # nothing appended
        assert set(fake.acks) == {0}  # only the post-handshake report of its empty log
    finally:
        await service.close()
        await asyncio.to_thread(store.close)


async def test_a_bad_frame_in_a_pumped_backlog_ends_only_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog large enough for the slave's pump (a worker thread, ha/client.py) with a frame
    that continues nowhere in its middle: the pump's error ends the session like the loop's
    would, nothing at or after the bad frame is appended or acknowledged, and the slave goes on
    reconnecting (its service keeps running)."""
    store, service = await fake_masters_slave(tmp_path)
    batch = 32 * 1024  # within the 64 KiB test files
    good = 12 * 1024 * 1024
    frames = b"".join(TransferHeader(batch, offset, 1, 0, 0).encode()
                      + bytes([offset % 251]) * batch for offset in range(0, good, batch))
    frames += TransferHeader(batch, good + 1, 1, 0, 0).encode() + b"x" * batch
    fake = FakeMaster(frames, max_offset=good, entries=((1, 0),))
    loop_thread = threading.get_ident()
    pumped: list[int] = []  # appends made outside the loop's thread
    append = store.append_replicated_run_blocking

    def recorded(phy_offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        append(phy_offset, parts)
        if threading.get_ident() != loop_thread:
            pumped.append(phy_offset)

    monkeypatch.setattr(store, "append_replicated_run_blocking", recorded)
    try:
        async with fake as master_address:
            await service.become_slave(master_address, 1)
            await wait_until(lambda: fake.connections >= 3, timeout_s=30,
                             what="the slave closed and reconnected, twice")
        assert pumped, "the backlog never reached the pump"
        # The read holding the bad frame is refused whole (its good frames too), so the log
        # ends at an earlier read's end; acks never pass it.
        assert 0 < store.max_phy_offset <= good
        assert max(fake.acks) <= store.max_phy_offset
        written = b"".join(bytes(f.buf[: f.wrote_position]) for f in store.commitlog.files.files)
        assert written == frames_bodies(frames, store.max_phy_offset, batch)
    finally:
        await service.close()
        await asyncio.to_thread(store.close)


def frames_bodies(frames: bytes, size: int, batch: int) -> bytes:
    """The first `size` body bytes of `frames` (TRANSFER frames of `batch` bytes each)."""
    header = len(TransferHeader(0, 0, 0, 0, 0).encode())
    out = bytearray()
    pos = 0
    while len(out) < size:
        out += frames[pos + header : pos + header + batch]
        pos += header + batch
    return bytes(out[:size])


async def test_no_consistent_point_truncates_nothing(tmp_path: Path) -> None:
    node_root = tmp_path / "cluster"
    made = Cluster(node_root)
    try:
        old: Node = await made.node(1)
        await old.service.become_master(5, frozenset({1}), 1)
        await send(old, 10)
        end = old.store.max_phy_offset
        await old.service.close()
        fake = FakeMaster(b"", max_offset=100, entries=((2, 0),))  # shares no epoch
        async with fake as master_address:
            await old.service.become_slave(master_address, 6)
            await wait_until(lambda: fake.connections >= 2, timeout_s=20,
                             what="retried after finding no consistent point")
        assert old.store.max_phy_offset == end
        assert fake.acks == []
    finally:
        await made.close()


async def test_a_broken_data_rule_on_the_slave_ends_the_service(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `DataInvariantError` is never caught locally: `run()` ends with it (the node stops)."""
    master = await cluster.node(1)
    await master.service.become_master(1, frozenset({1}), 1)
    await send(master, 3)
    slave = await cluster.node(2)

    def broken(offset: int, parts: object) -> None:
        raise DataInvariantError(f"test: append at {offset} breaks a rule")

    # The slave appends the bodies of each read as one run.
    monkeypatch.setattr(slave.store, "append_replicated_run", broken)
    runner = asyncio.create_task(slave.service.run())
    await slave.service.become_slave(address(master), 1)
    with pytest.raises(DataInvariantError, match="breaks a rule"):
        async with asyncio.timeout(20):
            await runner


async def test_garbage_a_master_confirms_is_never_dispatched_nor_led_over(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A master that sends valid records, then bytes that are no record, with a confirmOffset
    covering both (a broken or hostile master: TRANSFER bodies are raw commitlog bytes, which a
    slave appends unread, as Java's does). The slave's consumers get the valid records and
    nothing of the garbage; its dispatch stops there, saying why; and it refuses to become
    master over confirmed bytes that are no record (a broken data rule ends the node)."""
    source = await cluster.node(1)
    await source.service.become_master(1, frozenset({1}), 1)
    await send(source, 5)
    valid_end = source.store.max_phy_offset
    valid = source.store.commitlog.read(0, valid_end)
    garbage = b"\xab" * 300
    end = valid_end + len(garbage)
    frames = TransferHeader(end, 0, 1, 0, end).encode() + valid + garbage
    store, service = await fake_masters_slave(cluster.root)
    fake = FakeMaster(frames, max_offset=0, entries=((1, 0),), once=True)
    try:
        async with fake as master_address:
            await service.become_slave(master_address, 1)
            await wait_until(lambda: end in fake.acks, timeout_s=20, what="the slave acked")
        await wait_until(lambda: store.confirm_offset == end, timeout_s=20,
                         what="the confirm offset at the garbage's end")
        await wait_until(lambda: any("dispatch stopped" in r.message for r in caplog.records),
                         timeout_s=20, what="the slave said why its dispatch stopped")
        assert store.max_offset_in_queue("TopicTest", 0) == 5  # the valid records, no more
        assert store.reput_from_offset == valid_end
        assert f"phy_offset={valid_end}" in caplog.text
        with pytest.raises(DataInvariantError, match=f"the record at {valid_end}"):
            await service.become_master(2, frozenset({2}), 1)
    finally:
        await service.close()
        await asyncio.to_thread(store.close)
