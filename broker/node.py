"""`BrokerNode`: builds one broker from its `BrokerConfig` and runs it in one TaskGroup.

Start: open the store (recovery, in a worker thread), load `config/topics.json`,
`subscriptionGroup.json` and `consumerOffset.json`, bind the remoting server on `listenPort`
(port 0 picks a free one, for tests), register every processor, start the metrics endpoint,
freeze the start-up heap (`broker/heap.py`, when the process entry point asks), start the
event-loop lag monitor (`broker/loop_monitor.py`), then run the background tasks: the store's
loops, the name-server registration, client housekeeping, consumer-ids notifications, the
long-polling check, the periodic consumer-offset persist, the TPS sampler of the runtime
info and the slave metadata sync (idle until the node is a slave; `broker/slave_synchronize.py`).
With a fixed `listenPort` it also serves on `listenPort - 2`, Java's fast remoting port.

Modes:
- standalone (`enableControllerMode=false`, `brokerId=0`): a master that serves on its own, no
  controller involved; this is what pyrmq runs today;
- controller mode: the store starts fenced (writes refused with 14) and the broker does not
  register with name servers until the ReplicasManager (`broker/replicas_manager.py`) has a
  role from the controller of `controllerAddr`; the AutoSwitchHA service (ha/) listens on
  `haListenPort`; a master answers a send SUCCESS only once its replicas acked it. A test
  fixture may instead fix the role in `broker.conf` (`pyrmqHaRole=master|slave`, see
  `start_fixed_ha_role`; no controller is contacted then);
- `brokerId != 0` without controller mode (RocketMQ's old master/slave HA) is refused at start.

Graceful stop (`request_stop()`, or SIGTERM/SIGINT with `handle_signals`), in this order:
1. parked pulls are answered and no pull parks any more; the server stops accepting and reading,
   lets running requests answer (bounded), and closes every connection;
2. UNREGISTER_BROKER goes to every name server;
3. background tasks are cancelled;
4. consumer offsets, topics and subscription groups are persisted;
5. the store is closed: flushed, checkpoint written, abort file removed.
A failing task ends `run()` with its error after closing the servers and the store. A
`DataInvariantError` is the exception: the store is fenced and left as it is (no clean close,
the abort file stays), so the next start recovers as after a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import signal
import socket
import time
from collections.abc import Iterator
from typing import Final

from broker.client_manager import ClientManager, ConsumerIdsNotifier
from broker.config import BrokerConfig, MetricsExporterType
from broker.config_file import (
    CONFIG_DIR_NAME,
    CONSUMER_OFFSET_FILE_NAME,
    SUBSCRIPTION_GROUP_FILE_NAME,
    TOPICS_FILE_NAME,
    ConfigFile,
)
from broker.consumer_offsets import ConsumerOffsetManager
from broker.errors import BrokerConfigError, PortInUseError
from broker.heap import freeze_startup_heap
from broker.loop_monitor import LoopMonitor, StallCause
from broker.metrics import BrokerMetrics
from broker.metrics_http import MetricsHttpServer
from broker.namesrv_registration import BrokerRegistrationIdentity, NamesrvRegistration
from broker.os_threads import aux_executor, name_os_threads
from broker.processors.admin import AdminProcessor
from broker.processors.client import ClientProcessor
from broker.processors.offsets import OffsetProcessor
from broker.processors.pull import PullProcessor
from broker.processors.rebalance import RebalanceProcessor
from broker.processors.router import Router
from broker.processors.send import SendProcessor
from broker.pull_hold import (
    CHECK_INTERVAL_LONG_POLLING_MS,
    CHECK_INTERVAL_SHORT_POLLING_MS,
    PullHold,
)
from broker.rebalance_lock import RebalanceLockManager
from broker.replicas_manager import (
    AnyOtherBroker,
    ReplicasManager,
    mark_lost_committed,
)
from broker.runtime_stats import RuntimeStats
from broker.schedule_message_service import DELAY_OFFSET_FILE_NAME, ScheduleMessageService
from broker.slave_synchronize import SlaveSynchronize
from broker.subscription_groups import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from controller_client.addresses import controller_addrs
from controller_client.client import ControllerClient
from controller_client.errors import ControllerAddressLookupError
from ha.service import AutoSwitchHAService, HARole
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection
from remoting.server import RemotingServer, ServerLimits
from store.errors import DataInvariantError
from store.host_port import HostPort
from store.message_store import MessageStore
from store.schedule import parse_message_delay_level
from store.uniq_id import UniqIdGenerator

log = logging.getLogger(__name__)

MASTER_ID: Final = 0


def system_wall_ms() -> int:
    return time.time_ns() // 1_000_000


def check_supported(config: BrokerConfig) -> None:
    """Refuse configurations pyrmq cannot serve; raises `BrokerConfigError`."""
    if not config.store.enable_controller_mode and config.broker_id != MASTER_ID:
        raise BrokerConfigError(
            f"brokerId={config.broker_id} without enableControllerMode: pyrmq serves standalone "
            "masters (brokerId=0) or controller mode; RocketMQ's old master/slave HA is not "
            "supported", key="brokerId",
        )
    if (config.store.enable_controller_mode and not config.pyrmq_ha_role
            and not config.controller_addr.strip(" ;")
            and not config.fetch_controller_addr_by_dns_lookup):
        raise BrokerConfigError(
            "enableControllerMode=true needs controllerAddr (the controller's host:port, "
            "';'-separated for a controller group)", key="controllerAddr",
        )


def resolve_ip(host: str) -> str:
    """`host` as an IP literal (resolving a host name; blocking)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return socket.gethostbyname(host)
    return host


