"""`pyrmqAdminAllowlist` (docs/reliability.md M16): the controller serves the operator's
requests (ELECT_MASTER with designateElect, CLEAN_BROKER_DATA, GET_CONTROLLER_CONFIG) only to
the clients it names; a broker's own requests stay open. Unset, anyone may send them."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.admin_allowlist import IPNetwork, admin_refusal, parse_allowlist
from controller.config import parse_controller_config
from controller.errors import ConfigError
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.controller.test_controller_server import running

ELECT = RequestCode.CONTROLLER_ELECT_MASTER
ADMIN_ELECT = {"clusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": "2",
               "designateElect": "true"}
BROKER_ELECT = {**ADMIN_ELECT, "designateElect": "false"}
CLEAN = {"clusterName": "DefaultCluster", "brokerName": "broker-a",
         "brokerControllerIdsToClean": "2"}


@pytest.mark.parametrize(("text", "shown"), [
    ("127.0.0.1", "127.0.0.1/32"),
    ("127.0.0.1, 10.0.0.0/8", "127.0.0.1/32,10.0.0.0/8"),
    ("10.1.2.3/8,::1", "10.0.0.0/8,::1/128"),
])
def test_parse(text: str, shown: str) -> None:
    assert ",".join(str(n) for n in parse_allowlist(text)) == shown


@pytest.mark.parametrize("text", ["", " , ", "localhost", "10.0.0.0/33", "1.2.3.4.5"])
def test_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"not an IP address or network|names no address"):
        parse_allowlist(text)


ALLOW = parse_allowlist("127.0.0.2, 10.0.0.0/8")


@pytest.mark.parametrize(("code", "fields", "peer", "allowlist", "refused"), [
    (ELECT, ADMIN_ELECT, "127.0.0.1:5000", ALLOW, True),
    (ELECT, ADMIN_ELECT, "127.0.0.2:5000", ALLOW, False),
    (ELECT, ADMIN_ELECT, "10.9.8.7:5000", ALLOW, False),
    (ELECT, ADMIN_ELECT, "::ffff:127.0.0.2:5000", ALLOW, False),  # IPv4-mapped
    (ELECT, ADMIN_ELECT, "::1:5000", ALLOW, True),
    (ELECT, ADMIN_ELECT, "127.0.0.1:5000", None, False),  # no allowlist: anyone
    (ELECT, {**ADMIN_ELECT, "designateElect": " TRUE "}, "127.0.0.1:5000", ALLOW, True),
    (ELECT, BROKER_ELECT, "127.0.0.1:5000", ALLOW, False),  # a broker's own election
    (ELECT, {"brokerName": "broker-a"}, "127.0.0.1:5000", ALLOW, False),
    (RequestCode.CLEAN_BROKER_DATA, CLEAN, "127.0.0.1:5000", ALLOW, True),
    (RequestCode.GET_CONTROLLER_CONFIG, {}, "127.0.0.1:5000", ALLOW, True),
    (RequestCode.GET_CONTROLLER_CONFIG, {}, "unconnected", ALLOW, True),
    (RequestCode.CONTROLLER_GET_METADATA_INFO, {}, "127.0.0.1:5000", ALLOW, False),
    (RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, "127.0.0.1:5000", ALLOW, False),
    (RequestCode.BROKER_HEARTBEAT, {}, "127.0.0.1:5000", ALLOW, False),
    (RequestCode.CONTROLLER_REGISTER_BROKER, {}, "127.0.0.1:5000", ALLOW, False),
    (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {}, "127.0.0.1:5000", ALLOW, False),
])
def test_admin_refusal(code: int, fields: dict[str, str], peer: str,
                       allowlist: tuple[IPNetwork, ...] | None, refused: bool) -> None:
    reason = admin_refusal(code, fields, peer, allowlist)
    assert (reason is not None) == refused
    if reason is not None:
        assert "pyrmqAdminAllowlist" in reason
        assert RequestCode(code).name in reason


def test_the_key_in_controller_conf() -> None:
    config, warnings = parse_controller_config(
        "pyrmqAdminAllowlist = 127.0.0.1,10.0.0.0/8\n", source="c.conf", home="/h")
    assert warnings == []
    assert config.pyrmq_admin_allowlist == parse_allowlist("127.0.0.1,10.0.0.0/8")
    assert ("pyrmqAdminAllowlist", "127.0.0.1/32,10.0.0.0/8") in config.properties()
    with pytest.raises(ConfigError, match=r"c.conf:1: pyrmqAdminAllowlist='10.0.0.0/40'"):
        parse_controller_config("pyrmqAdminAllowlist=10.0.0.0/40\n", source="c.conf", home="/h")
    assert parse_controller_config("", source="c.conf", home="/h")[0].pyrmq_admin_allowlist is None


async def codes(address: tuple[str, int]) -> dict[str, int]:
    """What the controller answers this client (127.0.0.1) for each request."""
    requests = {
        "admin elect": RemotingCommand.request(ELECT, ADMIN_ELECT),
        "broker elect": RemotingCommand.request(ELECT, BROKER_ELECT),
        "clean": RemotingCommand.request(RequestCode.CLEAN_BROKER_DATA, CLEAN),
        "config": RemotingCommand.request(RequestCode.GET_CONTROLLER_CONFIG),
        "metadata": RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO),
    }
    async with await RemotingClient.connect(*address) as client:
        return {name: (await client.invoke(request, 3000)).code
                for name, request in requests.items()}


async def test_the_controller_refuses_admin_requests_of_other_clients(tmp_path: Path) -> None:
    async with running(tmp_path, pyrmq_admin_allowlist=parse_allowlist("127.0.0.2")) as server:
        got = await codes(server.address)
        async with await RemotingClient.connect(*server.address) as client:
            answer = await client.invoke(RemotingCommand.request(ELECT, ADMIN_ELECT), 3000)
    assert answer.remark == ("CONTROLLER_ELECT_MASTER from 127.0.0.1 refused: admin requests "
                             "are allowed only from pyrmqAdminAllowlist")
    refused = {name for name, code in got.items() if code == ResponseCode.NO_PERMISSION}
    assert refused == {"admin elect", "clean", "config"}
    assert got["metadata"] == ResponseCode.SUCCESS


async def test_an_allowed_client_is_served(tmp_path: Path) -> None:
    async with running(tmp_path, pyrmq_admin_allowlist=parse_allowlist("127.0.0.0/8")) as server:
        allowed = await codes(server.address)
    async with running(tmp_path / "open") as server:
        unset = await codes(server.address)
    assert allowed == unset
    assert ResponseCode.NO_PERMISSION not in allowed.values()
    assert allowed["config"] == ResponseCode.SUCCESS
