"""AutoSwitchHA on loopback: real stores (files under tmp_path), real TCP, one event loop.

Roles come from the test (the controller work is not built yet); a "fixed controller" applies
every SyncStateSet proposal at once, as a controller that accepts it would.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from broker.metrics import BrokerMetrics
from ha.client import INLINE_READ_BYTES, READ_CHUNK_BYTES
from ha.config import HAConfig
from ha.frames import (
    MasterFrameDecoder,
    SlaveAck,
    SlaveHandshake,
    TransferFrame,
)
from ha.service import AutoSwitchHAService
from store.message_store import MessageStore
from tests.remoting.support import wait_until
from tests.support.store_helpers import message, read_all, small_config

FILE_SIZE = 64 * 1024


@dataclass
class Node:
    """One broker's store and HA service; `proposals` records SyncStateSet proposals."""

    broker_id: int
    store: MessageStore
    service: AutoSwitchHAService
    proposals: list[frozenset[int]] = field(default_factory=list)
    sss_epoch: int = 1

    def commitlog_bytes(self) -> bytes:
        return b"".join(bytes(f.buf[: f.wrote_position]) for f in self.store.commitlog.files.files)


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.nodes: dict[int, Node] = {}
        self.replicas = {1, 2, 3}
        self.auto_apply = True

    async def node(self, broker_id: int, **ha: object) -> Node:
        config = small_config(self.root / f"b{broker_id}", enable_controller_mode=True)
        store = MessageStore(config)
        await asyncio.to_thread(store.open)
        holder: list[Node] = []

        def propose(proposal: frozenset[int], epoch: int) -> None:
            node = holder[0]
            node.proposals.append(proposal)
            if self.auto_apply:
                node.sss_epoch = epoch + 1
                asyncio.get_running_loop().call_soon(
                    node.service.apply_sync_state_set, proposal, epoch + 1)

        settings = {"ha_listen_port": 0, "bind_address": "127.0.0.1",
                    "ha_send_heartbeat_interval_ms": 200, "ha_housekeeping_interval_ms": 2000,
                    "ha_transfer_batch_size": 4096, "check_sync_state_set_period_ms": 100,
                    "ha_max_time_slave_not_catchup_ms": 1000, "slave_timeout_ms": 3000,
                    "reconnect_interval_ms": 50, **ha}
        service = AutoSwitchHAService(
            store, HAConfig(broker_id=broker_id, **settings),  # type: ignore[arg-type]
            replica_ids=lambda: self.replicas, propose_sync_state_set=propose,
        )
        await service.start()
        node = Node(broker_id, store, service)
        holder.append(node)
        self.nodes[broker_id] = node
        return node

    async def close(self) -> None:
        for node in self.nodes.values():
            await node.service.close()
            await asyncio.to_thread(node.store.close)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        await made.close()


def address(node: Node) -> tuple[str, int]:
    return ("127.0.0.1", node.service.ha_port)


