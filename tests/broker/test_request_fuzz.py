"""A stateful fuzz of the broker's request surface (issue 12): valid-but-unusual requests.

A hypothesis state machine drives one real broker (real TCP on loopback, a real store on disk)
with sequences of SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE, PULL_MESSAGE,
CONSUMER_SEND_MSG_BACK, the offset codes, UPDATE_AND_CREATE_TOPIC and unknown codes, whose
fields take every bit pattern of flags and sysFlags, negative, huge and out-of-range numbers,
empty and long strings, and odd properties (DELAY, TRAN_MSG, UNIQ_KEY, TAGS, KEYS, ...),
batches mixing them. Every field is sent as raw text, so the broker's own parsers see it.

After every step:
- every request was answered (no timeout, no dropped connection), pulls excepted (a pull may
  be held by long polling);
- a normal send to a queue of the check topic succeeds;
- the broker restarts on the same store, and every message it acknowledged is served at the
  queue offset its answer named, with the body that was sent.

"Acknowledged" is a SUCCESS (0) or FLUSH_DISK_TIMEOUT (10) answer to a message that takes a
queue offset (TRANSACTION_NOT or COMMIT type, store/transaction_type.py) and carries no delay
property: a delayed message is served at its real topic only once it is due (issue 11).

In CI the profile is derandomized (tests/conftest.py) and the seed fixed, so a failure replays;
the examples and steps are sized to a budget of about a minute on the project's machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import struct
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import uvloop
from hypothesis import HealthCheck, seed, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from broker.node import BrokerNode
from pyrmq_client import BrokerClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingTimeoutError
from remoting.server import ServerLimits
from store.message_decoder import decode_record
from store.transaction_type import takes_queue_offset
from tests.broker.support import broker_config, connected, running_broker

CHECK_TOPIC = "FuzzCheck"
CHECK_QUEUES = 4
GROUP = "FuzzGroup"
MAX_MESSAGE_SIZE = 8 * 1024
STEP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_MS = 5_000
PULL_TIMEOUT_MS = 600
STORED_CODES = (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT)
DELAY_PROPERTIES = ("DELAY", "__STARTDELIVERTIME", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
                    "TIMER_DELAY_MS")

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Numbers as text: in range, at the edges, beyond the type, and not numbers at all.
NUMBER_TEXT = st.one_of(
    st.integers(-3, 40).map(str),
    INT32.map(str),
    INT64.map(str),
    st.sampled_from(["", " 1", "+1", "0x10", "1e3", "99999999999999999999", "-0", "abc"]),
)
BOOL_TEXT = st.sampled_from(["true", "false", "TRUE", "False", "0", "1", "", "yes"])
SYS_FLAGS = st.one_of(
    st.sampled_from([0, 0x1, 0x2, 0x4, 0x8, 0xC, 0x10, 0x20, 0x30, 0x40, 0x80, 0x100, 0x200,
                     0x300, 0x700, 0x7FFFFFFF, -1, -(2**31)]),
    INT32,
)
# Topics: the check topic (most often: the invariant sends to it after every step),
# auto-created ones, names at the limits, system and retry names.
TOPICS = st.one_of(st.just(CHECK_TOPIC), st.sampled_from([
    CHECK_TOPIC, "FuzzA", "FuzzB", "a" * 127, "T" * 128, "%RETRY%" + GROUP, "%DLQ%" + GROUP,
    "TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer",
    "Fuzz|Bar", "", "bad topic", "%RETRY%NoSuchGroup",
]))
ADMIN_TOPICS = st.sampled_from(["FuzzAdmin", "FuzzAdmin2", "a" * 127, "%RETRY%" + GROUP,
                                "TBW102", "", "bad topic"])
QUEUE_IDS = st.one_of(st.integers(0, CHECK_QUEUES - 1), st.integers(-2, 9), INT32)
PROPERTY_KEYS = st.sampled_from([
    "DELAY", "TRAN_MSG", "UNIQ_KEY", "TAGS", "KEYS", "WAIT", "__STARTDELIVERTIME",
    "TIMER_DELIVER_MS", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "PGROUP", "MAX_OFFSET",
    "MIN_OFFSET", "INNER_NUM", "INNER_MULTI_QUEUE_OFFSET", "__CRC32#", "CLUSTER", "MSG_REGION",
    "TRACE_ON", "ORIGIN_MESSAGE_ID", "RECONSUME_TIME", "x",
])
PROPERTY_TEXT = st.one_of(
    st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]),
            max_size=40),
    NUMBER_TEXT,
    BOOL_TEXT,
    st.just("v" * 3000),
)
PROPERTIES = st.dictionaries(PROPERTY_KEYS, PROPERTY_TEXT, max_size=5)
BODIES = st.one_of(st.binary(max_size=300), st.just(b""),
                   st.just(b"x" * (MAX_MESSAGE_SIZE + 1)))


def encode_properties(properties: dict[str, str]) -> str:
    return "".join(f"{key}\x01{value}\x02" for key, value in properties.items())


def encode_batch_body(messages: list[tuple[int, bytes, str]]) -> bytes:
    """RocketMQ's batch body: per message TOTALSIZE, MAGICCODE 0, BODYCRC 0, FLAG, body,
    properties (MessageDecoder.encodeMessage)."""
    out = bytearray()
    for flag, body, properties in messages:
        raw = properties.encode()
        total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(raw)
        out += struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body
        out += struct.pack(">h", len(raw)) + raw
    return bytes(out)


def send_fields(fields: dict[str, str], *, v2: bool) -> dict[str, str]:
    if not v2:
        return fields
    keys = {"producerGroup": "a", "topic": "b", "defaultTopic": "c",
            "defaultTopicQueueNums": "d", "queueId": "e", "sysFlag": "f", "bornTimestamp": "g",
            "flag": "h", "properties": "i", "reconsumeTimes": "j", "unitMode": "k",
            "maxReconsumeTimes": "l", "batch": "m"}
    return {keys[key]: value for key, value in fields.items()}


@st.composite
def send_requests(draw: st.DrawFn) -> tuple[RemotingCommand, dict[str, str], bytes]:
    """A SEND_MESSAGE or SEND_MESSAGE_V2 with any field values; also returns the properties
    and body (for the model)."""
    properties = draw(PROPERTIES)
    body = draw(BODIES)
    fields = {
        "producerGroup": draw(st.sampled_from(["FuzzProducer", "FuzzProducer", "", "p" * 300])),
        "topic": draw(TOPICS),
        "defaultTopic": draw(st.sampled_from(["TBW102", "", "Other"])),
        "defaultTopicQueueNums": draw(NUMBER_TEXT),
        "queueId": draw(st.one_of(QUEUE_IDS.map(str), NUMBER_TEXT)),
        "sysFlag": str(draw(SYS_FLAGS)),
        "bornTimestamp": draw(st.one_of(INT64.map(str), NUMBER_TEXT)),
        "flag": str(draw(INT32)),
        "properties": encode_properties(properties),
        "reconsumeTimes": draw(NUMBER_TEXT),
        "unitMode": draw(BOOL_TEXT),
        "maxReconsumeTimes": draw(NUMBER_TEXT),
        "batch": draw(BOOL_TEXT),
    }
    for key in draw(st.sets(st.sampled_from(["reconsumeTimes", "unitMode", "maxReconsumeTimes",
                                             "batch", "properties"]))):
        del fields[key]  # the optional fields, absent
    v2 = draw(st.booleans())
    code = RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE
    request = RemotingCommand.request(code, send_fields(fields, v2=v2), body)
    return request, properties, body


@st.composite
def batch_requests(draw: st.DrawFn) -> tuple[RemotingCommand, list[tuple[bytes, dict[str, str]]]]:
    inner = draw(st.lists(st.tuples(INT32, st.binary(max_size=200), PROPERTIES), min_size=1,
                          max_size=6))
    fields = {
        "a": "FuzzProducer", "b": draw(TOPICS), "c": "TBW102", "d": draw(NUMBER_TEXT),
        "e": str(draw(QUEUE_IDS)), "f": str(draw(SYS_FLAGS)), "g": draw(INT64.map(str)),
        "h": str(draw(INT32)), "i": encode_properties(draw(PROPERTIES)), "m": "true",
    }
    body = encode_batch_body([(flag, data, encode_properties(props))
                              for flag, data, props in inner])
    request = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, fields, body)
    return request, [(data, props) for _, data, props in inner]


@st.composite
def pull_requests(draw: st.DrawFn) -> RemotingCommand:
    fields = {
        "consumerGroup": draw(st.sampled_from([GROUP, "", "g" * 300])),
        "topic": draw(TOPICS), "queueId": str(draw(QUEUE_IDS)),
        "queueOffset": draw(st.one_of(INT64.map(str), NUMBER_TEXT)),
        "maxMsgNums": draw(NUMBER_TEXT), "sysFlag": str(draw(SYS_FLAGS)),
        "commitOffset": draw(st.one_of(INT64.map(str), NUMBER_TEXT)),
        "suspendTimeoutMillis": draw(st.sampled_from(["0", "100", "-1", "15000",
                                                      str(2**63 - 1)])),
        "subVersion": draw(NUMBER_TEXT),
        "subscription": draw(st.sampled_from(["*", "", "TagA || TagB", "||", " ", "a" * 500,
                                              "SELECT * FROM x"])),
        "expressionType": draw(st.sampled_from(["TAG", "SQL92", "", "tag", "WHAT"])),
        "maxMsgBytes": draw(NUMBER_TEXT),
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)


@st.composite
def offset_requests(draw: st.DrawFn) -> RemotingCommand:
    code = draw(st.sampled_from([
        RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME,
        RequestCode.GET_ALL_CONSUMER_OFFSET, RequestCode.GET_TOPIC_STATS_INFO,
        RequestCode.GET_TOPIC_CONFIG, RequestCode.GET_BROKER_RUNTIME_INFO,
        RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.VIEW_MESSAGE_BY_ID,
    ]))
    fields = {
        "consumerGroup": draw(st.sampled_from([GROUP, "", "g" * 300])),
        "topic": draw(TOPICS), "queueId": str(draw(QUEUE_IDS)),
        "commitOffset": draw(st.one_of(INT64.map(str), NUMBER_TEXT)),
        "timestamp": draw(st.one_of(INT64.map(str), NUMBER_TEXT)),
        "offset": draw(st.one_of(INT64.map(str), NUMBER_TEXT)),
        "boundaryType": draw(st.sampled_from(["LOWER", "UPPER", "", "lower", "x"])),
        "committed": draw(BOOL_TEXT), "setZeroIfNotFound": draw(BOOL_TEXT),
    }
    present = draw(st.sets(st.sampled_from(sorted(fields)), min_size=len(fields) - 2))
    return RemotingCommand.request(code, {key: fields[key] for key in present})


@st.composite
def admin_requests(draw: st.DrawFn) -> RemotingCommand:
    if draw(st.booleans()):
        return RemotingCommand.request(draw(st.sampled_from([0, 9999, 1, 2, 3, 99, 100, 1003])),
                                       {"x": draw(NUMBER_TEXT)}, draw(st.binary(max_size=40)))
    fields = {
        "topic": draw(ADMIN_TOPICS), "defaultTopic": "TBW102",
        "readQueueNums": draw(st.one_of(st.integers(-1, 20).map(str), NUMBER_TEXT)),
        "writeQueueNums": draw(st.one_of(st.integers(-1, 20).map(str), NUMBER_TEXT)),
        "perm": str(draw(st.one_of(st.integers(0, 7), INT32))),
        "topicFilterType": draw(st.sampled_from(["SINGLE_TAG", "MULTI_TAG", "", "x"])),
        "topicSysFlag": draw(NUMBER_TEXT), "order": draw(BOOL_TEXT),
        "attributes": draw(st.sampled_from(["", "+queue.type=Normal", "+x=y", "-a", "+"])),
        "force": draw(BOOL_TEXT),
    }
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)


@dataclasses.dataclass
class Broker:
    """One broker on a store directory, run on the state machine's own event loop."""

    root: Path
    loop: asyncio.AbstractEventLoop
    node: BrokerNode | None = None
    task: asyncio.Task[None] | None = None
    client: BrokerClient | None = None

    def run(self, coro_timeout_s: float, coro: object) -> object:
        async def bounded() -> object:
            async with asyncio.timeout(coro_timeout_s):
                return await coro  # type: ignore[misc]
        return self.loop.run_until_complete(bounded())

    def start(self) -> None:
        config = broker_config(self.root, max_message_size=MAX_MESSAGE_SIZE,
                               mapped_file_size_commit_log=256 * 1024,
                               mapped_file_size_consume_queue=200 * 20)

        async def start() -> None:
            node = BrokerNode(config, server_limits=ServerLimits(close_timeout_ms=1_000))
            self.node = node
            self.task = asyncio.get_running_loop().create_task(node.run())
            started = asyncio.ensure_future(node.started.wait())
            await asyncio.wait({self.task, started}, return_when=asyncio.FIRST_COMPLETED)
            if not node.started.is_set():
                started.cancel()
                self.task.result()  # the start-up error
            self.client = await BrokerClient.connect(*node.address)

        self.run(STEP_TIMEOUT_S, start())

    def stop(self) -> None:
        async def stop() -> None:
            if self.client is not None:
                await self.client.close()
                self.client = None
            if self.node is not None and self.task is not None:
                self.node.request_stop()
                await self.task
            self.node, self.task = None, None

        self.run(STEP_TIMEOUT_S, stop())

    def invoke(self, request: RemotingCommand, timeout_ms: int = REQUEST_TIMEOUT_MS
               ) -> RemotingCommand:
        assert self.client is not None
        response = self.run(STEP_TIMEOUT_S, self.client.invoke(request, timeout_ms))
        assert isinstance(response, RemotingCommand)
        return response


