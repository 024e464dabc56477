"""The remoting deltas between the releases (spec README "Version differences" rows 6-9, 11),
proven with what each release's real jars write and decide (java/.../ReleaseFacts.java) and with
its real name server:

- JSON from either release (fastjson 1.2.83 in 5.3.3, fastjson2 in 5.5.0: control characters,
  U+007F-U+009F, U+2028/U+2029, raw non-ASCII in the name server's standard route) decodes in
  pyrmq to the same values; the bytes really differ as the spec says;
- the header `version` each release sends, and the one pyrmq announces (PYRMQ_VERSION, 5.5.0's);
- every request code of the release that pyrmq does not implement (5.5.0: the lite codes and
  SWITCH_TIMER_ENGINE) is answered 3 by pyrmq's broker; pyrmq's code tables agree with the jars;
- a heartbeat of every MessageModel of the release (5.5.0: LITE_SELECTIVE) is accepted;
- topic/group validation and the topics not allowed for sends are 5.5.0's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import pytest

from broker.namesrv_registration import BrokerRegistrationIdentity, NamesrvRegistration
from broker.subscription_groups import validate_group
from broker.topic_config import NOT_ALLOWED_SEND_TOPICS, SYSTEM_TOPICS, validate_topic
from remoting.bodies import (
    HeartbeatData,
    MessageModel,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicRouteData,
)
from remoting.client import RemotingClient
from remoting.codec import FrameDecoder
from remoting.codes import (
    JAVA_VERSION_5_3_3,
    JAVA_VERSION_5_5_0,
    PYRMQ_VERSION,
    LanguageCode,
    RequestCode,
    ResponseCode,
)
from remoting.command import RemotingCommand
from remoting.headers import GetRouteInfoRequestHeader
from tests.interop.build import NEWEST
from tests.interop.conftest import PyrmqCluster
from tests.interop.harness import Classpath, JavaEnv

pytestmark = pytest.mark.interop

RELEASE_FACTS_MAIN: Final = "pyrmq.interop.ReleaseFacts"
# Every character whose JSON escaping differs between the releases, plus ones that do not.
TEXT: Final = (
    "".join(map(chr, range(0x20))) + '"\\/' + "".join(map(chr, range(0x7F, 0xA1)))
    + "\u00e9\u4e2d\u2028\u2029\U0001f600"
)
# What each release writes for some of them inside a JSON string (docs/remoting-protocol.md §2,
# §7.3).
ESCAPED: Final = {
    "5.3.3": {"\x1f": b"\\u001F", "\x7f": b"\\u007F", "\x85": b"\\u0085", "\u2028": b"\\u2028",
              "\u4e2d": "\u4e2d".encode()},
    "5.5.0": {"\x1f": b"\\u001f", "\x7f": b"\x7f", "\x85": "\x85".encode(),
              "\u2028": "\u2028".encode(), "\u4e2d": "\u4e2d".encode()},
}
# The name server's standard route (BrowserCompatible): 5.3.3 escapes everything above U+007E.
ROUTE_NON_ASCII: Final = {"5.3.3": b"\\u4E2D", "5.5.0": "\u4e2d".encode()}
JAVA_VERSION: Final = {"5.3.3": JAVA_VERSION_5_3_3, "5.5.0": JAVA_VERSION_5_5_0}
TOPICS: Final = (
    "T" * 127, "T" * 128, "%RETRY%" + "a" * 120, "%RETRY%" + "a" * 248, "%RETRY%" + "a" * 249,
    "%DLQ%" + "a" * 250, "%DLQ%" + "a" * 251, "bad#topic", "|%ok-_",
)
GROUPS: Final = ("g" * 120, "g" * 121, "bad#group", "ok_group-1")
TIMEOUT_MS: Final = 10_000


@dataclass
class ReleaseFacts:
    """What ReleaseFacts printed for one release."""

    header: bytes = b""
    route: bytes = b""
    heartbeats: dict[str, bytes] = field(default_factory=dict)
    request_codes: dict[str, int] = field(default_factory=dict)
    response_codes: dict[str, int] = field(default_factory=dict)
    version: int = 0
    not_allowed_send_topics: set[str] = field(default_factory=set)
    system_topics: set[str] = field(default_factory=set)
    validate: dict[tuple[str, str], str] = field(default_factory=dict)


def parse_release_facts(stdout: str) -> ReleaseFacts:
    facts = ReleaseFacts()
    for line in stdout.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "HEADER":
            facts.header = bytes.fromhex(rest)
        elif kind == "ROUTE":
            facts.route = bytes.fromhex(rest)
        elif kind == "HEARTBEAT":
            model, hex_body = rest.split()
            facts.heartbeats[model] = bytes.fromhex(hex_body)
        elif kind in ("REQUEST_CODE", "RESPONSE_CODE"):
            name, value = rest.split()
            table = facts.request_codes if kind == "REQUEST_CODE" else facts.response_codes
            table[name] = int(value)
        elif kind == "VERSION":
            facts.version = int(rest)
        elif kind == "NOT_ALLOWED_SEND_TOPIC":
            facts.not_allowed_send_topics.add(rest)
        elif kind == "SYSTEM_TOPIC":
            facts.system_topics.add(rest)
        elif kind == "VALIDATE":
            what, name, verdict = rest.split(" ", 2)
            facts.validate[(what, name)] = verdict
    return facts


@pytest.fixture(scope="module")
def java(interop_classpath: Classpath, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[JavaEnv]:
    with JavaEnv(interop_classpath, tmp_path_factory.mktemp("release-facts")) as env:
        yield env


@pytest.fixture(scope="module")
def facts(java: JavaEnv) -> ReleaseFacts:
    names = [f"topic:{t}" for t in TOPICS] + [f"group:{g}" for g in GROUPS]
    done = java.run_java(RELEASE_FACTS_MAIN, [TEXT.encode().hex(), *names], timeout_s=90)
    assert done.returncode == 0, done.stderr[-3000:]
    return parse_release_facts(done.stdout)


def decode_frame(frame: bytes) -> RemotingCommand:
    decoder = FrameDecoder()
    decoder.feed(frame)
    command = decoder.next_command()
    assert command is not None
    return command


def test_a_header_of_the_release_decodes_to_the_same_text(facts: ReleaseFacts,
                                                          rocketmq_version: str) -> None:
    command = decode_frame(facts.header)
    assert (command.code, command.opaque, command.language) == (10, 7, LanguageCode.JAVA)
    assert command.ext_fields == {"text": TEXT}
    assert command.remark == TEXT
    assert command.version == facts.version == JAVA_VERSION[rocketmq_version]


@pytest.mark.parametrize("char", ["\x1f", "\x7f", "\x85", "\u2028", "\u4e2d"],
                         ids=["U+001F", "U+007F", "U+0085", "U+2028", "U+4E2D"])
def test_the_release_escapes_as_the_spec_says(facts: ReleaseFacts, rocketmq_version: str,
                                              char: str) -> None:
    form = ESCAPED[rocketmq_version][char]
    for name, data in (("header", facts.header), ("route body", facts.route)):
        assert form in data, f"{name} of {rocketmq_version} lacks {form!r}"


def test_a_route_body_of_the_release_decodes_to_the_same_values(facts: ReleaseFacts) -> None:
    route = TopicRouteData.decode(facts.route)
    (broker,) = route.broker_datas
    assert (broker.cluster, broker.broker_name, dict(broker.broker_addrs)) == (
        TEXT, "broker-a", {0: "127.0.0.1:10911"})
    assert [(q.broker_name, q.read_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 4, 6)]


def test_the_name_servers_standard_route_decodes_to_the_same_values(
    java: JavaEnv, rocketmq_version: str
) -> None:
    """A broker registers with the real name server under a cluster name holding every
    character that differs; the route pyrmq (version PYRMQ_VERSION >= 401: standard JSON) gets
    back carries non-ASCII raw (5.5.0) or as upper-case \\u escapes (5.3.3) and decodes to it."""
    namesrv = java.start_java_namesrv(name=f"namesrv-route-{rocketmq_version}")
    topic = "PyrmqRouteEscapes"
    identity = BrokerRegistrationIdentity(
        cluster_name=TEXT, broker_name="broker-x", broker_addr="127.0.0.1:1",
        ha_server_addr="127.0.0.1:2", broker_id=0)
    # A first registration with exactly one topic is refused by the name server (it takes it
    # for a topic-only update): register TBW102 too, as brokers do.
    table = TopicConfigAndMappingSerializeWrapper(topic_config_table={
        name: TopicConfig(name, read_queue_nums=2, write_queue_nums=2)
        for name in (topic, "TBW102")})

    async def register_and_route() -> RemotingCommand:
        registration = NamesrvRegistration(
            namesrv_addrs=(namesrv.addr,), identity=identity, topic_table=lambda: table,
            period_ms=30_000, timeout_ms=TIMEOUT_MS)
        # The registration's connection stays open while the route is asked for: the name
        # server forgets a broker whose channel closes.
        host, port = namesrv.addr.rsplit(":", 1)
        client = await RemotingClient.connect(host, int(port))
        try:
            await registration.register_all()
            assert registration.registrations == 1
            request = RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC,
                GetRouteInfoRequestHeader(topic=topic).to_ext_fields())
            return await client.invoke(request, TIMEOUT_MS)
        finally:
            await client.close()
            await registration.close()

    response = asyncio.run(register_and_route())
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert response.version == JAVA_VERSION[rocketmq_version]
    assert b'"0":"127.0.0.1:1"' in response.body  # the standard form: quoted numeric keys
    assert ROUTE_NON_ASCII[rocketmq_version] in response.body
    (broker,) = TopicRouteData.decode(response.body).broker_datas
    assert (broker.cluster, broker.broker_name) == (TEXT, "broker-x")


def test_pyrmq_announces_the_newest_releases_version(facts: ReleaseFacts,
                                                     rocketmq_version: str) -> None:
    if rocketmq_version == NEWEST:
        assert facts.version == PYRMQ_VERSION
    else:
        assert facts.version < PYRMQ_VERSION


def test_pyrmqs_code_tables_agree_with_the_release(facts: ReleaseFacts) -> None:
    for code in RequestCode:
        if code.name in facts.request_codes:
            assert facts.request_codes[code.name] == code.value, code
    for response in ResponseCode:
        if response.name in facts.response_codes:
            assert facts.response_codes[response.name] == response.value, response


def test_every_request_code_pyrmq_does_not_implement_is_answered_3(
    facts: ReleaseFacts, pyrmq_cluster: PyrmqCluster, rocketmq_version: str
) -> None:
    known = {code.value for code in RequestCode}
    unknown = {name: value for name, value in facts.request_codes.items() if value not in known}
    if rocketmq_version == "5.5.0":
        # The codes 5.5.0 added (docs/remoting-protocol.md §5): in the jar, and unknown to pyrmq.
        added = {5001, *range(200070, 200080)}
        assert added <= set(unknown.values())

    async def answers() -> dict[str, tuple[int, str | None]]:
        host, port = pyrmq_cluster.broker.addr.rsplit(":", 1)
        client = await RemotingClient.connect(host, int(port))
        try:
            out = {}
            for name, value in sorted(unknown.items()):
                response = await client.invoke(RemotingCommand.request(value), TIMEOUT_MS)
                out[name] = (response.code, response.remark)
            return out
        finally:
            await client.close()

    got = asyncio.run(answers())
    assert got == {
        name: (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {value} not supported")
        for name, value in unknown.items()
    }


def test_a_heartbeat_of_every_message_model_is_accepted(
    facts: ReleaseFacts, pyrmq_cluster: PyrmqCluster, rocketmq_version: str
) -> None:
    expected_models = {"BROADCASTING", "CLUSTERING"}
    if rocketmq_version == "5.5.0":
        expected_models.add("LITE_SELECTIVE")
    assert set(facts.heartbeats) == expected_models
    for name, body in facts.heartbeats.items():
        (consumer,) = HeartbeatData.decode(body).consumer_data_set
        assert consumer.message_model is MessageModel[name]

    async def send_all() -> list[int]:
        host, port = pyrmq_cluster.broker.addr.rsplit(":", 1)
        client = await RemotingClient.connect(host, int(port))
        try:
            return [
                (await client.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, {}, body),
                                     TIMEOUT_MS)).code
                for body in facts.heartbeats.values()
            ]
        finally:
            await client.close()

    assert asyncio.run(send_all()) == [ResponseCode.SUCCESS] * len(facts.heartbeats)


def test_topic_and_group_rules_are_5_5_0s(facts: ReleaseFacts, rocketmq_version: str) -> None:
    ours = {("topic", t): validate_topic(t) for t in TOPICS}
    ours |= {("group", g): validate_group(g) for g in GROUPS}
    if rocketmq_version == "5.5.0":
        assert facts.not_allowed_send_topics == NOT_ALLOWED_SEND_TOPICS
        assert facts.system_topics == SYSTEM_TOPICS
        assert {key: "true" if remark is None else f"false {remark}"
                for key, remark in ours.items()} == facts.validate
    else:  # what 5.3.3 does differently (docs/store-format.md §3.3, docs/remoting-protocol.md §6.1)
        assert facts.not_allowed_send_topics < NOT_ALLOWED_SEND_TOPICS
        assert facts.validate[("topic", "%RETRY%" + "a" * 248)].startswith("false")
        assert ours[("topic", "%RETRY%" + "a" * 248)] is None
        assert {facts.validate[("group", g)] for g in GROUPS} == {"unchecked"}