async def send(node: Node, count: int, *, size: int = 700, tag: str = "m") -> list[bool]:
    """Append `count` messages on `node` and wait for their replica acks; True = acked."""
    results = []
    for i in range(count):
        put = await node.store.put_message(message(f"{tag}-{i}".encode() * (size // 8)))
        results.append(await node.service.wait_for_replicas(put.append.end_offset))
    return results


async def fill_to(node: Node, end: int, body: bytes) -> None:
    """Append messages of `body` on `node` until its commitlog reaches `end` (a backlog)."""
    while node.store.max_phy_offset < end:
        await node.store.put_message(message(body))


async def slave_in_a_backlog(cluster: Cluster, body: bytes) -> tuple[Node, Node]:
    """A master at epoch 1 with a backlog of 16 reads and a slave part-way through it (its pump
    running): (master, slave)."""
    master = await cluster.node(1)
    await master.service.become_master(1, frozenset({1}), 1)
    await fill_to(master, 16 * READ_CHUNK_BYTES, body)
    slave = await cluster.node(2)
    await slave.service.become_slave(address(master), 1)
    await wait_until(lambda: slave.store.max_phy_offset > 2 * READ_CHUNK_BYTES, timeout_s=30,
                     what="the slave took part of the backlog")
    return master, slave


def pulled_bodies(store: MessageStore) -> Iterator[bytes]:
    offset = 0
    while True:
        result = store.get_messages("TopicTest", 0, offset, max_count=64, max_bytes=1 << 30)
        if not result.messages:
            return
        yield from result.messages
        offset = result.next_begin_offset


async def test_master_and_two_slaves_end_byte_identical(cluster: Cluster) -> None:
    master = await cluster.node(1)
    await master.service.become_master(1, frozenset({1}), 1)
    assert await send(master, 150) == [True] * 150  # alone: acknowledged at once
    slaves = [await cluster.node(2), await cluster.node(3)]
    for slave in slaves:
        await slave.service.become_slave(address(master), 1)
    await wait_until(lambda: master.service.sync_state_set is not None
                     and master.service.sync_state_set.local == {1, 2, 3},
                     timeout_s=20, what="both slaves joined the SyncStateSet")
    # With allAckInSyncStateSet every send now waits for both slaves.
    assert await send(master, 150, tag="n") == [True] * 150
    end = master.store.max_phy_offset
    assert end > 2 * FILE_SIZE  # crossed commitlog files
    await wait_until(lambda: all(s.store.max_phy_offset == end for s in slaves),
                     timeout_s=20, what="slaves caught up")
    for slave in slaves:
        assert slave.commitlog_bytes() == master.commitlog_bytes()
        assert slave.store.epoch_cache == master.store.epoch_cache
        await wait_until(lambda s=slave: s.store.confirm_offset == end,  # type: ignore[misc]
                         timeout_s=10, what="slave confirm offset reached the end")
        # A slave dispatches its consume queues in a worker thread after confirming: compare
        # what a pull sees once both stores have dispatched up to the confirm offset.
        await wait_until(lambda s=slave: s.store.dispatch_behind_bytes  # type: ignore[misc]
                         == master.store.dispatch_behind_bytes == 0,
                         timeout_s=10, what="both consume queues dispatched to the end")
        assert list(pulled_bodies(slave.store)) == list(pulled_bodies(master.store))
    assert master.store.confirm_offset == end


async def test_slave_restarted_catches_up(cluster: Cluster, tmp_path: Path) -> None:
    master = await cluster.node(1)
    await master.service.become_master(1, frozenset({1}), 1)
    slave = await cluster.node(2)
    await slave.service.become_slave(address(master), 1)
    await send(master, 50)
    await wait_until(lambda: slave.store.max_phy_offset == master.store.max_phy_offset,
                     timeout_s=20, what="slave caught up")
    await slave.service.close()
    await asyncio.to_thread(slave.store.close)
    del cluster.nodes[2]
    await send(master, 120, tag="while-down")  # shrink: the slave is gone, writes go on
    restarted = await cluster.node(2)
    await restarted.service.become_slave(address(master), 1)
    await wait_until(lambda: restarted.store.max_phy_offset == master.store.max_phy_offset,
                     timeout_s=20, what="restarted slave caught up")
    assert restarted.commitlog_bytes() == master.commitlog_bytes()


async def test_a_catching_up_slave_dispatches_after_the_backlog(cluster: Cluster) -> None:
    """The consume queues wait while a backlog streams in (ha/client.py DISPATCH_CATCH_UP_BYTES):
    nothing is dispatched while the slave is a read or more behind the master's end, and all of
    it is once the slave has caught up."""
    master = await cluster.node(1)
    await master.service.become_master(1, frozenset({1}), 1)
    await fill_to(master, 4 * READ_CHUNK_BYTES, b"b" * 4000)
    end = master.store.max_phy_offset
    slave = await cluster.node(2)
    samples: list[tuple[int, int]] = []  # (slave max_phy_offset, reput offset)

    async def sample() -> None:
        while True:
            samples.append((slave.store.max_phy_offset, slave.store.reput_from_offset))
            await asyncio.sleep(0)

    sampler = asyncio.create_task(sample())
    try:
        await slave.service.become_slave(address(master), 1)
        await wait_until(lambda: slave.store.reput_from_offset == end, timeout_s=30,
                         what="the slave dispatched the whole backlog")
    finally:
        sampler.cancel()
    behind = [reput for max_offset, reput in samples if max_offset < end - READ_CHUNK_BYTES]
    assert len(behind) > 10, "the backlog streamed in too few loop turns to tell"
    assert set(behind) == {0}, "dispatched while a read or more behind the master"
    assert slave.store.max_offset_in_queue("TopicTest", 0) == \
        master.store.max_offset_in_queue("TopicTest", 0) > 0


async def test_a_backlog_across_an_epoch_change_is_pumped_off_the_loop(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog is taken by the slave's pump (ha/client.py `HAClient._pump`) in a worker
    thread: the loop's own appends are live-traffic sized (a read of at most
    INLINE_READ_BYTES), the larger ones run outside its thread. The epoch change inside the
    backlog goes back to the loop (the epoch entry is written there) and the pump goes on: the
    slave ends byte-identical, with the master's epoch entries."""
    master = await cluster.node(1)
    await master.service.become_master(1, frozenset({1}), 1)
    body = b"e" * 4000
    await fill_to(master, 3 * READ_CHUNK_BYTES, body)
    epoch_2_start = master.store.max_phy_offset
    await master.service.become_master(2, frozenset({1}), 2)
    await fill_to(master, epoch_2_start + 3 * READ_CHUNK_BYTES, body)
    slave = await cluster.node(2)
    loop_thread = threading.get_ident()
    on_loop: list[int] = []  # sizes of the appends made in the loop's thread
    off_loop: list[int] = []
    append = slave.store.append_replicated_run_blocking

    def recorded(phy_offset: int, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        append(phy_offset, parts)
        (on_loop if threading.get_ident() == loop_thread else off_loop).append(
            sum(map(len, parts)))

    monkeypatch.setattr(slave.store, "append_replicated_run_blocking", recorded)
    await slave.service.become_slave(address(master), 2)
    await wait_until(lambda: slave.store.max_phy_offset == master.store.max_phy_offset,
                     timeout_s=30, what="the slave caught up")
    assert slave.commitlog_bytes() == master.commitlog_bytes()
    assert [(e.epoch, e.start_offset) for e in slave.store.epoch_cache] == \
        [(e.epoch, e.start_offset) for e in master.store.epoch_cache] == \
        [(1, 0), (2, epoch_2_start)]
    assert sum(on_loop) + sum(off_loop) == master.store.max_phy_offset
    assert max(on_loop, default=0) <= INLINE_READ_BYTES, on_loop
    assert max(off_loop, default=0) > INLINE_READ_BYTES, "the pump never took a read"


async def test_a_slave_elected_while_pumping_a_backlog_stops_it_and_leads(
    cluster: Cluster,
) -> None:
    """The controller elects a slave while its pump takes a backlog in a worker thread: the
    pump stops after its current read, before the store cuts the tail and writes the epoch
    entry. The new master's log is a prefix of the old one (whole records), its epoch 2 starts
    at its end, and it takes writes."""
    master, slave = await slave_in_a_backlog(cluster, b"p" * 4000)
    await slave.service.become_master(2, frozenset({2}), 2)
    cut = slave.store.max_phy_offset
    assert cut < master.store.max_phy_offset, "the backlog was through before the election"
    assert slave.commitlog_bytes() == master.commitlog_bytes()[:cut]
    assert [(e.epoch, e.start_offset) for e in slave.store.epoch_cache] == [(1, 0), (2, cut)]
    put = await slave.store.put_message(message(b"after the election"))
    assert put.append.end_offset > cut


async def test_a_master_gone_while_the_slave_pumps_a_backlog_then_back(
    cluster: Cluster,
) -> None:
    """The master's HA service goes while the slave's pump takes a backlog: the pump's read
    fails, the session ends, and the slave keeps a prefix of the master's log. The master's
    service back, the slave reconnects, truncates to the consistent point and ends
    byte-identical."""
    master, slave = await slave_in_a_backlog(cluster, b"g" * 4000)
    port = master.service.ha_port
    await master.service.close()
    await wait_until(lambda: slave.service.client is not None
                     and slave.service.client.state.name != "TRANSFER", timeout_s=20,
                     what="the slave saw its master go")
    held = slave.store.max_phy_offset
    assert held < master.store.max_phy_offset, "the backlog was through before the master went"
    assert slave.commitlog_bytes() == master.commitlog_bytes()[:held]
    master.service.config = replace(master.service.config, ha_listen_port=port)
    await master.service.start()
    await master.service.become_master(1, frozenset({1}), 1)
    await wait_until(lambda: slave.store.max_phy_offset == master.store.max_phy_offset,
                     timeout_s=30, what="the slave caught up after the master came back")
    assert slave.commitlog_bytes() == master.commitlog_bytes()


async def test_master_restarted_at_the_same_epoch_keeps_its_epoch_entry(
    cluster: Cluster,
) -> None:
    """The controller kept this broker as master at epoch 1 across its restart (the controller
    was down when it died): leading epoch 1 again keeps the entry (1, 0), so a slave whose entry
    for epoch 1 starts at 0 still shares an epoch with it and catches up (re-labelling epoch 1
    from the restart's offset left such slaves without a common epoch for good)."""
    master = await cluster.node(1)
    await master.service.become_master(1, frozenset({1}), 1)
    slave = await cluster.node(2)
    await slave.service.become_slave(address(master), 1)
    await send(master, 50)
    await wait_until(lambda: slave.store.max_phy_offset == master.store.max_phy_offset,
                     timeout_s=20, what="slave caught up")
    await master.service.close()
    await asyncio.to_thread(master.store.close)
    del cluster.nodes[1]
    restarted = await cluster.node(1)
    await restarted.service.become_master(1, frozenset({1}), 1)
    assert [(e.epoch, e.start_offset) for e in restarted.store.epoch_cache] == [(1, 0)]
    await send(restarted, 40, tag="after-restart")
    await slave.service.become_slave(address(restarted), 1)
    await wait_until(lambda: slave.store.max_phy_offset == restarted.store.max_phy_offset,
                     timeout_s=20, what="slave caught up with the restarted master")
    assert slave.commitlog_bytes() == restarted.commitlog_bytes()
    assert slave.store.epoch_cache == restarted.store.epoch_cache


async def test_divergent_tail_is_cut_to_the_new_masters_epoch_start(cluster: Cluster) -> None:
    """An old master wrote unreplicated data in epoch 1; the new master (epoch 2) never had it.
    Rejoining as a slave, the old master cuts exactly those bytes and takes the new ones."""
    old = await cluster.node(1)
    await old.service.become_master(1, frozenset({1}), 1)
    new = await cluster.node(2)
    await new.service.become_slave(address(old), 1)
    await send(old, 40)
    common_end = old.store.max_phy_offset
    await wait_until(lambda: new.store.max_phy_offset == common_end, timeout_s=20,
                     what="slave caught up before the split")
    await new.service.close()  # partition: the slave no longer receives
    await send(old, 25, tag="unreplicated")
    assert old.store.max_phy_offset > common_end
    # The controller elects the slave at epoch 2; the old master learns it and follows.
    await new.service.start()
    await new.service.become_master(2, frozenset({2}), 2)
    await send(new, 30, tag="epoch2")
    await old.service.become_slave(address(new), 2)
    await wait_until(lambda: old.store.max_phy_offset == new.store.max_phy_offset
                     and old.service.client is not None
                     and old.service.client.state.name == "TRANSFER",
                     timeout_s=20, what="old master caught up as slave")
    assert old.commitlog_bytes() == new.commitlog_bytes()
    assert [(e.epoch, e.start_offset) for e in old.store.epoch_cache] == \
        [(1, 0), (2, common_end)]


async def test_shrink_on_disconnect_then_expand_on_return(cluster: Cluster) -> None:
    master = await cluster.node(1)
    await master.service.become_master(1, frozenset({1}), 1)
    slave = await cluster.node(2)
    await slave.service.become_slave(address(master), 1)
    await wait_until(lambda: master.service.sync_state_set is not None
                     and 2 in master.service.sync_state_set.local, timeout_s=20,
                     what="expand")
    await slave.service.close()
    await wait_until(lambda: master.service.sync_state_set is not None
                     and master.service.sync_state_set.local == {1}, timeout_s=20,
                     what="shrink after the connection closed")
    assert frozenset({1}) in master.proposals
    await slave.service.start()
    await slave.service.become_slave(address(master), 1)
    await wait_until(lambda: master.service.sync_state_set is not None
                     and master.service.sync_state_set.local == {1, 2}, timeout_s=20,
                     what="expand again")


async def test_send_times_out_while_a_member_is_gone_and_the_shrink_is_pending(
    cluster: Cluster,
) -> None:
    """#5663/M3: until the controller commits the shrink, the dropped slave still counts."""
    cluster.auto_apply = False
    master = await cluster.node(1, slave_timeout_ms=300)
    await master.service.become_master(1, frozenset({1, 2}), 1)
    confirm_before = master.store.confirm_offset
    assert await send(master, 1) == [False]  # FLUSH_SLAVE_TIMEOUT: stored, not confirmed
    assert master.store.confirm_offset == confirm_before  # frozen (#6662)


async def test_master_refuses_a_rogue_slave_and_clamps_acks(cluster: Cluster) -> None:
    master = await cluster.node(1)
    await master.service.become_master(1, frozenset({1}), 1)
    await send(master, 5)
    reader, writer = await asyncio.open_connection(*address(master))
    writer.write(SlaveHandshake(False, False, 99).encode())  # not a replica
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), timeout=10) == b""  # closed, nothing sent
    writer.close()
    reader, writer = await asyncio.open_connection(*address(master))
    writer.write(SlaveHandshake(False, False, 2).encode())
    writer.write(SlaveAck(master.store.max_phy_offset + 1).encode())  # more than it holds
    await writer.drain()
    decoder = MasterFrameDecoder("master")
    while data := await asyncio.wait_for(reader.read(65536), timeout=10):
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not None:
            assert not isinstance(frame, TransferFrame)
    writer.close()
    assert master.service.sync_state_set is not None
    assert master.service.sync_state_set.local == {1}
    assert master.service.ack_by_slave() == {}


async def test_role_swap_under_sync_ack_load_loses_no_acknowledged_message(
    cluster: Cluster,
) -> None:
    """The test plays the controller: A is master of {A, B} under a steady allAck load; then B
    becomes master at epoch 2 (A first stops taking writes and follows B). Every send answered
    SUCCESS, on either master, is in both final logs."""
    a = await cluster.node(1)
    b = await cluster.node(2)
    await a.service.become_master(1, frozenset({1}), 1)
    await b.service.become_slave(address(a), 1)
    await wait_until(lambda: a.service.sync_state_set is not None
                     and a.service.sync_state_set.local == {1, 2}, timeout_s=20,
                     what="B joined A's SyncStateSet")
    acked: list[bytes] = []
    masters = {"current": a}
    stop = asyncio.Event()

    async def producer(worker: int) -> None:
        index = 0
        while not stop.is_set():
            node = masters["current"]
            body = f"w{worker}-{index}".encode() * 30
            try:
                put = await node.store.put_message(message(body))
            except Exception:  # noqa: BLE001 - fenced during the swap: a definite refusal
                await asyncio.sleep(0.001)
                continue
            if await node.service.wait_for_replicas(put.append.end_offset):
                acked.append(body)
            index += 1

    workers = [asyncio.create_task(producer(w)) for w in range(4)]
    await wait_until(lambda: len(acked) >= 200, timeout_s=30, what="load on A")
    await a.service.become_slave(address(b), 2)  # A fences first: no write after this
    await b.service.become_master(2, frozenset({2}), 2)
    masters["current"] = b
    await wait_until(lambda: b.service.sync_state_set is not None
                     and b.service.sync_state_set.local == {1, 2}, timeout_s=30,
                     what="A rejoined as B's slave")
    count_at_swap = len(acked)
    await wait_until(lambda: len(acked) >= count_at_swap + 200, timeout_s=30, what="load on B")
    stop.set()
    await asyncio.gather(*workers)
    await wait_until(lambda: a.store.confirm_offset == b.store.max_phy_offset, timeout_s=20,
                     what="A caught up with B, and confirmed all of it")
    # A slave dispatches its consume queues in a worker thread after confirming: read once that
    # is done (a dispatch that never finishes fails here, by the deadline).
    await wait_until(lambda: a.store.dispatch_behind_bytes == 0
                     and b.store.dispatch_behind_bytes == 0, timeout_s=20,
                     what="both consume queues dispatched up to the confirm offset")
    for node in (a, b):
        stored = {record.body for record in read_all(node.store, "TopicTest", 0)}
        assert not [body for body in acked if body not in stored]
    assert a.commitlog_bytes() == b.commitlog_bytes()


async def test_prometheus_exports_the_ha_figures(cluster: Cluster) -> None:
    master = await cluster.node(1)
    await master.service.become_master(3, frozenset({1}), 1)
    slave = await cluster.node(2)
    await slave.service.become_slave(address(master), 3)
    await wait_until(lambda: master.service.sync_state_set is not None
                     and master.service.sync_state_set.local == {1, 2}, timeout_s=20,
                     what="slave joined")
    await send(master, 10)
    await wait_until(lambda: master.service.status().slaves[0].lag_bytes == 0, timeout_s=20,
                     what="slave caught up")
    metrics = BrokerMetrics(cluster="c", node_id="broker-a")
    metrics.bind_ha(master.service.status)
    text = metrics.render().decode()
    end = master.store.max_phy_offset
    node = 'cluster="c",node_id="broker-a",node_type="broker"'
    assert f"pyrmq_ha_master_epoch{{{node}}} 3.0" in text
    assert f"pyrmq_ha_sync_state_set_size{{{node}}} 2.0" in text
    assert f"pyrmq_ha_confirm_offset{{{node}}} {float(end)}" in text
    assert re.search(rf'pyrmq_ha_slave_ack_offset{{{node},slave_address="[\d.:]+",'
                     rf'slave_broker_id="2"}} {float(end)}', text)
    assert re.search(r'pyrmq_ha_slave_in_sync\{.*slave_broker_id="2"\} 1.0', text)
    assert re.search(r'pyrmq_ha_slave_transfer_bytes_total\{.*slave_broker_id="2"\} [1-9]', text)