def normal_send(topic: str, queue_id: int, body: bytes) -> RemotingCommand:
    fields = {"producerGroup": "FuzzProducer", "topic": topic, "defaultTopic": "TBW102",
              "defaultTopicQueueNums": str(CHECK_QUEUES), "queueId": str(queue_id),
              "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
              "properties": "WAIT\x01true\x02"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body)


@seed(20261125)
class RequestSurface(RuleBasedStateMachine):
    """The model: every acknowledged message, by (topic, queue id) and queue offset."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = uvloop.new_event_loop()
        self.tmp = Path(tempfile.mkdtemp(prefix="pyrmq-fuzz-"))
        self.broker = Broker(self.tmp / "store", self.loop)
        self.acked: dict[tuple[str, int], dict[int, bytes]] = {}
        self.checks = 0

    @initialize()
    def start(self) -> None:
        self.broker.start()
        group = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": CHECK_TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(CHECK_QUEUES),
            "writeQueueNums": str(CHECK_QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG",
            "order": "false", "force": "false"})
        assert self.broker.invoke(group).code == ResponseCode.SUCCESS

    def teardown(self) -> None:
        try:
            self.broker.stop()
        finally:
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _record(self, response: RemotingCommand, topic: str, body: bytes,
                properties: dict[str, str], sys_flag: int, offset_delta: int = 0) -> None:
        if response.code not in STORED_CODES:
            return
        if not takes_queue_offset(sys_flag) or any(key in properties
                                                   for key in DELAY_PROPERTIES):
            return
        fields = response.ext_fields
        queue = (topic, int(fields["queueId"]))
        self.acked.setdefault(queue, {})[int(fields["queueOffset"]) + offset_delta] = body

    @rule(sent=send_requests())
    def send(self, sent: tuple[RemotingCommand, dict[str, str], bytes]) -> None:
        request, properties, body = sent
        response = self.broker.invoke(request)
        fields = request.ext_fields
        topic = fields.get("topic", fields.get("b", ""))
        sys_flag = int(fields.get("sysFlag", fields.get("f", "0")))
        self._record(response, topic, body, properties, sys_flag)

    @rule(sent=batch_requests())
    def send_batch(self, sent: tuple[RemotingCommand, list[tuple[bytes, dict[str, str]]]]
                   ) -> None:
        request, inner = sent
        response = self.broker.invoke(request)
        sys_flag = int(request.ext_fields["f"])
        for index, (body, properties) in enumerate(inner):
            self._record(response, request.ext_fields["b"], body, properties, sys_flag, index)

    @rule(request=pull_requests())
    def pull(self, request: RemotingCommand) -> None:
        # Held by long polling: an answer may come later, or at the stop.
        with contextlib.suppress(RemotingTimeoutError):
            self.broker.invoke(request, PULL_TIMEOUT_MS)

    @rule(request=st.one_of(offset_requests(), admin_requests()))
    def other(self, request: RemotingCommand) -> None:
        self.broker.invoke(request)

    @rule(offset=st.one_of(st.integers(-10, 5000), INT64), delay=INT32,
          max_times=st.one_of(st.none(), INT32))
    def send_back(self, offset: int, delay: int, max_times: int | None) -> None:
        fields = {"offset": str(offset), "group": GROUP, "delayLevel": str(delay),
                  "originTopic": CHECK_TOPIC, "unitMode": "false"}
        if max_times is not None:
            fields["maxReconsumeTimes"] = str(max_times)
        self.broker.invoke(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, fields))

    @invariant()
    def normal_send_succeeds_and_restart_serves_everything(self) -> None:
        if self.broker.client is None:
            return  # before initialize
        self.checks += 1
        for queue_id in range(CHECK_QUEUES):
            body = f"check {self.checks}".encode()
            response = self.broker.invoke(normal_send(CHECK_TOPIC, queue_id, body))
            assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
            self._record(response, CHECK_TOPIC, body, {}, 0)
        self.broker.stop()
        self.broker.start()
        for (topic, queue_id), expected in self.acked.items():
            served = self._read_queue(topic, queue_id, min(expected), max(expected) + 1)
            for queue_offset, body in expected.items():
                assert served.get(queue_offset) == body, (
                    f"acknowledged message {topic}/{queue_id}@{queue_offset} not served")

    def _read_queue(self, topic: str, queue_id: int, low: int, high: int) -> dict[int, bytes]:
        node = self.broker.node
        assert node is not None
        assert node.store is not None
        store = node.store
        served: dict[int, bytes] = {}
        offset = low
        while offset < high:
            result = store.get_messages(topic, queue_id, offset, max_count=32,
                                        max_bytes=1 << 24)
            if not result.messages:
                break
            for queue_offset, raw in zip(result.queue_offsets, result.messages, strict=True):
                served[queue_offset] = decode_record(raw).body
            offset = result.next_begin_offset
        return served


def test_request_surface() -> None:
    run_state_machine_as_test(RequestSurface, settings=settings(
        max_examples=12, stateful_step_count=12, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    ))


async def test_the_issue_12_requests_leave_the_broker_healthy(tmp_path: Path) -> None:
    """Normal, ROLLBACK (sysFlag 12), normal to one queue, as issue 12 reported: every send
    succeeds with Java's queue offsets (0, 0, 1), the broker keeps taking writes, restarts, and
    serves the two normal messages; a COMMIT-type batch is MESSAGE_ILLEGAL, as in Java."""
    config = broker_config(tmp_path / "store")
    offsets = []
    async with running_broker(config) as node, connected(node) as client:
        for sys_flag, body in ((0, b"one"), (0xC, b"rolled back"), (0, b"two")):
            request = normal_send("M1", 0, body)
            request.ext_fields["sysFlag"] = str(sys_flag)
            response = await client.invoke(request)
            assert response.code == ResponseCode.SUCCESS, response.remark
            offsets.append(int(response.ext_fields["queueOffset"]))
        batch = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, {
            "a": "P", "b": "M1", "c": "TBW102", "d": "4", "e": "0", "f": "8", "g": "0",
            "h": "0", "m": "true"}, encode_batch_body([(0, b"x", "")]))
        refused = await client.invoke(batch)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL, refused.remark
        assert "does not support transaction" in (refused.remark or "")
        assert node.metrics is not None
        assert b"\npyrmq_store_dispatch_skipped{" in node.metrics.render()  # the gauge exported
    assert offsets == [0, 0, 1]
    async with running_broker(config) as node, connected(node) as client:
        assert (await client.invoke(normal_send("M2", 0, b"other"))).code == ResponseCode.SUCCESS
        assert node.store is not None
        served = node.store.get_messages("M1", 0, 0, max_count=8)
        assert [decode_record(raw).body for raw in served.messages] == [b"one", b"two"]
