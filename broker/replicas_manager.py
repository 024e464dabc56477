"""`ReplicasManager`: a controller-mode broker's role, from the controller
(docs/replicas-manager.md).

The asyncio shell over `broker/replicas_state.py` (the decisions) and `ControllerClient` (the
RPCs). It:
- starts fenced (the node fences the store; sends answer 14) and stays so until it has a role;
- holds back, after an abnormal recovery that lost committed data (the durable `lostCommitted`
  mark in the store root), from the controller for `lost_committed_hold_ms` so that another
  alive SyncStateSet member is elected (docs/reliability.md M9); the mark is removed only once a
  role has been taken after the hold (the controller has seen the broker come back);
- registers with the persistent broker id protocol (§4.4), heartbeats (904) every
  `brokerHeartbeatInterval` to every controller, polls GET_REPLICA_INFO every
  `syncBrokerMetadataPeriod`, refreshes the leader address every `syncControllerMetadataPeriod`,
  and takes NOTIFY_BROKER_ROLE_CHANGED (1008) pushes; with no master it asks the controller to
  elect (§4.5, §6.3);
- switches the HA service's role (`become_master` / `become_slave`) only for a strictly greater
  master epoch, one change at a time; re-registers with the name servers at once (the master as
  brokerId 0); a slave takes the master's HA address from the name server's answer, and only
  when that answer names the master the controller named;
- sends the HA service's SyncStateSet proposals as ALTER_SYNC_STATE_SET and applies a set only
  once the controller has accepted it (or a poll shows it);
- keeps a master lease (M17): while master, every heartbeat round is followed, on the same
  connections, by GET_REPLICA_INFO to the leader and CONTROLLER_GET_METADATA_INFO to every
  controller; the leader naming this broker master at its epoch, or a majority answering
  while the lease still held, renews the lease from the heartbeat's send time.
  `write_refusal()` (checked by the send path before every append) refuses sends once the
  lease has run out.

Slave metadata sync (topics, subscription groups, offsets; M11) is not here: the node gives a
`SlaveSync` hook, started with the master's address on becoming slave and stopped on becoming
master.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Final, Protocol

from broker.config import BrokerConfig
from broker.ha_peers import ha_peer_refusal
from broker.replicas_state import (
    ApplySyncStateSet,
    BecomeMaster,
    BecomeSlave,
    ControllerView,
    Elect,
    Ignore,
    MasterLease,
    RoleState,
    Source,
    apply,
    decide,
    default_lease_ms,
    lease_renews,
    lost_committed_hold_ms,
)
from controller.messages import BrokerReplicasInfo
from controller_client.addresses import DNS_REFRESH_MS, GetAddrInfo, lookup_controller_addrs
from controller_client.client import ControllerClient, decode_role_change
from controller_client.errors import (
    ControllerAddressLookupError,
    ControllerBrokerMetadataNotExistError,
    ControllerError,
)
from controller_client.messages import BrokerHeartbeatRequestHeader, SyncStateSet
from ha.service import AutoSwitchHAService
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import RegisterBrokerResponseHeader
from store.atomic_file import create_empty_durably, delete_durably
from store.message_store import MessageStore

log = logging.getLogger(__name__)

LOST_COMMITTED_FILE_NAME: Final = "lostCommitted"
"""pyrmq's durable M9 mark in `storePathRootDir` (empty file; present = committed data lost)."""
STARTUP_RETRY_MS: Final = 1_000
HA_ADDRESS_RETRY_MS: Final = 500
MEMBERS_REREAD_MS: Final = 1_000
"""A handshake of an unknown id reads the controller's members again at most this often."""


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def mark_lost_committed(store_root: Path) -> None:
    """Make the M9 mark durable (the store's recovery reported `lost_committed`)."""
    create_empty_durably(store_root / LOST_COMMITTED_FILE_NAME)


class SlaveSync(Protocol):
    """The slave's metadata sync from its master (M11, built elsewhere)."""

    def start(self, master_address: str) -> None: ...

    def stop(self) -> None: ...


