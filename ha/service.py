"""AutoSwitchHAService: the node's replication role, its HA listener, connections and client.

A shell around the pure cores (master_protocol, slave_protocol, sync_state_set). It owns:
- the role (none, master at an epoch, slave of a master) and the role-switch API the
  ReplicasManager calls (`become_master`, `become_slave`), each step in its durable order;
- on a master: the HA listener (`haListenPort`) with one `HAConnection` per slave, the
  SyncStateSet, confirmOffset, and the sends waiting for replica acks (`wait_for_replicas`),
  completed in offset order from one place (`_on_ack_or_change`) as acks arrive, and a
  moved confirmOffset shipped to slaves idle for CONFIRM_SHIP_DELAY_MS (one timer);
- on a slave: one `HAClient` task replicating from the master.

Invariants:
- A master accepts client writes only after its epoch entry is persisted (store.become_master).
- A slave never accepts client writes (the store stays fenced).
- confirmOffset on a master with more than one SyncStateSet member (union view) is
  `compute_confirm_offset` (frozen while a member is disconnected, monotone); alone, it follows
  the max offset.
- A waiting send completes SUCCESS only when `is_acknowledged` says so for its end offset
  (checked as `acknowledged_offset`, once per ack for all waiting sends);
  at `slaveTimeout` it ends FLUSH_SLAVE_TIMEOUT (stored, not confirmed); on losing the master
  role it ends the same way.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Final

from ha.client import HAClient
from ha.config import HAConfig
from ha.connection import HAConnection
from ha.master_protocol import Acked, StoreView
from ha.sync_state_set import (
    SyncStateSet,
    acknowledged_offset,
    can_expand,
    compute_confirm_offset,
    shrink_sync_state_set,
)
from remoting.bodies import HAClientRuntimeInfo, HAConnectionRuntimeInfo, HARuntimeInfo
from store.message_store import MessageStore

log = logging.getLogger(__name__)


# A moved confirmOffset is shipped to a slave in an empty TRANSFER frame only once its connection
# has written nothing for this long (data frames carry it too); the service looks this long
# after it moved, and again while it keeps moving. Under an allAck load nearly every ack round
# moves confirmOffset and new data follows within a round trip: an empty frame at once cost the
# master a writer turn and a write per slave per round, and each slave a wake-up. A slave
# dispatches a received confirmOffset within DISPATCH_DELAY_MS (5 ms) anyway (ha/client.py).
CONFIRM_SHIP_DELAY_MS: Final = 2


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class SlaveStatus:
    """One connected slave, as the master sees it (metrics, haStatus)."""

    broker_id: int
    address: str
    ack_offset: int
    lag_bytes: int
    lag_s: float  # time since it was last caught up (0 when caught up)
    in_sync: bool
    transferred_bytes: int


@dataclass(frozen=True, slots=True)
class HAStatus:
    role: str
    master_epoch: int
    confirm_offset: int
    max_phy_offset: int
    sync_state_set: tuple[int, ...]
    waiting_sends: int
    slaves: tuple[SlaveStatus, ...]


class HARole(enum.Enum):
    NONE = "NONE"  # fenced: no role yet
    MASTER = "MASTER"
    SLAVE = "SLAVE"


# Proposal callback: (proposed SyncStateSet, current sync_state_set_epoch). The controller work
# wires it to ALTER_SYNC_STATE_SET and calls `apply_sync_state_set` with the answer.
ProposeSyncStateSet = Callable[[frozenset[int], int], None]


class AutoSwitchHAService:
    """See the module docstring. Run `run()` in the node's TaskGroup."""

    def __init__(
        self,
        store: MessageStore,
        config: HAConfig,
        *,
        replica_ids: Callable[[], Collection[int]],
        propose_sync_state_set: ProposeSyncStateSet,
        clock_ms: Callable[[], int] = monotonic_ms,
        peer_refusal: Callable[[int, str], Awaitable[str | None]] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.clock_ms = clock_ms
        self._replica_ids = replica_ids
        # Why a slave id's handshake from a peer address is refused, beyond `replica_ids`
        # (the broker's check against the controller's members, M16); None: no such check.
        self.peer_refusal = peer_refusal
        self._propose = propose_sync_state_set
        self.role = HARole.NONE
        self.master_epoch: int | None = None
        self.sync_state_set: SyncStateSet | None = None
        self.connections: set[HAConnection] = set()
        self._server: asyncio.Server | None = None
        self._client: HAClient | None = None
        self._client_task: asyncio.Task[None] | None = None
        self._waiters: collections.deque[tuple[int, asyncio.Future[bool]]] = \
            collections.deque()
        # The same waiters by deadline (slaveTimeout after each send, so in arrival order),
        # expired by one timer for the earliest: no timer per send.
        self._deadlines: collections.deque[tuple[float, asyncio.Future[bool]]] = \
            collections.deque()
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._confirm_ship_timer: asyncio.TimerHandle | None = None
        self._confirm_looked_at = -1  # confirmOffset when the ship timer last looked
        self.confirm_idle_ms = CONFIRM_SHIP_DELAY_MS  # the connections' (their cores')
        self.ha_port = 0
        store.replica_need = self.offset_needed_by_slaves
        self._failure: BaseException | None = None
        self._failed = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind the HA listener (port 0 picks a free one)."""
        self._server = await asyncio.start_server(
            self._accept, self.config.bind_address, self.config.ha_listen_port
        )
        self.ha_port = self._server.sockets[0].getsockname()[1]
        log.info("HA listener started port=%d", self.ha_port)

    async def run(self) -> None:
        """The periodic SyncStateSet check until cancelled (the listener runs on its own).

        An unexpected error of a connection or of the HA client (e.g. a `DataInvariantError`
        from the store) ends `run()` with that error, so the node stops (STYLE §4)."""
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.config.check_sync_state_set_period_ms / 1000):
                        await self._failed.wait()
                if self._failure is not None:
                    raise self._failure
                self.check_sync_state_set()
        finally:
            await self.close()

    def _fail(self, err: BaseException) -> None:
        log.error("HA failure, stopping: %r", err)
        if self._failure is None:
            self._failure = err
        self._failed.set()

    def _client_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        err = task.exception()
        if err is not None:
            self._fail(err)

    async def close(self) -> None:
        if self._confirm_ship_timer is not None:
            self._confirm_ship_timer.cancel()
            self._confirm_ship_timer = None
        await self._stop_client()
        await self._close_connections()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self._fail_waiters()

    # ------------------------------------------------------------------ role switch

    async def become_master(
        self, epoch: int, sync_state_set: frozenset[int], sync_state_set_epoch: int
    ) -> None:
        """changeToMaster (docs/ha-protocol.md §12.1): stop replicating, cut a partial tail, persist
        the epoch entry `(epoch, max_phy_offset)`, then accept writes. Raises `ValueError` for an
        epoch below the last local one (nothing changes)."""
        last = self.store.epoch_cache.last_epoch()
        if last is not None and epoch < last:
            raise ValueError(f"become master at epoch {epoch}: the local last epoch is {last}")
        self.store.fenced = True
        await self._stop_client()
        await self._close_connections()
        self._fail_waiters()
        start = await self.store.become_master(epoch)
        self.sync_state_set = SyncStateSet(master_broker_id=self.config.broker_id,
                                           local=sync_state_set,
                                           sync_state_set_epoch=sync_state_set_epoch)
        self.master_epoch = epoch
        self.role = HARole.MASTER
        self._update_confirm_offset()
        self.store.fenced = False
        log.info("became master master_epoch=%d epoch_start_offset=%d sync_state_set=%s",
                 epoch, start, sorted(self.sync_state_set.local))

    async def become_slave(self, master_ha_address: tuple[str, int], epoch: int) -> None:
        """changeToSlave (§12.3): refuse writes, drop slave connections, replicate from the
        master at `master_ha_address` (host, HA port)."""
        self.store.fenced = True
        self.role = HARole.SLAVE
        self.master_epoch = epoch
        self.sync_state_set = None
        self._fail_waiters()
        await self._close_connections()
        await self._stop_client()
        self.store.set_confirm_offset(min(self.store.confirm_offset, self.store.max_phy_offset))
        client = HAClient(self.store, self.config, master_ha_address, clock_ms=self.clock_ms)
        self._client = client
        self._client_task = asyncio.create_task(client.run(), name="ha-client")
        self._client_task.add_done_callback(self._client_done)
        log.info("became slave master_epoch=%d master_ha_address=%s:%d", epoch,
                 *master_ha_address)

    @property
    def client(self) -> HAClient | None:
        return self._client

    async def _stop_client(self) -> None:
        task, self._client_task, self._client = self._client_task, None, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _close_connections(self) -> None:
        connections = list(self.connections)
        for connection in connections:
            connection.close()
        for connection in connections:
            await connection.wait_closed()

    # ------------------------------------------------------------------ master: connections

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = "{}:{}".format(*peername[:2]) if peername else "unknown"
        if self.role is not HARole.MASTER:
            log.warning("HA connection refused: not master peer=%s role=%s", peer,
                        self.role.name)
            writer.close()
            return
        connection = HAConnection(self, reader, writer, peer)
        self.connections.add(connection)
        try:
            await connection.run()
        except Exception as err:  # noqa: BLE001 - not a peer's fault (those end in run())
            self._fail(err)
        finally:
            self.connections.discard(connection)
            self._connection_closed(connection)

    def replica_ids(self) -> Collection[int]:
        return self._replica_ids()

    def store_view(self) -> StoreView:
        store = self.store
        return StoreView(store.max_phy_offset, store.min_phy_offset,
                         store.config.mapped_file_size_commit_log, store.epoch_cache.entries,
                         store.confirm_offset)

    def ack_by_slave(self) -> dict[int, int]:
        """Acked offsets of the slaves with a live connection that acked at least once."""
        acks: dict[int, int] = {}
        for connection in self.connections:
            proto = connection.protocol
            if proto.slave_broker_id is not None and proto.slave_ack_offset is not None:
                acks[proto.slave_broker_id] = max(acks.get(proto.slave_broker_id, -1),
                                                  proto.slave_ack_offset)
        return acks

    def offset_needed_by_slaves(self) -> int | None:
        """The lowest commitlog offset a connected slave still needs (None: no such slave, or
        not master): from its acked offset on (a reconnect resumes there), or, for a slave that
        acked 0 (empty) and is being fed, from where its transfer started. Retention keeps those
        files (store/retention.py) unless the disk is under pressure."""
        if self.role is not HARole.MASTER:
            return None
        needs = []
        for connection in self.connections:
            proto = connection.protocol
            ack = proto.slave_ack_offset
            if ack is None:
                continue
            if ack == 0 and proto.slave_request_offset == 0:
                start = proto.transfer_start_offset
                needs.append(start if start is not None else self.store.min_phy_offset)
            else:
                needs.append(ack)
        return min(needs, default=None)

    def on_ack(self, acked: Acked, last_master_max_offset: int) -> None:
        """A slave acked (§7.1): lastCaughtUpTime, expand, confirmOffset, waiters."""
        sss = self.sync_state_set
        if sss is None:
            return
        now = self.clock_ms()
        if not acked.is_async_learner and acked.max_offset >= last_master_max_offset:
            connection_time = now if acked.max_offset == self.store.max_phy_offset else \
                self._last_transfer_ms(acked.broker_id)
            sss.caught_up(acked.broker_id, connection_time)
            last = self.store.epoch_cache.last_entry()
            if acked.broker_id not in sss.local and last is not None and can_expand(
                slave_ack_offset=acked.max_offset, confirm_offset=self.store.confirm_offset,
                current_epoch_start_offset=last.start_offset,
                last_master_max_offset=last_master_max_offset, is_async_learner=False,
            ):
                self._propose_change(sss.local | {acked.broker_id}, "expand")
        if acked.broker_id in sss.view() and acked.max_offset < self.store.confirm_offset:
            # A member came back short (it lost a tail): shrink it out; it never lowers
            # confirmOffset (docs/reliability.md M4).
            self._propose_change(sss.local - {acked.broker_id}, "member behind confirm")
        self._on_ack_or_change()

    def _last_transfer_ms(self, broker_id: int) -> int:
        times = [c.protocol.last_transfer_time_ms for c in self.connections
                 if c.protocol.slave_broker_id == broker_id]
        return max(times, default=0)

    def caught_up(self, broker_id: int) -> None:
        """The writer of `broker_id`'s connection has nothing left to send (§9.3)."""
        if self.sync_state_set is not None:
            self.sync_state_set.caught_up(broker_id, self.clock_ms())

    def _connection_closed(self, connection: HAConnection) -> None:
        broker_id = connection.protocol.slave_broker_id
        sss = self.sync_state_set
        if broker_id is None or sss is None or self.role is not HARole.MASTER:
            return
        still = any(c.protocol.slave_broker_id == broker_id for c in self.connections)
        if not still and broker_id in sss.local:
            self._propose_change(sss.local - {broker_id}, "connection closed")
        self._on_ack_or_change()

    def _propose_change(self, proposal: frozenset[int], reason: str) -> None:
        sss = self.sync_state_set
        assert sss is not None
        proposed = sss.propose(proposal)
        if proposed is None:
            return
        log.info("proposing sync_state_set reason=%s old=%s new=%s sync_state_set_epoch=%d",
                 reason, sorted(sss.local), sorted(proposed), sss.sync_state_set_epoch)
        self._propose(proposed, sss.sync_state_set_epoch)

    def apply_sync_state_set(self, sync_state_set: frozenset[int], sync_state_set_epoch: int
                             ) -> None:
        """The controller's answer (or a polled replica info) for this master."""
        sss = self.sync_state_set
        if sss is None:
            return
        old = sss.local
        if sss.apply(sync_state_set, sync_state_set_epoch):
            log.info("sync_state_set applied old=%s new=%s sync_state_set_epoch=%d",
                     sorted(old), sorted(sss.local), sync_state_set_epoch)
            self._on_ack_or_change()

    def sync_state_set_proposal_failed(self) -> None:
        """The controller refused (or never answered) the pending proposal: forget it, so the
        next expand or shrink check proposes again. Safe: the view shrinks back to the set the
        controller confirmed last, which holds every member a shrink was removing."""
        sss = self.sync_state_set
        if sss is not None and sss.pending is not None:
            sss.pending = None
            self._on_ack_or_change()

    def check_sync_state_set(self) -> None:
        """The periodic shrink (§9.2)."""
        sss = self.sync_state_set
        if sss is None or self.role is not HARole.MASTER:
            return
        shrunk = shrink_sync_state_set(
            sss.local, master_broker_id=self.config.broker_id, now_ms=self.clock_ms(),
            last_caught_up_ms_by_slave=sss.last_caught_up_ms_by_slave,
            connected=self.ack_by_slave().keys(),
            ha_max_time_slave_not_catchup_ms=self.config.ha_max_time_slave_not_catchup_ms,
        )
        if shrunk != sss.local:
            self._propose_change(shrunk, "not caught up")

    # ------------------------------------------------------------------ confirm and waiters

    def _update_confirm_offset(self) -> None:
        sss = self.sync_state_set
        if sss is None:
            return
        view = sss.view()
        if len(view) <= 1 or not self.config.all_ack_in_sync_state_set:
            if not self.store.confirm_follows_max:
                self.store.set_confirm_offset(self.store.max_phy_offset)
                self.store.confirm_follows_max = True
            return
        previous = self.store.confirm_offset
        confirm = compute_confirm_offset(
            max_phy_offset=self.store.max_phy_offset, sync_state_set=view,
            master_broker_id=self.config.broker_id, ack_by_slave=self.ack_by_slave(),
            previous_confirm_offset=previous,
        )
        if self.store.confirm_follows_max or confirm != previous:
            self.store.set_confirm_offset(confirm)

    def _on_ack_or_change(self) -> None:
        """The one place waiting sends complete, in offset order."""
        confirm_before = self.store.confirm_offset
        self._update_confirm_offset()
        if self.store.confirm_offset != confirm_before and self._confirm_ship_timer is None \
                and self.connections:
            self._confirm_ship_timer = asyncio.get_running_loop().call_later(
                CONFIRM_SHIP_DELAY_MS / 1000, self._ship_confirm)
        waiters = self._waiters
        acknowledged = self._acknowledged_offset() if waiters else -1
        while waiters:
            end_offset, future = waiters[0]
            if future.done():
                waiters.popleft()
                continue
            if acknowledged is not None and end_offset > acknowledged:
                break
            waiters.popleft()
            future.set_result(True)
        deadlines = self._deadlines
        while deadlines and deadlines[0][1].done():
            deadlines.popleft()

    def _ship_confirm(self) -> None:
        """CONFIRM_SHIP_DELAY_MS after confirmOffset moved: the writers look (a connection idle
        that long ships it in an empty frame; one that wrote since sends nothing now). While
        confirmOffset keeps moving the timer looks again, so the last value reaches every
        slave within about two delays of the load's end."""
        self._confirm_ship_timer = None
        for connection in self.connections:
            connection.wakeup.set()
        confirm = self.store.confirm_offset
        if confirm != self._confirm_looked_at and self.connections:
            self._confirm_looked_at = confirm
            self._confirm_ship_timer = asyncio.get_running_loop().call_later(
                CONFIRM_SHIP_DELAY_MS / 1000, self._ship_confirm)

    def _acknowledged_offset(self) -> int | None:
        """`acknowledged_offset` now: a send ending at or below it has its replica acks
        (None: every send has them); -1 without a SyncStateSet (none has)."""
        sss = self.sync_state_set
        if sss is None:
            return -1
        return acknowledged_offset(
            sync_state_set=sss.view(), master_broker_id=self.config.broker_id,
            ack_by_slave=self.ack_by_slave(),
            all_ack_in_sync_state_set=self.config.all_ack_in_sync_state_set,
            in_sync_replicas=self.config.in_sync_replicas,
        )

    def _fail_waiters(self) -> None:
        while self._waiters:
            _, future = self._waiters.popleft()
            if not future.done():
                future.set_result(False)
        self._deadlines.clear()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None

    def _expire_waiters(self) -> None:
        """The deadline timer: sends waiting for `slaveTimeout` end False
        (FLUSH_SLAVE_TIMEOUT); the timer is set again for the next deadline."""
        self._deadline_timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and (deadlines[0][1].done() or deadlines[0][0] <= now):
            _, future = deadlines.popleft()
            if not future.done():
                future.set_result(False)
        if deadlines:
            self._deadline_timer = loop.call_at(deadlines[0][0], self._expire_waiters)

    def in_sync_replicas_enough(self) -> bool:
        """`minInSyncReplicas` check before an append (§11 step 2): False = refuse."""
        sss = self.sync_state_set
        return sss is not None and sss.in_sync_replicas_nums() >= self.config.min_in_sync_replicas

    @property
    def waiting_sends(self) -> int:
        return sum(1 for _, future in self._waiters if not future.done())

    async def wait_for_replicas(self, end_offset: int) -> bool:
        """Wait until the replicas have acked `end_offset` (True), or `slaveTimeout` passed or
        the master role ended (False: FLUSH_SLAVE_TIMEOUT). Call right after the append."""
        self.appended()
        sss = self.sync_state_set
        if sss is None or self.role is not HARole.MASTER:
            return False
        if not self._waiters:
            acknowledged = self._acknowledged_offset()
            if acknowledged is None or end_offset <= acknowledged:
                return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._waiters.append((end_offset, future))
        if len(self._waiters) > 1 and self._waiters[-2][0] > end_offset:
            # Appends run in offset order, but a SYNC_FLUSH wait can reorder the callers.
            self._waiters = collections.deque(sorted(self._waiters, key=lambda w: w[0]))
        deadline = loop.time() + self.config.slave_timeout_ms / 1000
        self._deadlines.append((deadline, future))
        if self._deadline_timer is None:
            self._deadline_timer = loop.call_at(deadline, self._expire_waiters)
        return await future  # a cancelled caller cancels its future: skipped from then on

    def status(self) -> HAStatus:
        """The figures of the metrics exporter (and, later, GET_BROKER_HA_STATUS)."""
        sss = self.sync_state_set
        view = sss.view() if sss is not None else frozenset()
        max_phy = self.store.max_phy_offset
        now = self.clock_ms()
        slaves = []
        for connection in list(self.connections):
            proto = connection.protocol
            if proto.slave_broker_id is None or proto.slave_ack_offset is None:
                continue
            ack = proto.slave_ack_offset
            caught_up = sss.last_caught_up_ms_by_slave.get(proto.slave_broker_id) \
                if sss is not None else None
            lag_s = 0.0 if ack >= max_phy or caught_up is None else (now - caught_up) / 1000
            slaves.append(SlaveStatus(proto.slave_broker_id, connection.peer, ack,
                                      max(0, max_phy - ack), lag_s,
                                      proto.slave_broker_id in view,
                                      connection.transferred_bytes))
        return HAStatus(self.role.name, -1 if self.master_epoch is None else self.master_epoch,
                        self.store.confirm_offset, max_phy, tuple(sorted(view)),
                        self.waiting_sends, tuple(slaves))

    def runtime_info(self) -> HARuntimeInfo:
        """GET_BROKER_HA_STATUS's figures (RocketMQ's HARuntimeInfo), as Java's
        AutoSwitchHAService.getRuntimeInfo fills them; see `HARuntimeInfo`."""
        now = self.clock_ms()
        max_phy = self.store.max_phy_offset
        if self.role is HARole.MASTER:
            sss = self.sync_state_set
            view = sss.view() if sss is not None else frozenset()
            connections = []
            for connection in sorted(self.connections, key=lambda c: c.peer):
                proto = connection.protocol
                ack = -1 if proto.slave_ack_offset is None else proto.slave_ack_offset
                connections.append(HAConnectionRuntimeInfo(
                    addr=connection.peer, slave_ack_offset=ack, diff=max_phy - ack,
                    in_sync=proto.slave_broker_id in view,
                    transferred_byte_in_second=connection.flow.per_second(now),
                    transfer_from_where=-1 if proto.next_transfer_from_where is None
                    else proto.next_transfer_from_where,
                ))
            return HARuntimeInfo(master=True, master_commit_log_max_offset=max_phy,
                                 in_sync_slave_nums=max(0, len(view) - 1),
                                 ha_connection_info=tuple(connections),
                                 ha_client_runtime_info=HAClientRuntimeInfo())
        client = self._client
        if client is None:
            return HARuntimeInfo(ha_client_runtime_info=HAClientRuntimeInfo(max_offset=max_phy))
        return HARuntimeInfo(ha_client_runtime_info=HAClientRuntimeInfo(
            master_addr=client.peer, max_offset=max_phy,
            transferred_byte_in_second=client.flow.per_second(now),
            last_read_timestamp=client.last_read_timestamp_ms,
            last_write_timestamp=client.last_write_timestamp_ms,
        ))

    def appended(self) -> None:
        """New data in the commitlog: confirm follows (alone) and the writers wake at once
        instead of at their next poll. With acks to wait for, an append cannot move
        confirmOffset (no slave has acked bytes past the old end): not recomputed."""
        sss = self.sync_state_set
        if self.store.confirm_follows_max or sss is None or len(sss.view()) <= 1 or \
                not self.config.all_ack_in_sync_state_set:
            self._update_confirm_offset()
        for connection in self.connections:
            connection.wakeup.set()
