"""Topic routes as a name server (Java's or pyrmq's) answers them, read with pyrmq's own
remoting client: what the tests wait on after a topic is created, since a broker registers a new
topic with its name servers right after creating it, but asynchronously."""

from __future__ import annotations

import asyncio
from typing import Final

from remoting.bodies import TopicRouteData
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import GetRouteInfoRequestHeader
from tests.interop.pyrmq_env import wait_until

REQUEST_TIMEOUT_MS: Final = 3_000
ROUTE_TIMEOUT_S: Final = 15.0


async def namesrv_route(namesrv: str, topic: str) -> TopicRouteData | None:
    """GET_ROUTEINFO_BY_TOPIC from `namesrv` ("host:port"): the route, or None while the name
    server has none (TOPIC_NOT_EXIST). Raises AssertionError for any other answer."""
    host, port = namesrv.rsplit(":", 1)
    client = await RemotingClient.connect(host, int(port))
    try:
        header = GetRouteInfoRequestHeader(topic=topic)
        response = await client.invoke(
            RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header.to_ext_fields()),
            REQUEST_TIMEOUT_MS,
        )
    finally:
        await client.close()
    if response.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
    return TopicRouteData.decode(response.body)


def wait_for_route(
    namesrv: str, topic: str, *, timeout_s: float = ROUTE_TIMEOUT_S
) -> TopicRouteData:
    """The route of `topic` once `namesrv` has one; raises PyrmqError after `timeout_s`.
    Synchronous: call it from sync tests (it runs its own event loop per attempt)."""
    routes: list[TopicRouteData] = []

    def routed() -> bool:
        route = asyncio.run(namesrv_route(namesrv, topic))
        if route is not None:
            routes.append(route)
        return route is not None

    wait_until(routed, timeout_s=timeout_s, what=f"name server {namesrv} routes {topic}")
    return routes[-1]
