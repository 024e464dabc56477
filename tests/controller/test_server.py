"""`ControllerServer` on real loopback TCP: RemotingClients play brokers and clients."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from controller.config import ControllerConfig
from controller.route_info import MASTER_ID
from controller.server import ControllerServer
from remoting.bodies import ClusterInfo, RegisterBrokerBody, TopicRouteData
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from remoting.server import ServerLimits
from tests.controller.support import wrapper
from tests.remoting.support import compact_json, wait_until

pytestmark = pytest.mark.timeout(20)

TIMEOUT_MS = 3_000
MASTER = "127.0.0.1:10911"
SLAVE = "127.0.0.2:10911"

# docs/remoting-protocol.md §7.1: a RegisterBrokerBody, 605 bytes, bodyCrc32 1735289491.
SPEC_REGISTER_BODY = compact_json("""
{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"stateVersion":2,
"timestamp":1700000000000},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1700000000000},
"topicConfigTable":{"TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,
"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4},
"TBW102":{"attributes":{},"order":false,"perm":7,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",
"topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8}},"topicQueueMappingDetailMap":{},
"topicQueueMappingInfoMap":{}}}
""")
SPEC_REGISTER_BODY_CRC32 = 1735289491


@asynccontextmanager
async def running(
    *, broker_channel_expired_time_ms: int = 120_000
) -> AsyncIterator[ControllerServer]:
    """A controller on 127.0.0.1, any free port, with test-sized settings; stopped on exit."""
    settings = ControllerConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        scan_not_active_broker_interval_ms=50,
        broker_channel_expired_time_ms=broker_channel_expired_time_ms,
        enable_controller_in_namesrv=False,  # the name server alone (test_controller_server.py)
    )
    server = ControllerServer(settings, limits=ServerLimits(close_timeout_ms=500))
    async with asyncio.TaskGroup() as task_group:
        task_group.create_task(server.run())
        try:
            async with asyncio.timeout(5):
                await server.wait_started()
            yield server
        finally:
            server.stop()


@asynccontextmanager
async def connected(server: ControllerServer) -> AsyncIterator[RemotingClient]:
    client = await RemotingClient.connect(*server.address)
    try:
        yield client
    finally:
        await client.close()


def register_request(
    broker_addr: str,
    broker_id: int,
    *,
    broker_name: str = "broker-a",
    topics: tuple[str, ...] = ("TopicTest:4", "TBW102:8"),
    counter: int = 1,
    body: bytes | None = None,
    body_crc32: int | None = None,
) -> RemotingCommand:
    """A REGISTER_BROKER as a 5.x broker sends it (bodyCrc32 of the body unless given)."""
    if body is None:
        body = RegisterBrokerBody(
            topic_config_serialize_wrapper=wrapper(topics, counter=counter)
        ).encode()
    header = RegisterBrokerRequestHeader(
        broker_name=broker_name,
        broker_addr=broker_addr,
        cluster_name="DefaultCluster",
        ha_server_addr=broker_addr.replace(":10911", ":10912"),
        broker_id=broker_id,
        enable_acting_master=False,
        body_crc32=zlib.crc32(body) & 0x7FFFFFFF if body_crc32 is None else body_crc32,
    )
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)


def route_request(topic: str, *, version: int | None = None) -> RemotingCommand:
    request = RemotingCommand.request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic).to_ext_fields()
    )
    if version is not None:
        request = RemotingCommand(code=request.code, version=version, ext_fields=request.ext_fields)
    return request


async def cluster_info(client: RemotingClient) -> ClusterInfo:
    response = await client.invoke(
        RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT_MS
    )
    assert response.code == ResponseCode.SUCCESS
    return ClusterInfo.decode(response.body)


async def test_master_and_slave_register_then_a_client_gets_the_route() -> None:
    async with (
        running() as server,
        connected(server) as master,
        connected(server) as slave,
        connected(server) as client,
    ):
        response = await master.invoke(register_request(MASTER, 0), TIMEOUT_MS)
        assert (response.code, response.ext_fields) == (ResponseCode.SUCCESS, {})
        response = await slave.invoke(register_request(SLAVE, 1), TIMEOUT_MS)
        assert response.code == ResponseCode.SUCCESS
        assert RegisterBrokerResponseHeader.from_ext_fields(response.ext_fields) == (
            RegisterBrokerResponseHeader(ha_server_addr="127.0.0.1:10912", master_addr=MASTER)
        )

        response = await client.invoke(route_request("TopicTest"), TIMEOUT_MS)
        assert response.code == ResponseCode.SUCCESS
        route = TopicRouteData.decode(response.body)
        assert [(q.broker_name, q.read_queue_nums, q.perm) for q in route.queue_datas] == [
            ("broker-a", 4, 6)
        ]
        assert [dict(b.broker_addrs) for b in route.broker_datas] == [{0: MASTER, 1: SLAVE}]

        info = await cluster_info(client)
        assert dict(info.cluster_addr_table) == {"DefaultCluster": ("broker-a",)}
        assert dict(info.broker_addr_table["broker-a"].broker_addrs) == {0: MASTER, 1: SLAVE}


async def test_route_body_form_follows_the_request_version() -> None:
    async with running() as server, connected(server) as broker:
        await broker.invoke(register_request(MASTER, 0), TIMEOUT_MS)
        standard = await broker.invoke(route_request("TopicTest", version=479), TIMEOUT_MS)
        old = await broker.invoke(route_request("TopicTest", version=333), TIMEOUT_MS)
        assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in standard.body
        assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in old.body
        cluster = await broker.invoke(
            RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT_MS
        )
        assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in cluster.body


async def test_spec_register_body_with_its_crc32_is_accepted() -> None:
    assert len(SPEC_REGISTER_BODY) == 605
    assert zlib.crc32(SPEC_REGISTER_BODY) & 0x7FFFFFFF == SPEC_REGISTER_BODY_CRC32
    async with running() as server, connected(server) as broker:
        request = register_request(
            MASTER, 0, body=SPEC_REGISTER_BODY, body_crc32=SPEC_REGISTER_BODY_CRC32
        )
        assert (await broker.invoke(request, TIMEOUT_MS)).code == ResponseCode.SUCCESS
        response = await broker.invoke(route_request("TBW102"), TIMEOUT_MS)
        route = TopicRouteData.decode(response.body)
        assert [(q.read_queue_nums, q.perm) for q in route.queue_datas] == [(8, 7)]


async def test_register_with_a_wrong_crc32_is_refused() -> None:
    async with running() as server, connected(server) as broker:
        request = register_request(MASTER, 0, body_crc32=SPEC_REGISTER_BODY_CRC32)
        response = await broker.invoke(request, TIMEOUT_MS)
        assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
        assert (await cluster_info(broker)).broker_addr_table == {}


async def test_first_registration_with_a_single_topic_fails() -> None:
    async with running() as server, connected(server) as broker:
        response = await broker.invoke(register_request(MASTER, 0, topics=("T:4",)), TIMEOUT_MS)
        assert (response.code, response.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "register broker failed",
        )


async def test_register_without_a_required_field_names_it() -> None:
    async with running() as server, connected(server) as broker:
        request = register_request(MASTER, 0)
        fields = {k: v for k, v in request.ext_fields.items() if k != "brokerName"}
        request = RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, request.body)
        response = await broker.invoke(request, TIMEOUT_MS)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert response.remark is not None
        assert "brokerName" in response.remark


async def test_unknown_topic_is_topic_not_exist() -> None:
    async with running() as server, connected(server) as client:
        response = await client.invoke(route_request("Nowhere"), TIMEOUT_MS)
        assert response.code == ResponseCode.TOPIC_NOT_EXIST
        assert response.remark is not None
        assert response.remark.startswith(
            "No topic route info in name server for the topic: Nowhere\nSee https://"
        )


async def test_unknown_code_is_not_supported() -> None:
    async with running() as server, connected(server) as client:
        response = await client.invoke(RemotingCommand.request(999), TIMEOUT_MS)
        assert (response.code, response.remark) == (
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            " request type 999 not supported",
        )


async def test_unregister_removes_the_broker() -> None:
    async with running() as server, connected(server) as broker:
        await broker.invoke(register_request(MASTER, 0), TIMEOUT_MS)
        header = UnRegisterBrokerRequestHeader(
            broker_name="broker-a", broker_addr=MASTER, cluster_name="DefaultCluster", broker_id=0
        )
        request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_ext_fields())
        assert (await broker.invoke(request, TIMEOUT_MS)).code == ResponseCode.SUCCESS
        assert (await cluster_info(broker)).broker_addr_table == {}
        response = await broker.invoke(route_request("TopicTest"), TIMEOUT_MS)
        assert response.code == ResponseCode.TOPIC_NOT_EXIST


async def test_broker_that_stops_registering_expires_and_its_connection_is_closed() -> None:
    async with (
        running(broker_channel_expired_time_ms=600) as server,
        connected(server) as master,
        connected(server) as slave,
        connected(server) as client,
    ):
        await master.invoke(register_request(MASTER, 0), TIMEOUT_MS)
        # The slave keeps registering (a broker does every 30 s); the master stops.
        async with asyncio.timeout(5):
            while True:
                await slave.invoke(register_request(SLAVE, 1), TIMEOUT_MS)
                addrs = (await cluster_info(client)).broker_addr_table["broker-a"].broker_addrs
                if MASTER_ID not in addrs:
                    break
                await asyncio.sleep(0.05)
        assert dict(addrs) == {1: SLAVE}
        await wait_until(lambda: master.is_closed, timeout_s=5, what="master connection closed")
        assert not slave.is_closed


async def test_closed_broker_connection_removes_the_broker() -> None:
    async with running() as server, connected(server) as client:
        master = await RemotingClient.connect(*server.address)
        await master.invoke(register_request(MASTER, 0), TIMEOUT_MS)
        assert (await cluster_info(client)).broker_addr_table
        await master.close()
        await wait_until(
            lambda: not server.route_info.broker_live_table, timeout_s=5, what="broker removed"
        )
        assert (await cluster_info(client)).broker_addr_table == {}


async def test_broker_re_registered_on_a_new_connection_survives_the_old_one_closing() -> None:
    async with running() as server, connected(server) as new, connected(server) as client:
        old = await RemotingClient.connect(*server.address)
        await old.invoke(register_request(MASTER, 0), TIMEOUT_MS)
        await new.invoke(register_request(MASTER, 0), TIMEOUT_MS)
        assert server.broker_connections == 2
        await old.close()
        await wait_until(
            lambda: server.broker_connections == 1, timeout_s=5, what="old connection handled"
        )
        assert dict((await cluster_info(client)).broker_addr_table["broker-a"].broker_addrs) == {
            0: MASTER
        }


async def test_stop_answers_and_closes_every_connection() -> None:
    async with running() as server, connected(server) as broker:
        await broker.invoke(register_request(MASTER, 0), TIMEOUT_MS)
        server.stop()
        await wait_until(lambda: broker.is_closed, timeout_s=5, what="connection closed by stop")