class BrokerNode:
    """One broker process's objects and tasks. `run()` until `request_stop()`."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        handle_signals: bool = False,
        server_limits: ServerLimits | None = None,
        freeze_heap: bool = False,
    ) -> None:
        check_supported(config)
        self.config = config
        self._freeze_heap = freeze_heap
        self._handle_signals = handle_signals
        self._server_limits = server_limits or ServerLimits(
            idle_timeout_ms=config.server_channel_max_idle_time_seconds * 1000,
            backlog=config.server_socket_backlog,
        )
        self._stop = asyncio.Event()
        self.started = asyncio.Event()
        self.store: MessageStore | None = None
        self.server: RemotingServer | None = None
        self.metrics_server: MetricsHttpServer | None = None
        self.registration: NamesrvRegistration | None = None
        self.topic_configs: TopicConfigManager | None = None
        self.consumer_offsets: ConsumerOffsetManager | None = None
        self.subscription_groups: SubscriptionGroupManager | None = None
        self.clients: ClientManager | None = None
        self.pull_hold: PullHold | None = None
        self.schedule_message_service: ScheduleMessageService | None = None
        self.metrics: BrokerMetrics | None = None
        self.loop_monitor: LoopMonitor | None = None
        self.ha: AutoSwitchHAService | None = None
        self.replicas: ReplicasManager | None = None
        # Slave metadata sync (M11, broker/slave_synchronize.py): started with the master's
        # address when this broker becomes a slave, stopped on becoming master.
        self.slave_synchronize: SlaveSynchronize | None = None
        self.vip_server: RemotingServer | None = None
        self.broker_addr = ""
        self._server_closed = False

    @property
    def address(self) -> tuple[str, int]:
        """(brokerIP1, bound listen port): where clients connect."""
        if self.server is None:
            raise RuntimeError("broker is not started")
        return self.config.broker_ip1, self.server.address[1]

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        return None if self.metrics_server is None else self.metrics_server.address

    def request_stop(self) -> None:
        """Begin the graceful stop (idempotent; safe from a signal handler)."""
        if not self._stop.is_set():
            log.info("broker stop requested")
        self._stop.set()

    async def run(self) -> None:
        """Start, serve until `request_stop()`, stop gracefully (module docstring)."""
        config = self.config
        boot_ms = system_wall_ms()
        if self._handle_signals:  # the process and its loop are the node's own
            asyncio.get_running_loop().set_default_executor(aux_executor())
        store = MessageStore(config.store)
        report = await asyncio.to_thread(store.open)
        self.store = store
        log.info("store opened root=%s max_phy_offset=%d abnormal=%s",
                 config.store.store_path_root_dir, report.max_phy_offset, report.abnormal)
        if report.lost_committed and config.store.enable_controller_mode:
            # Durable until the controller has seen this broker come back (M9).
            await asyncio.to_thread(mark_lost_committed, config.store.store_path_root_dir)
        loop = asyncio.get_running_loop()
        if self._handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        clean = False
        try:
            await self._serve(store, boot_ms)
            clean = True
        except BaseException as err:
            if _is_data_invariant(err):
                log.exception("data invariant broken, stopping without a clean close")
                store.fenced = True  # no write after this; the store is left for recovery
                await self._close_quietly()
                raise
            await self._close_quietly()
            await asyncio.to_thread(store.close)
            raise
        finally:
            if self._handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        if clean:
            await asyncio.to_thread(store.close)
            log.info("broker stopped cleanly")

    async def _serve(self, store: MessageStore, boot_ms: int) -> None:
        config = self.config
        if config.store.enable_controller_mode:
            store.fenced = True
            if config.pyrmq_ha_role:
                self.ha = AutoSwitchHAService(
                    store, config.to_ha_config(), replica_ids=lambda: fixed_replica_ids(config),
                    propose_sync_state_set=self._propose_sync_state_set,
                )
            else:
                self.ha = AutoSwitchHAService(
                    store, config.to_ha_config(),
                    replica_ids=lambda: AnyOtherBroker(
                        lambda: None if self.replicas is None else self.replicas.broker_id),
                    propose_sync_state_set=self._propose_sync_state_set,
                    peer_refusal=self._ha_peer_refusal,
                )
            with _binding("haListenPort", config.bind_address, config.ha_listen_port):
                await self.ha.start()
        config_dir = config.store.store_path_root_dir / CONFIG_DIR_NAME
        topics = TopicConfigManager(config, ConfigFile(config_dir / TOPICS_FILE_NAME),
                                    wall_ms=system_wall_ms)
        groups = SubscriptionGroupManager(
            ConfigFile(config_dir / SUBSCRIPTION_GROUP_FILE_NAME),
            auto_create=config.auto_create_subscription_group, wall_ms=system_wall_ms,
        )
        offsets = ConsumerOffsetManager(
            ConfigFile(config_dir / CONSUMER_OFFSET_FILE_NAME),
            flush_interval_ms=config.flush_consumer_offset_interval_ms, wall_ms=system_wall_ms,
        )
        for manager in (topics, groups, offsets):
            await asyncio.to_thread(manager.load)
        self.topic_configs, self.subscription_groups, self.consumer_offsets = \
            topics, groups, offsets
        metrics = BrokerMetrics(cluster=config.broker_cluster_name, node_id=config.broker_name)
        notifier = ConsumerIdsNotifier(enabled=config.notify_consumer_ids_changed_enable)
        clients = ClientManager(channel_expired_timeout_ms=config.channel_expired_timeout_ms,
                                on_group_changed=notifier.request)
        notifier.bind(clients.consumer_channels)
        pull_hold = PullHold(
            max_offset=store.max_offset_in_queue,
            check_interval_ms=CHECK_INTERVAL_LONG_POLLING_MS if config.long_polling_enable
            else CHECK_INTERVAL_SHORT_POLLING_MS,
        )
        self.metrics, self.clients, self.pull_hold = metrics, clients, pull_hold
        # Units dispatched after their append (not by the send path) wake held pulls too.
        store.arrival_listener = pull_hold.notify_message_arriving
        runtime_stats = RuntimeStats(put_count=lambda: metrics.put_message_count,
                                     get_count=lambda: metrics.get_message_count)
        ip1 = await asyncio.to_thread(resolve_ip, config.broker_ip1)
        router = Router(metrics)
        server = RemotingServer(router.handle, limits=self._server_limits, name="broker")
        # Processors are registered right after the bind, with no await in between: no request
        # can be read before they are in place.
        with _binding("listenPort", config.bind_address, config.listen_port):
            await server.start(config.bind_address, config.listen_port)
        self.server = server
        port = server.address[1]
        store_host = HostPort.from_str(f"{ip1}:{port}")
        self.broker_addr = f"{config.broker_ip1}:{port}"
        if config.store.enable_controller_mode and not config.pyrmq_ha_role:
            try:
                addrs = await controller_addrs(
                    config.controller_addr, dns_lookup=config.fetch_controller_addr_by_dns_lookup)
            except ControllerAddressLookupError as err:
                raise BrokerConfigError(str(err), key="controllerAddr") from err
            self.replicas = ReplicasManager(
                config=config, store=store,
                client=ControllerClient(addrs),
                broker_addr=self.broker_addr, bump_data_version=topics.next_data_version,
            )
        send = self._register_processors(
            router, store, store_host, boot_ms, topics=topics, groups=groups, offsets=offsets,
            clients=clients, pull_hold=pull_hold, metrics=metrics, runtime_stats=runtime_stats,
        )
        await self._start_vip_server(router)
        schedule = ScheduleMessageService(
            store=store, delays_ms=parse_message_delay_level(config.store.message_delay_level),
            file=ConfigFile(config_dir / DELAY_OFFSET_FILE_NAME), put_time_up=send.put_time_up,
            flush_delay_offset_interval_ms=config.flush_delay_offset_interval_ms,
        )
        await asyncio.to_thread(schedule.load)
        self.schedule_message_service = schedule
        self.slave_synchronize = SlaveSynchronize(
            topics=topics, groups=groups, offsets=offsets, delay_offsets=schedule,
            own_addr=lambda: self.broker_addr, interval_ms=config.pyrmq_slave_sync_interval_ms,
        )
        if self.replicas is not None:
            self.replicas.slave_sync = self.slave_synchronize
        if self.ha is not None and config.pyrmq_ha_role:
            await self.start_fixed_ha_role(self.ha)
        replicas = self.replicas
        registration = NamesrvRegistration(
            namesrv_addrs=config.namesrv_addr_list,
            identity=BrokerRegistrationIdentity(
                cluster_name=config.broker_cluster_name,
                broker_name=config.broker_name,
                broker_addr=self.broker_addr,
                ha_server_addr=f"{config.broker_ip2}:"
                f"{config.ha_listen_port if self.ha is None else self.ha.ha_port}",
                broker_id=MASTER_ID,
            ),
            topic_table=lambda: topics.serialize_wrapper(
                broker_permission=config.broker_permission
            ),
            period_ms=config.register_name_server_period_effective_ms,
            timeout_ms=config.register_broker_timeout_ms,
            isolated=(lambda: store.fenced) if replicas is None else lambda: replicas.isolated,
            on_registered=None if replicas is None else replicas.on_registered,
        )
        if replicas is not None:
            assert self.ha is not None
            replicas.bind(self.ha, registration)
        self.registration = registration
        topics.add_change_listener(registration.request_register)
        for name, value in (
            ("rocketmq_topic_number", lambda: float(len(topics))),
            ("rocketmq_consumer_group_number", lambda: float(len(groups))),
            ("rocketmq_producer_connections", lambda: float(clients.producer_connection_count)),
            ("rocketmq_consumer_connections", lambda: float(clients.consumer_connection_count)),
            ("pyrmq_store_dispatch_skipped", lambda: float(store.dispatch_skipped_total)),
        ):
            metrics.bind_gauge(name, value)
        if self.ha is not None:
            metrics.bind_ha(self.ha.status)
        await self._start_metrics(metrics)
        log.info("broker started broker_name=%s cluster=%s address=%s namesrv=%s",
                 config.broker_name, config.broker_cluster_name, self.broker_addr,
                 ";".join(config.namesrv_addr_list) or "-")
        if self._freeze_heap:
            freeze_startup_heap()
        self.started.set()
        monitor = self._start_loop_monitor(metrics)
        if self._handle_signals:  # process-wide, as the default executor above
            name_os_threads()  # the store's workers, the log writer, the loop monitor
        try:
            await self._run_tasks(store, registration, clients, notifier, pull_hold, offsets,
                                  runtime_stats, schedule)
        finally:
            if monitor is not None:
                monitor.close()
        await offsets.persist()
        await schedule.persist()
        await topics.persist()
        await groups.persist()

    def _start_loop_monitor(self, metrics: BrokerMetrics) -> LoopMonitor | None:
        config = self.config
        if config.event_loop_lag_sample_interval_ms <= 0:
            return None

        def count_stall(cause: StallCause) -> None:
            metrics.loop_stall(cause.value)

        def count_requests() -> tuple[int, int]:
            received = handling = 0
            for server in (self.server, self.vip_server):
                if server is not None:
                    received += server.requests_received
                    handling += server.requests_being_handled
            return received, handling

        monitor = LoopMonitor(
            sample_interval_ms=config.event_loop_lag_sample_interval_ms,
            stall_threshold_ms=config.event_loop_stall_threshold_ms,
            observe_lag=metrics.loop_lag, count_stall=count_stall, count_requests=count_requests,
        )
        monitor.start()
        self.loop_monitor = monitor
        return monitor

    async def _run_tasks(
        self, store: MessageStore, registration: NamesrvRegistration, clients: ClientManager,
        notifier: ConsumerIdsNotifier, pull_hold: PullHold, offsets: ConsumerOffsetManager,
        runtime_stats: RuntimeStats, schedule: ScheduleMessageService,
    ) -> None:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(store.run(), name="store"),
                group.create_task(self._slave_synchronize().run(), name="slave-synchronize"),
                group.create_task(registration.run(), name="namesrv-registration"),
                group.create_task(clients.run(), name="client-housekeeping"),
                group.create_task(notifier.run(), name="consumer-ids-notifier"),
                group.create_task(pull_hold.run(), name="pull-hold-check"),
                group.create_task(offsets.run(), name="consumer-offset-persist"),
                group.create_task(runtime_stats.run(), name="runtime-stats"),
                group.create_task(schedule.run(), name="schedule-message-service"),
            ]
            if self.ha is not None:
                tasks.append(group.create_task(self.ha.run(), name="ha"))
            if self.replicas is not None:
                tasks.append(group.create_task(self.replicas.run(), name="replicas-manager"))
            await self._stop.wait()
            log.info("broker stopping")
            await self._close_quietly()
            await registration.unregister()
            for task in tasks:
                task.cancel()

    def _register_processors(
        self, router: Router, store: MessageStore, store_host: HostPort, boot_ms: int, *,
        topics: TopicConfigManager, groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager, clients: ClientManager, pull_hold: PullHold,
        metrics: BrokerMetrics, runtime_stats: RuntimeStats,
    ) -> SendProcessor:
        config = self.config
        send = SendProcessor(
            config=config, store=store, topic_configs=topics, subscription_groups=groups,
            pull_hold=pull_hold, metrics=metrics,
            uniq_ids=UniqIdGenerator(store_host.ip), store_host=store_host, replication=self.ha,
            write_refusal=None if self.replicas is None else self.replicas.write_refusal,
        )
        pull = PullProcessor(
            config=config, store=store, topic_configs=topics, subscription_groups=groups,
            consumer_offsets=offsets, clients=clients, pull_hold=pull_hold, metrics=metrics,
        )
        offset = OffsetProcessor(store=store, topic_configs=topics, subscription_groups=groups,
                                 consumer_offsets=offsets)
        client = ClientProcessor(clients=clients, topic_configs=topics,
                                 subscription_groups=groups)
        admin = AdminProcessor(config=config, store=store, topic_configs=topics,
                               subscription_groups=groups, consumer_offsets=offsets,
                               metrics=metrics, runtime_stats=runtime_stats,
                               boot_timestamp_ms=boot_ms,
                               ha_runtime_info=self.ha.runtime_info if self.ha else None,
                               role_id=self._role_id,
                               delay_offsets_json=self._delay_offsets_json)
        rebalance = RebalanceProcessor(locks=RebalanceLockManager())
        router.register({
            RequestCode.LOCK_BATCH_MQ: rebalance.lock_batch_mq,
            RequestCode.UNLOCK_BATCH_MQ: rebalance.unlock_batch_mq,
            RequestCode.SEND_MESSAGE: send.send_message,
            RequestCode.SEND_MESSAGE_V2: send.send_message,
            RequestCode.SEND_BATCH_MESSAGE: send.send_message,
            RequestCode.CONSUMER_SEND_MSG_BACK: send.consumer_send_msg_back,
            RequestCode.PULL_MESSAGE: pull.pull_message,
            RequestCode.LITE_PULL_MESSAGE: pull.pull_message,  # Java's lite pull consumer
            RequestCode.QUERY_CONSUMER_OFFSET: offset.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: offset.update_consumer_offset,
            RequestCode.GET_MAX_OFFSET: offset.get_max_offset,
            RequestCode.GET_MIN_OFFSET: offset.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: offset.search_offset_by_timestamp,
            RequestCode.GET_EARLIEST_MSG_STORETIME: offset.get_earliest_msg_store_time,
            RequestCode.VIEW_MESSAGE_BY_ID: offset.view_message_by_id,
            RequestCode.HEART_BEAT: client.heart_beat,
            RequestCode.UNREGISTER_CLIENT: client.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: client.get_consumer_list_by_group,
            RequestCode.UPDATE_AND_CREATE_TOPIC: admin.update_and_create_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: admin.get_all_topic_config,
            RequestCode.GET_BROKER_RUNTIME_INFO: admin.get_broker_runtime_info,
            RequestCode.GET_ALL_CONSUMER_OFFSET: admin.get_all_consumer_offset,
            RequestCode.GET_ALL_DELAY_OFFSET: admin.get_all_delay_offset,
            RequestCode.GET_ALL_MESSAGE_REQUEST_MODE: admin.get_all_message_request_mode,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.get_all_subscription_group_config,
            RequestCode.GET_TOPIC_STATS_INFO: admin.get_topic_stats_info,
            RequestCode.GET_TOPIC_CONFIG: admin.get_topic_config,
            RequestCode.GET_BROKER_HA_STATUS: admin.get_broker_ha_status,
            RequestCode.GET_BROKER_EPOCH_CACHE: admin.get_broker_epoch_cache,
        })
        if self.replicas is not None:
            replicas = self.replicas

            async def notify_broker_role_changed(_connection: RemotingConnection,
                                                 request: RemotingCommand) -> RemotingCommand:
                return await replicas.on_role_change_push(request)

            router.register({RequestCode.NOTIFY_BROKER_ROLE_CHANGED: notify_broker_role_changed})
        return send

    def _role_id(self) -> int:
        """The id this broker reports for its role: 0 as master (as it registers with name
        servers), else its controller id (GET_BROKER_EPOCH_CACHE)."""
        if self.ha is not None and self.ha.role is HARole.MASTER:
            return MASTER_ID
        if self.replicas is not None and self.replicas.broker_id is not None:
            return self.replicas.broker_id
        return self.config.broker_id

    async def start_fixed_ha_role(self, ha: AutoSwitchHAService) -> None:
        """Take the role `broker.conf` gives (`pyrmqHaRole`), as the ReplicasManager will from
        the controller: master at `pyrmqHaMasterEpoch` with `pyrmqHaSyncStateSet`, or slave of
        `pyrmqHaMasterAddress`."""
        config = self.config
        epoch = config.pyrmq_ha_master_epoch
        if config.pyrmq_ha_role == "master":
            sync_state_set = frozenset(_ids(config.pyrmq_ha_sync_state_set)) | \
                {config.broker_id}
            await ha.become_master(epoch, sync_state_set, 1)
        else:
            host, _, port = config.pyrmq_ha_master_address.rpartition(":")
            if not host or not port.isdigit():
                raise BrokerConfigError(
                    f"pyrmqHaMasterAddress={config.pyrmq_ha_master_address!r} is not host:port",
                    key="pyrmqHaMasterAddress",
                )
            await ha.become_slave((host, int(port)), epoch)
            master = config.pyrmq_ha_master_remoting_address or f"{host}:{int(port) - 1}"
            try:
                self._slave_synchronize().set_master(master)
            except ValueError as err:
                raise BrokerConfigError(str(err), key="pyrmqHaMasterRemotingAddress") from err

    def _slave_synchronize(self) -> SlaveSynchronize:
        if self.slave_synchronize is None:
            raise RuntimeError("broker is not started")
        return self.slave_synchronize

    def _delay_offsets_json(self) -> str | None:
        schedule = self.schedule_message_service
        return None if schedule is None else schedule.encode_json()

    async def _start_vip_server(self, router: Router) -> None:
        """Java's fast remoting server ("VIP channel") on listenPort - 2, serving the same
        codes: a Java slave asks GET_ALL_TOPIC_CONFIG there. Not opened with listenPort 0 or
        below 3; a port already taken is a warning (only Java slaves' topic sync needs it)."""
        config = self.config
        if config.listen_port <= 2:
            return
        vip = RemotingServer(router.handle, limits=self._server_limits, name="broker-vip")
        try:
            await vip.start(config.bind_address, config.listen_port - 2)
        except OSError as err:
            log.warning("fast remoting port %d not opened (Java slaves cannot sync topic "
                        "configs from this broker): %s", config.listen_port - 2, err)
            return
        self.vip_server = vip

    async def _ha_peer_refusal(self, broker_id: int, peer: str) -> str | None:
        """Controller mode: the ReplicasManager's check of a slave's HA handshake (M16)."""
        if self.replicas is None:
            return "no controller yet"
        return await self.replicas.ha_peer_refusal(broker_id, peer)

    def _propose_sync_state_set(self, proposal: frozenset[int], sync_state_set_epoch: int
                                ) -> None:
        """To the controller (ALTER_SYNC_STATE_SET, by the ReplicasManager); with a fixed role
        the proposal is applied at once, as a controller that accepts it would."""
        if self.replicas is not None:
            self.replicas.propose_sync_state_set(proposal, sync_state_set_epoch)
            return
        if self.ha is None or not self.config.pyrmq_ha_role:
            return
        asyncio.get_running_loop().call_soon(
            self.ha.apply_sync_state_set, proposal, sync_state_set_epoch + 1
        )

    async def _start_metrics(self, metrics: BrokerMetrics) -> None:
        exporter = self.config.metrics_exporter_type
        if exporter is MetricsExporterType.DISABLE:
            return
        if exporter is not MetricsExporterType.PROM:
            log.warning("metricsExporterType=%s is not supported, serving PROM instead",
                        exporter.name)
        server = MetricsHttpServer(metrics.render)
        host, port = self.config.metrics_prom_exporter_host, self.config.metrics_prom_exporter_port
        with _binding("metricsPromExporterPort", host or "*", port):
            await server.start(host, port)
        self.metrics_server = server

    async def _close_quietly(self) -> None:
        """Answer parked pulls and close the servers, once (also on the error path)."""
        if self.pull_hold is not None:
            self.pull_hold.close()
        if self.ha is not None:
            await self.ha.close()
        if self.server is not None and not self._server_closed:
            self._server_closed = True
            if self.vip_server is not None:
                await self.vip_server.close()
            await self.server.close()
        if self.metrics_server is not None:
            await self.metrics_server.close()
            self.metrics_server = None


@contextlib.contextmanager
def _binding(key: str, host: str, port: int) -> Iterator[None]:
    """Turn a failed bind into a one-line `PortInUseError` that names the key to change
    (several brokers on one host is the normal set-up: each needs its own ports)."""
    try:
        yield
    except OSError as err:
        reason = "already in use" if err.errno == errno.EADDRINUSE else (
            err.strerror or str(err))
        raise PortInUseError(
            f"cannot listen on {host}:{port} ({key}={port}): {reason}; give this broker "
            f"another {key} in its broker.conf"
        ) from err


def _ids(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def fixed_replica_ids(config: BrokerConfig) -> frozenset[int]:
    """The broker ids allowed to handshake with this master (fixed roles, no controller)."""
    return frozenset(_ids(config.pyrmq_ha_replica_ids)) | \
        frozenset(_ids(config.pyrmq_ha_sync_state_set))


def _is_data_invariant(err: BaseException) -> bool:
    if isinstance(err, DataInvariantError):
        return True
    if isinstance(err, BaseExceptionGroup):
        return any(_is_data_invariant(inner) for inner in err.exceptions)
    return False