class AnyOtherBroker(Collection[int]):
    """The HA handshake's replica check in controller mode: any controller id >= 1 but this
    broker's own. The check against the controller's members and their addresses (M16) comes
    after it: `ReplicasManager.ha_peer_refusal`."""

    def __init__(self, own_id: Callable[[], int | None]) -> None:
        self._own_id = own_id

    def __contains__(self, item: object) -> bool:
        return isinstance(item, int) and item >= 1 and item != self._own_id()

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _view(master_broker_id: int | None, master_address: str | None, master_epoch: int | None,
          sync_state_set: frozenset[int], sync_state_set_epoch: int | None) -> ControllerView:
    return ControllerView(master_broker_id, master_address, master_epoch, sync_state_set,
                          sync_state_set_epoch)


class ReplicasManager:
    """See the module docstring. `bind(ha, registration)` then `run()` in the node's TaskGroup."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        store: MessageStore,
        client: ControllerClient,
        broker_addr: str,
        bump_data_version: Callable[[int], None],
        slave_sync: SlaveSync | None = None,
        clock_ms: Callable[[], int] = monotonic_ms,
        dns_refresh_ms: int = DNS_REFRESH_MS,
        getaddrinfo: GetAddrInfo | None = None,
    ) -> None:
        self.config = config
        # fetchControllerAddrByDnsLookup: how often controllerAddr is resolved again, and with
        # what (the event loop's resolver unless a test gives another).
        self.dns_refresh_ms = dns_refresh_ms
        self._getaddrinfo = getaddrinfo
        self.store = store
        self.client = client
        self.broker_addr = broker_addr
        self._bump_data_version = bump_data_version
        # The slave's metadata sync; the node sets it once built, before `run()`.
        self.slave_sync = slave_sync
        self.clock_ms = clock_ms
        self.ha: AutoSwitchHAService | None = None
        self.registration: _Registration | None = None
        self.role: RoleState | None = None
        self.lease = MasterLease(default_lease_ms(config.controller_heart_beat_timeout_ms))
        self._lock = asyncio.Lock()
        self._alter_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._slave_task: asyncio.Task[None] | None = None
        self._ha_address: dict[str, str] = {}  # master remoting address -> its HA address
        self._ha_address_known = asyncio.Event()
        self._last_heartbeat_ms: int | None = None
        self._mark = config.store.store_path_root_dir / LOST_COMMITTED_FILE_NAME
        self.lost_committed = self._mark.exists()
        self.role_changes = 0
        # The controller's registered ids and addresses of this broker set (GET_SYNC_STATE_DATA),
        # which a master's HA handshakes are checked against (M16); None until first read.
        self.members: dict[int, str] | None = None
        self._members_task: asyncio.Task[None] | None = None
        self._members_read_ms: int | None = None

    def bind(self, ha: AutoSwitchHAService, registration: _Registration | None) -> None:
        self.ha = ha
        self.registration = registration

    # ------------------------------------------------------------------ queries

    @property
    def broker_id(self) -> int | None:
        """This broker's controller id, once registered."""
        return None if self.role is None else self.role.broker_id

    @property
    def isolated(self) -> bool:
        """No role yet: no name-server registration."""
        return self.role is None or not self.role.has_role

    def write_refusal(self) -> str | None:
        """Why a send must be refused now (M17), or None. Only a master's lease matters: the
        store's fence already refuses everything else."""
        role = self.role
        if role is None or not role.is_master or self.lease.valid(self.clock_ms()):
            return None
        return ("service not available now: master lease expired (no controller contact within "
                f"{self.lease.lease_ms} ms)")

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Startup (§4.3), then the periodic loops, until cancelled."""
        try:
            if self.lost_committed:
                hold_ms = lost_committed_hold_ms(self.config.controller_heart_beat_timeout_ms)
                log.error("lost_committed: committed data was lost in the last crash; staying "
                          "away from the controller for %d ms so that another replica is "
                          "elected (M9)", hold_ms)
                await asyncio.sleep(hold_ms / 1000)
            async with asyncio.TaskGroup() as group:
                if self.config.fetch_controller_addr_by_dns_lookup:  # from the start, as Java
                    group.create_task(self._every(self.dns_refresh_ms,
                                                  self.refresh_controller_addrs), name="rm-dns")
                await self._start()
                group.create_task(self._every(self.config.broker_heartbeat_interval_ms,
                                              self._heartbeat_round), name="rm-heartbeat")
                group.create_task(self._every(self.config.sync_broker_metadata_period_ms,
                                              self._poll), name="rm-poll")
                group.create_task(self._every(self.config.sync_controller_metadata_period_ms,
                                              self._refresh_leader), name="rm-leader")
        finally:
            await self.close()

    async def close(self) -> None:
        tasks = list(self._tasks)
        if self._slave_task is not None:
            tasks.append(self._slave_task)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.client.close()

    async def _every(self, period_ms: int, step: Callable[[], Coroutine[Any, Any, None]]
                     ) -> None:
        while True:
            await asyncio.sleep(period_ms / 1000)
            try:
                await step()
            except (ControllerError, RemotingError, OSError) as err:
                log.warning("controller request failed step=%s error=%s", step.__name__, err)

    async def _start(self) -> None:
        """`_start_once` until it succeeds, every STARTUP_RETRY_MS."""
        started = await self._start_once()
        while not started:
            await asyncio.sleep(STARTUP_RETRY_MS / 1000)
            started = await self._start_once()

    async def _start_once(self) -> bool:
        """One attempt of `startBasicService` (§4.3): leader, registration, one heartbeat, the
        registration's master or an election. True once a role is taken."""
        config = self.config
        try:
            await self.client.find_leader()
            registration = await self.client.register(
                config.store.store_path_root_dir, config.broker_cluster_name, config.broker_name,
                self.broker_addr,
            )
            if self.role is None:
                self.role = RoleState(registration.broker_id)
                assert self.ha is not None
                self.ha.config = replace(self.ha.config, broker_id=registration.broker_id)
                log.info("registered with the controller broker_id=%d leader=%s",
                         registration.broker_id, self.client.leader_addr)
            await self._heartbeat_round()
            master, sss = registration.master, registration.sync_state_set
            await self._handle(_view(master.master_broker_id, master.master_address,
                                     master.master_epoch, sss.sync_state_set,
                                     master.sync_state_set_epoch), Source.REGISTER)
        except (ControllerError, RemotingError, OSError) as err:
            log.warning("controller startup attempt failed, retrying error=%s", err)
            return False
        return self.role is not None and self.role.has_role

    # ------------------------------------------------------------------ periodic work

    async def _heartbeat_round(self) -> None:
        """BROKER_HEARTBEAT to every controller. A master then renews its lease (M17) from the
        heartbeat's send time when, on the same connections, the leader names it master at its
        epoch (that answer is also handled like a poll), or a majority of the controllers
        answer: a controller that read the heartbeat cannot time this broker out before
        send time + its heartbeat timeout, and a majority of them keeps the lease through a
        controller leader failover."""
        role = self.role
        if role is None:
            return
        store = self.store
        last_epoch = store.epoch_cache.last_epoch()
        header = BrokerHeartbeatRequestHeader(
            cluster_name=self.config.broker_cluster_name, broker_addr=self.broker_addr,
            broker_name=self.config.broker_name, broker_id=role.broker_id,
            epoch=-1 if last_epoch is None else last_epoch, max_offset=store.max_phy_offset,
            confirm_offset=store.confirm_offset,
            heartbeat_timeout_mills=self.config.controller_heart_beat_timeout_ms,
            election_priority=self.config.broker_election_priority,
        )
        sent_at = self.clock_ms()
        failed = await self.client.heartbeat(header)
        leader = self.client.leader_addr
        if leader is not None and leader not in failed:
            self._last_heartbeat_ms = sent_at
        if not role.is_master:
            if leader is None or leader in failed:
                await self.client.find_leader()
            return
        reached = [addr for addr in self.client.addrs if addr not in failed]
        answered = len(await self.client.answering(reached))
        named_master: bool | None = None  # what the leader's replica info says of this broker
        if leader is not None and leader not in failed:
            with contextlib.suppress(ControllerError, RemotingError, OSError):
                info = await self.client.get_replica_info(self.config.broker_name)
                named_master = info.header.master_broker_id == role.broker_id and \
                    info.header.master_epoch == role.master_epoch
                await self._handle_replica_info(
                    info.header.master_broker_id, info.header.master_address,
                    info.header.master_epoch, info.sync_state_set)
        current = self.role
        if current is not None and current.is_master and lease_renews(
                named_master=named_master, answered=answered,
                controllers=len(self.client.addrs), lapsed=not self.lease.valid(sent_at)):
            self.lease.renew(sent_at)
        if leader is None or leader in failed:
            # The leader is gone: look the next one up now rather than at the next refresh.
            await self.client.find_leader()

    async def _poll(self) -> None:
        """GET_REPLICA_INFO (§6.3); 2008 -> register again."""
        if self.role is None:
            return
        try:
            info = await self.client.get_replica_info(self.config.broker_name)
        except ControllerBrokerMetadataNotExistError:
            log.warning("the controller lost this broker set's data: registering again")
            await self.client.register_broker(
                self.config.broker_cluster_name, self.config.broker_name, self.role.broker_id,
                self.broker_addr)
            return
        await self._handle_replica_info(info.header.master_broker_id, info.header.master_address,
                                        info.header.master_epoch, info.sync_state_set)
        if self.role is not None and self.role.is_master:
            await self.refresh_members()

    async def refresh_members(self) -> None:
        """Read the controller's members of this broker set (GET_SYNC_STATE_DATA: every
        registered id with its address)."""
        name = self.config.broker_name
        body = await self.client.get_sync_state_data(name)
        info = BrokerReplicasInfo.decode(body).replicas_info_table.get(name)
        members = {} if info is None else {
            replica.broker_id: replica.broker_address
            for replica in (*info.in_sync_replicas, *info.not_in_sync_replicas)}
        if members != self.members:
            log.info("controller members of %s: %s", name,
                     ", ".join(f"{i}={a}" for i, a in sorted(members.items())))
        self.members = members

    def _refresh_members_soon(self) -> asyncio.Task[None]:
        """One refresh of the members in the background (one at a time): the running one, or
        a new one."""
        if self._members_task is not None and not self._members_task.done():
            return self._members_task

        async def refresh() -> None:
            try:
                await self.refresh_members()
            except (ControllerError, RemotingError, OSError) as err:
                log.warning("reading the controller's members failed: %s", err)
            finally:
                self._members_read_ms = self.clock_ms()

        self._members_task = asyncio.get_running_loop().create_task(refresh(),
                                                                    name="rm-members")
        self._tasks.add(self._members_task)
        self._members_task.add_done_callback(self._tasks.discard)
        return self._members_task

    async def ha_peer_refusal(self, broker_id: int, peer: str) -> str | None:
        """Why the master refuses the HA handshake of `broker_id` from `peer` (M16,
        broker/ha_peers.py), or None. For an id the members read last do not hold (a slave
        that registered since), the members are read again first, at most once a second."""
        members = self.members
        if (members is None or broker_id not in members) and (
                self._members_read_ms is None
                or self.clock_ms() - self._members_read_ms >= MEMBERS_REREAD_MS):
            await asyncio.shield(self._refresh_members_soon())
        return ha_peer_refusal(
            broker_id, peer, own_id=self.broker_id, members=self.members,
            check_address=self.config.pyrmq_ha_check_peer_address)

    async def _handle_replica_info(self, master_id: int | None, master_address: str | None,
                                   master_epoch: int | None, sss: SyncStateSet) -> None:
        await self._handle(_view(master_id, master_address, master_epoch, sss.sync_state_set,
                                 sss.sync_state_set_epoch), Source.POLL)

    async def refresh_controller_addrs(self) -> None:
        """Resolve a DNS `controllerAddr` again (fetchControllerAddrByDnsLookup; Java: every
        120 s). A lookup that fails keeps the addresses the client has (as Java does)."""
        try:
            addrs = await lookup_controller_addrs(self.config.controller_addr,
                                                  getaddrinfo=self._getaddrinfo)
        except ControllerAddressLookupError as err:
            log.warning("controller address lookup failed, keeping %s: %s",
                        ";".join(self.client.addrs), err)
            return
        if addrs != self.client.addrs:
            log.info("controller addresses changed old=%s new=%s", ";".join(self.client.addrs),
                     ";".join(addrs))
            await self.client.update_addrs(addrs)

    async def _refresh_leader(self) -> None:
        await self.client.find_leader()

    # ------------------------------------------------------------------ pushes and proposals

    async def on_role_change_push(self, request: RemotingCommand) -> RemotingCommand:
        """NOTIFY_BROKER_ROLE_CHANGED (1008, §6.4): handled in the background; answered 0."""
        header, sss = decode_role_change(request)
        log.info("role change pushed master_broker_id=%s master_epoch=%s",
                 header.master_broker_id, header.master_epoch)
        if self.role is not None:
            self._spawn(self._handle(_view(
                header.master_broker_id, header.master_address, header.master_epoch,
                sss.sync_state_set, header.sync_state_set_epoch), Source.PUSH), "rm-push")
        return request.make_response(ResponseCode.SUCCESS)

    def propose_sync_state_set(self, proposal: frozenset[int], sync_state_set_epoch: int
                               ) -> None:
        """The HA service's proposal callback: ALTER_SYNC_STATE_SET in the background."""
        self._spawn(self._alter(proposal, sync_state_set_epoch), "rm-alter-sync-state-set")

    async def _alter(self, proposal: frozenset[int], sync_state_set_epoch: int) -> None:
        async with self._alter_lock:
            role, ha = self.role, self.ha
            if role is None or ha is None or not role.is_master:
                return
            try:
                answer = await self.client.alter_sync_state_set(
                    self.config.broker_name, role.broker_id, role.master_epoch,
                    SyncStateSet(proposal, sync_state_set_epoch))
            except (ControllerError, RemotingError, OSError) as err:
                log.warning("sync_state_set proposal refused proposal=%s error=%s",
                            sorted(proposal), err)
                ha.sync_state_set_proposal_failed()
                return
            async with self._lock:
                current = self.role
                if current is None or not current.is_master or \
                        current.master_epoch != role.master_epoch:
                    return
                action = ApplySyncStateSet(answer.sync_state_set | {current.broker_id},
                                           answer.sync_state_set_epoch)
                self.role = apply(current, action)
                ha.apply_sync_state_set(action.sync_state_set, action.sync_state_set_epoch)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("replicas manager task failed name=%s error=%r", task.get_name(),
                      task.exception())

    # ------------------------------------------------------------------ role changes

    async def _handle(self, view: ControllerView, source: Source) -> None:
        role = self.role
        if role is None:
            return
        if isinstance(decide(role, view, source), Elect):
            await self._elect()
            return
        async with self._lock:
            role = self.role
            assert role is not None  # never reset once set
            action = decide(role, view, source)
            if isinstance(action, Ignore | Elect):
                return
            if isinstance(action, ApplySyncStateSet):
                self.role = apply(role, action)
                if self.ha is not None:
                    self.ha.apply_sync_state_set(action.sync_state_set,
                                                 action.sync_state_set_epoch)
                return
            log.info("role change source=%s action=%s", source.value, action)
            if isinstance(action, BecomeMaster):
                await self._become_master(role, action)
            else:
                await self._become_slave(role, action)

    async def _elect(self) -> None:
        """CONTROLLER_ELECT_MASTER (§4.5); the answer is handled like any other."""
        role = self.role
        if role is None:
            return
        header, body = await self.client.elect_master(
            self.config.broker_cluster_name, self.config.broker_name, role.broker_id)
        log.info("elect master answered master_broker_id=%s master_epoch=%s",
                 header.master_broker_id, header.master_epoch)
        await self._handle(_view(header.master_broker_id, header.master_address,
                                 header.master_epoch, body.sync_state_set,
                                 header.sync_state_set_epoch), Source.ELECT)

    async def _become_master(self, role: RoleState, action: BecomeMaster) -> None:
        ha = self.ha
        assert ha is not None
        self._cancel_slave_task()
        if self.slave_sync is not None:
            self.slave_sync.stop()
        if self.lost_committed:
            log.error("lost_committed: no other replica was elected; resuming as master with a "
                      "log that lost committed data (last replica standing, M9)")
        # The controller elected us on the heartbeats it had; the lease starts at the last one
        # that reached the leader.
        self.lease.renew(self._last_heartbeat_ms if self._last_heartbeat_ms is not None
                         else self.clock_ms())
        self._refresh_members_soon()  # for the slaves' handshakes, meanwhile
        try:
            await ha.become_master(action.master_epoch, action.sync_state_set,
                                   action.sync_state_set_epoch)
        except ValueError:
            log.exception("cannot become master")
            self.store.fenced = True
            return
        self.role = apply(role, action)
        self.role_changes += 1
        self._after_role_change()

    async def _become_slave(self, role: RoleState, action: BecomeSlave) -> None:
        self.role = apply(role, action)
        self.role_changes += 1
        if action.same_master:
            if self.ha is not None:
                self.ha.master_epoch = action.master_epoch
            self._after_role_change()
            return
        self.store.fenced = True  # no write from here on, before the HA switch
        self.lease.revoke()
        self._cancel_slave_task()
        self._slave_task = asyncio.get_running_loop().create_task(
            self._follow(action), name="rm-follow-master")
        if self.slave_sync is not None:
            self.slave_sync.start(action.master_address)
        self._after_role_change()

    def _after_role_change(self) -> None:
        role = self.role
        assert role is not None
        self._bump_data_version(role.master_epoch)
        if self.registration is not None:
            self.registration.set_broker_id(role.name_server_broker_id)
            self.registration.request_register()
        if self.lost_committed:
            self.lost_committed = False
            delete_durably(self._mark)
            log.warning("lost_committed mark cleared: the controller has given this broker a "
                        "role after it came back")

    def _cancel_slave_task(self) -> None:
        task, self._slave_task = self._slave_task, None
        if task is not None:
            task.cancel()

    async def _follow(self, action: BecomeSlave) -> None:
        """Learn the master's HA address from the name servers' answers, then replicate."""
        ha_address = await self._master_ha_address(action.master_address)
        host, _, port = ha_address.rpartition(":")
        async with self._lock:
            role = self.role
            if role is None or role.master_address != action.master_address or \
                    role.master_epoch < action.master_epoch or self.ha is None:
                return
            await self.ha.become_slave((host, int(port)), role.master_epoch)

    async def _master_ha_address(self, master_address: str) -> str:
        self._ha_address.pop(master_address, None)
        if not self.config.namesrv_addr_list:
            log.error("no namesrvAddr: a slave learns its master's HA address from the name "
                      "servers and cannot replicate without one")
        while True:
            found = self._ha_address.get(master_address)
            if found:
                return found
            self._ha_address_known.clear()
            if self.registration is not None:
                self.registration.request_register()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HA_ADDRESS_RETRY_MS / 1000):
                    await self._ha_address_known.wait()

    def on_registered(self, namesrv: str, answer: RegisterBrokerResponseHeader) -> None:
        """A name server's REGISTER_BROKER answer: where the master (id 0 there) is."""
        if answer.master_addr and answer.ha_server_addr:
            if self._ha_address.get(answer.master_addr) != answer.ha_server_addr:
                log.info("master HA address from name server namesrv=%s master=%s ha=%s",
                         namesrv, answer.master_addr, answer.ha_server_addr)
            self._ha_address[answer.master_addr] = answer.ha_server_addr
            self._ha_address_known.set()


class _Registration(Protocol):
    def set_broker_id(self, broker_id: int) -> None: ...

    def request_register(self) -> None: ...
