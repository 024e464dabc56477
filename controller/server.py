"""`ControllerServer`: the network side of `pyrmq-controller`: name server and controller.

One `RemotingServer` on `listenPort` feeds requests to the pure `RouteInfoManager` and writes its
answers: REGISTER_BROKER (103), UNREGISTER_BROKER (104), GET_ROUTEINFO_BY_TOPIC (105),
GET_BROKER_CLUSTER_INFO (106) and GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206, `mqadmin topicList`;
always enabled, as Java's default `enableAllTopicList=true`). With `enableControllerInNamesrv`
(pyrmq's default) the same port also serves the controller codes (`ControllerManager`), so one
address is both `namesrvAddr` and `controllerAddr`; `controllerListenPort`, if set, opens a
second server for the controller codes alone. Every other code gets
REQUEST_CODE_NOT_SUPPORTED (3).

`run()` owns one TaskGroup holding the name server's expiry scan (every
`scanNotActiveBrokerInterval`), the controller's heartbeat expiry (when the first record
expires), its inactive-master scan, the role-change pushes and elections, and one watcher per
connection a broker registered or heartbeated on, which tells the route tables and the
controller when that connection closes (RocketMQ's `BrokerHousekeepingService`).

Invariants:
- Every request is answered from the tables as they are after the previous request: handlers
  never await between reading and changing them.
- A connection gets one `ChannelId` and one watcher, on its first REGISTER_BROKER; the id is
  never reused, so a late close cannot remove a broker that re-registered on a new connection.
- `run()` returns only after the server is closed and every task it started has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Callable, Coroutine
from typing import Any, Final

from controller.admin_allowlist import admin_refusal
from controller.config import ControllerConfig
from controller.controller_manager import CONTROLLER_CODES, ControllerManager
from controller.errors import RegisterBrokerRefusedError
from controller.route_body import (
    encode_cluster_info,
    encode_topic_list,
    encode_topic_route_data,
    wants_standard_json,
)
from controller.route_info import ChannelId, RemovedBroker, RouteInfoManager
from remoting.bodies import RegisterBrokerBody, TopicConfigAndMappingSerializeWrapper
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request_code_not_supported
from remoting.connection import RemotingConnection
from remoting.headers import (
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from remoting.server import RemotingServer, ServerLimits

log = logging.getLogger(__name__)

REGISTER_BROKER_BODY_MIN_VERSION: Final = 37
"""`MQVersion.Version.V3_0_11.ordinal()`: older brokers send a bare topic-config wrapper."""
_CRC32_MASK: Final = 0x7FFFFFFF
_FAQ_URL: Final = "https://rocketmq.apache.org/docs/bestPractice/06FAQ"


def monotonic_ms() -> int:
    """Milliseconds of a clock that never goes backwards (the expiry clock)."""
    return time.monotonic_ns() // 1_000_000


class ControllerServer:
    """`pyrmq-controller` serving the name-server codes; `run()` it, `stop()` to end it."""

    def __init__(
        self,
        config: ControllerConfig,
        *,
        limits: ServerLimits | None = None,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._config = config
        self._clock_ms = clock_ms
        self._route_info = RouteInfoManager(
            broker_channel_expired_time_ms=config.broker_channel_expired_time_ms
        )
        if limits is None:
            limits = ServerLimits(
                idle_timeout_ms=config.server_channel_max_idle_time_seconds * 1000,
                backlog=config.server_socket_backlog,
            )
        self._server = RemotingServer(self._handle, limits=limits, name="namesrv")
        self._controller: ControllerManager | None = None
        self._controller_server: RemotingServer | None = None
        if config.enable_controller_in_namesrv:
            self._controller = ControllerManager(config, spawn=self._spawn, clock_ms=clock_ms)
            if config.controller_listen_port is not None:
                self._controller_server = RemotingServer(
                    self._handle_controller_only, limits=limits, name="controller"
                )
        self._started = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task_group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._channel_ids: dict[RemotingConnection, ChannelId] = {}
        self._connections: dict[ChannelId, RemotingConnection] = {}
        self._last_channel_id: ChannelId = 0

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port), once `wait_started()` has returned."""
        return self._server.address

    @property
    def controller_address(self) -> tuple[str, int] | None:
        """The bound (host, port) of `controllerListenPort`, if one is configured."""
        return None if self._controller_server is None else self._controller_server.address

    @property
    def controller(self) -> ControllerManager | None:
        """The embedded controller (None when `enableControllerInNamesrv=false`)."""
        return self._controller

    @property
    def broker_connections(self) -> int:
        """Open connections that carried a REGISTER_BROKER or a controller request (each has
        a close watcher)."""
        return len(self._connections)

    @property
    def route_info(self) -> RouteInfoManager:
        """The route tables (for inspection; change them only through requests)."""
        return self._route_info

    async def wait_started(self) -> None:
        """Return once `run()` is listening."""
        await self._started.wait()

    def stop(self) -> None:
        """Ask `run()` to finish: answer what is in flight, close connections, end tasks."""
        self._stopping.set()

    async def run(self) -> None:
        """Bind `bindAddress:listenPort` and serve until `stop()` or cancellation.

        Raises OSError if an address cannot be bound, EventLogError if the controller's event
        log cannot be read.
        """
        if self._controller is not None:
            await asyncio.to_thread(self._controller.open)
        try:
            await self._serve()
        finally:
            if self._controller is not None:
                self._controller.close()

    async def _serve(self) -> None:
        await self._server.start(self._config.bind_address, self._config.listen_port)
        try:
            if self._controller_server is not None:
                assert self._config.controller_listen_port is not None
                await self._controller_server.start(
                    self._config.bind_address, self._config.controller_listen_port
                )
        except BaseException:
            await self._server.close()
            raise
        async with asyncio.TaskGroup() as task_group:
            self._task_group = task_group
            try:
                self._spawn(self._scan_not_active_broker_loop())
                if self._controller is not None:
                    self._spawn(self._expire_heartbeats_loop())
                    self._spawn(self._scan_inactive_master_loop())
                self._started.set()
                await self._stopping.wait()
            finally:
                # Close the servers before the watchers go, so every request they still answer
                # finds them; then end every task so that the TaskGroup can exit.
                if self._controller is not None:
                    self._controller.stop()
                await self._server.close()
                if self._controller_server is not None:
                    await self._controller_server.close()
                self._task_group = None
                for task in tuple(self._tasks):
                    task.cancel()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        if self._task_group is None:  # stopping: nothing new starts
            coroutine.close()
            return
        task = self._task_group.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- background ------------------------------------------------------------------------

    async def _scan_not_active_broker_loop(self) -> None:
        interval_s = self._config.scan_not_active_broker_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            for removed in self._route_info.scan_not_active_broker(now_ms=self._clock_ms()):
                live_info = removed.live_info
                assert live_info is not None
                log.warning(
                    "broker channel expired addr=%s cluster=%s broker_name=%s broker_id=%s "
                    "heartbeat_timeout_ms=%d broker_set_removed=%s",
                    removed.broker_addr_info.broker_addr,
                    removed.broker_addr_info.cluster_name,
                    removed.broker_name,
                    removed.broker_id,
                    live_info.heartbeat_timeout_ms,
                    removed.broker_set_removed,
                )
                connection = self._connections.get(live_info.channel)
                if connection is not None:
                    connection.close()  # as Java does; its watcher then finds nothing left

    async def _expire_heartbeats_loop(self) -> None:
        """The controller's heartbeat table, checked when its first record expires rather than
        at Java's fixed scan: a hung master (SIGSTOP: no connection closes) is found
        `controllerHeartBeatTimeoutMills` after its last heartbeat, not up to one more
        `scanNotActiveBrokerInterval` later (5 s by default). That interval still bounds each
        wait, and a new record (or a shorter timeout) starts the wait over."""
        controller = self._controller
        assert controller is not None
        interval_ms = self._config.scan_not_active_broker_interval_ms
        while True:
            controller.expiry_moved.clear()
            expiry_ms = controller.next_heartbeat_expiry_ms()
            wait_ms = interval_ms if expiry_ms is None else min(
                interval_ms, max(expiry_ms + 1 - self._clock_ms(), 1))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_ms / 1000):
                    await controller.expiry_moved.wait()
            for _, info in controller.scan_not_active_broker():
                connection = self._connections.get(info.channel)
                if connection is not None:
                    connection.close()

    async def _scan_inactive_master_loop(self) -> None:
        assert self._controller is not None
        interval_s = self._config.scan_inactive_master_interval_ms / 1000
        # The live table starts empty: let every broker heartbeat before judging masters.
        await asyncio.sleep(self._config.inactive_master_scan_delay_ms / 1000)
        while True:
            await asyncio.sleep(interval_s)
            self._controller.scan_inactive_master()

    async def _watch_channel(self, connection: RemotingConnection, channel: ChannelId) -> None:
        await connection.wait_closed()
        del self._channel_ids[connection]
        del self._connections[channel]
        for removed in self._route_info.on_channel_destroy(channel):
            log.warning(
                "broker channel closed, broker removed addr=%s peer=%s broker_name=%s "
                "broker_id=%s broker_set_removed=%s",
                removed.broker_addr_info.broker_addr,
                connection.peer,
                removed.broker_name,
                removed.broker_id,
                removed.broker_set_removed,
            )
        if self._controller is not None:
            self._controller.on_channel_close(channel)

    def _channel_of(self, connection: RemotingConnection) -> ChannelId:
        channel = self._channel_ids.get(connection)
        if channel is None:
            self._last_channel_id += 1
            channel = self._last_channel_id
            self._channel_ids[connection] = channel
            self._connections[channel] = connection
            self._spawn(self._watch_channel(connection, channel))
        return channel

    # -- requests --------------------------------------------------------------------------

    async def _handle(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "request peer=%s code=%d opaque=%d ext_fields=%s body_bytes=%d",
                connection.peer,
                request.code,
                request.opaque,
                request.ext_fields,
                len(request.body),
            )
        if self._controller is not None and request.code in CONTROLLER_CODES:
            return await self._handle_controller(connection, request)
        match request.code:
            case RequestCode.REGISTER_BROKER:
                return self._register_broker(connection, request)
            case RequestCode.UNREGISTER_BROKER:
                return self._unregister_broker(request)
            case RequestCode.GET_ROUTEINFO_BY_TOPIC:
                return self._get_route_info_by_topic(request)
            case RequestCode.GET_BROKER_CLUSTER_INFO:
                body = encode_cluster_info(self._route_info.get_all_cluster_info())
                return request.make_response(ResponseCode.SUCCESS, body=body)
            case RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
                body = encode_topic_list(self._route_info.topics())
                return request.make_response(ResponseCode.SUCCESS, body=body)
            case _:
                return request_code_not_supported(request)

    async def _handle_controller_only(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        assert self._controller is not None
        if request.code not in CONTROLLER_CODES:
            return request_code_not_supported(request)
        return await self._handle_controller(connection, request)

    async def _handle_controller(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        assert self._controller is not None
        refusal = admin_refusal(request.code, request.ext_fields, connection.peer,
                                self._config.pyrmq_admin_allowlist)
        if refusal is not None:
            log.warning("admin request refused peer=%s code=%d reason=%s", connection.peer,
                        request.code, refusal)
            return request.make_response(ResponseCode.NO_PERMISSION, remark=refusal)
        return await self._controller.handle(connection, self._channel_of(connection), request)

    def _register_broker(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        if header.body_crc32 != 0:
            crc32 = zlib.crc32(request.body) & _CRC32_MASK
            if crc32 != header.body_crc32:
                log.warning(
                    "register broker crc32 not match peer=%s broker_addr=%s body_crc32=%d "
                    "computed=%d body_bytes=%d",
                    connection.peer,
                    header.broker_addr,
                    header.body_crc32,
                    crc32,
                    len(request.body),
                )
                return request.make_response(ResponseCode.SYSTEM_ERROR, remark="crc32 not match")
        if header.compressed:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark="compressed RegisterBrokerBody is not supported (compressedRegister=false)",
            )
        topic_config_wrapper = _topic_config_wrapper(request)
        try:
            result = self._route_info.register_broker(
                header,
                topic_config_wrapper,
                channel=self._channel_of(connection),
                now_ms=self._clock_ms(),
            )
        except RegisterBrokerRefusedError as err:
            log.warning("register broker refused peer=%s reason=%s", connection.peer, err)
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark="register broker failed")
        if result.stale_state_version_of is not None:
            log.warning(
                "register broker ignored, id held with a higher stateVersion addr=%s "
                "broker_name=%s broker_id=%d state_version=%d holder=%s",
                header.broker_addr,
                header.broker_name,
                header.broker_id,
                topic_config_wrapper.data_version.state_version,
                result.stale_state_version_of,
            )
        elif result.new_broker:
            log.info(
                "new broker registered addr=%s cluster=%s broker_name=%s broker_id=%d "
                "ha_server_addr=%s topics=%d",
                header.broker_addr,
                header.cluster_name,
                header.broker_name,
                header.broker_id,
                header.ha_server_addr,
                len(topic_config_wrapper.topic_config_table),
            )
        response_header = RegisterBrokerResponseHeader(
            ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
        )
        return request.make_response(
            ResponseCode.SUCCESS, ext_fields=response_header.to_ext_fields()
        )

    def _unregister_broker(self, request: RemotingCommand) -> RemotingCommand:
        header = UnRegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        removed = self._route_info.unregister_broker(
            cluster_name=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
        )
        _log_unregistered(removed)
        return request.make_response(ResponseCode.SUCCESS)

    def _get_route_info_by_topic(self, request: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext_fields(request.ext_fields)
        route = self._route_info.pickup_topic_route_data(header.topic)
        if route is None:
            return request.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=(
                    f"No topic route info in name server for the topic: {header.topic}"
                    f"\nSee {_FAQ_URL} for further details."
                ),
            )
        standard_json = wants_standard_json(
            version=request.version, accept_standard_json_only=header.accept_standard_json_only
        )
        body = encode_topic_route_data(route, standard_json=standard_json)
        return request.make_response(ResponseCode.SUCCESS, body=body)


def _topic_config_wrapper(request: RemotingCommand) -> TopicConfigAndMappingSerializeWrapper:
    """The topic configs of a REGISTER_BROKER body (an empty body: none, DataVersion zero).
    Raises BodyDecodeError (answered SYSTEM_ERROR) for a body that does not parse."""
    if not request.body:
        return TopicConfigAndMappingSerializeWrapper()
    if request.version >= REGISTER_BROKER_BODY_MIN_VERSION:
        return RegisterBrokerBody.decode(request.body).topic_config_serialize_wrapper
    return TopicConfigAndMappingSerializeWrapper.decode(request.body)


def _log_unregistered(removed: RemovedBroker) -> None:
    log.info(
        "broker unregistered addr=%s cluster=%s broker_name=%s broker_id=%s was_live=%s "
        "broker_set_removed=%s",
        removed.broker_addr_info.broker_addr,
        removed.broker_addr_info.cluster_name,
        removed.broker_name,
        removed.broker_id,
        removed.live_info is not None,
        removed.broker_set_removed,
    )
