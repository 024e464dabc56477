"""Bad input end to end (docs/reliability.md §5, §8): pyrmq's broker as a real process, requests
over real TCP from pyrmq's remoting client. Each bad request gets its typed response code on a
connection that stays usable, and changes nothing (P5): the commitlog's max offset, every probed
queue's max offset and the topic table are the same afterwards.

The broker runs with maxMessageSize=64 KiB, so an oversized body is a small request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from pyrmq_client import BrokerClient, Message, Producer, encode_batch_body
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import SendMessageRequestHeader
from store.message_properties import encode_properties
from tests.interop.pyrmq_env import PyrmqEnv, PyrmqProcess

pytestmark = pytest.mark.interop

MAX_MESSAGE_SIZE = 64 * 1024
PROPERTIES_BYTES_MAX = 32_767
TOPIC = "PyrmqBadInputBase"
QUEUE_NUMS = 4
LONG_TOPIC = "T" * 128  # TopicValidator: at most 127 characters
ILLEGAL_TOPIC = "bad/topic name"
NEW_TOPIC = "PyrmqBadInputNeverCreated"  # legal, unknown: auto-creation must not happen
UNKNOWN_REQUEST_CODE = 9_999
REQUEST_TIMEOUT_MS = 5_000
PROBED_TOPICS = (TOPIC, LONG_TOPIC, ILLEGAL_TOPIC, NEW_TOPIC, "SCHEDULE_TOPIC_XXXX")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PyrmqProcess]:
    """A pyrmq broker (no name server) holding TOPIC with one message in each queue; stopped
    with SIGTERM at the end, which must exit 0."""
    with PyrmqEnv(tmp_path_factory.mktemp("bad-input")) as env:
        process = env.start_broker(None, extra_conf={"maxMessageSize": MAX_MESSAGE_SIZE})
        asyncio.run(_create_base_topic(process))
        yield process
        assert process.terminate() == 0, process.diagnostics()


async def _create_base_topic(process: PyrmqProcess) -> None:
    async with await _connect(process) as client:
        await client.create_topic(TOPIC, read_queue_nums=QUEUE_NUMS, write_queue_nums=QUEUE_NUMS)
        producer = Producer(client, "pyrmq_bad_input_producer")
        for queue_id in range(QUEUE_NUMS):
            await producer.send(Message(TOPIC, b"good", tags="TagA"), queue_id=queue_id)


async def _connect(process: PyrmqProcess) -> BrokerClient:
    host, port = process.addr.rsplit(":", 1)
    return await BrokerClient.connect(host, int(port))


# --- requests ----------------------------------------------------------------------------------


def send_request(
    topic: str,
    body: bytes = b"body",
    *,
    properties: dict[str, str] | None = None,
    queue_id: int = 0,
    batch: bool = False,
) -> RemotingCommand:
    """SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE with `batch`) as a Java producer sends it."""
    header = SendMessageRequestHeader(
        producer_group="pyrmq_bad_input_producer",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=QUEUE_NUMS,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=time.time_ns() // 1_000_000,
        flag=0,
        properties=encode_properties(properties or {"TAGS": "TagA", "WAIT": "true"}).decode(),
        batch=batch,
    )
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand.request(code, header.to_ext_fields_v2(), body)


def batch_request(topic: str, body: bytes) -> RemotingCommand:
    return send_request(topic, body, properties={"WAIT": "true"}, batch=True)


def batch_entry(body: bytes = b"inner", properties: bytes = b"TAGS\x01TagA\x02") -> bytes:
    return encode_batch_body([(0, body, properties)])


def patched(entry: bytes, offset: int, value: int, size: int = 4) -> bytes:
    """`entry` with the big-endian signed int of `size` bytes at `offset` replaced."""
    return entry[:offset] + value.to_bytes(size, "big", signed=True) + entry[offset + size :]


# Batch entry layout: TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | FLAG i32 | BODYLENGTH i32 |
# body | PROPERTIESLENGTH i16 | properties
BODY_LENGTH_AT = 16
ENTRY = batch_entry()
PROPERTIES_LENGTH_AT = 20 + len(b"inner")


@dataclass(frozen=True, slots=True)
class Case:
    request: Callable[[], RemotingCommand]
    code: int
    remark: str  # a piece of the expected remark


CASES = [
    pytest.param(
        Case(lambda: send_request(LONG_TOPIC), ResponseCode.INVALID_PARAMETER, "longer than"),
        id="topic-of-128-chars",
    ),
    pytest.param(
        Case(lambda: send_request(ILLEGAL_TOPIC), ResponseCode.INVALID_PARAMETER, "illegal"),
        id="topic-with-illegal-characters",
    ),
    pytest.param(
        Case(lambda: batch_request(ILLEGAL_TOPIC, ENTRY), ResponseCode.INVALID_PARAMETER,
             "illegal"),
        id="batch-to-a-topic-with-illegal-characters",
    ),
    pytest.param(
        Case(lambda: send_request("SCHEDULE_TOPIC_XXXX"), ResponseCode.NO_PERMISSION,
             "forbidden"),
        id="topic-clients-may-not-send-to",
    ),
    pytest.param(
        Case(lambda: send_request(TOPIC, queue_id=QUEUE_NUMS + 3),
             ResponseCode.INVALID_PARAMETER, "queueId"),
        id="queue-id-beyond-the-topics-queues",
    ),
    pytest.param(
        Case(lambda: send_request(TOPIC, b"x" * (MAX_MESSAGE_SIZE + 1)),
             ResponseCode.MESSAGE_ILLEGAL, "max_message_size"),
        id="body-over-max-message-size",
    ),
    pytest.param(
        Case(lambda: send_request(NEW_TOPIC, b"x" * (MAX_MESSAGE_SIZE + 1)),
             ResponseCode.MESSAGE_ILLEGAL, "max_message_size"),
        id="body-over-max-message-size-to-an-unknown-topic",
    ),
    pytest.param(
        Case(lambda: send_request(TOPIC, properties={"pad": "p" * PROPERTIES_BYTES_MAX}),
             ResponseCode.MESSAGE_ILLEGAL, "properties"),
        id="properties-over-32767-bytes",
    ),
    pytest.param(
        Case(lambda: send_request(NEW_TOPIC, properties={"pad": "p" * PROPERTIES_BYTES_MAX}),
             ResponseCode.MESSAGE_ILLEGAL, "properties"),
        id="properties-over-32767-bytes-to-an-unknown-topic",
    ),
    pytest.param(
        Case(lambda: batch_request(TOPIC, ENTRY[:10]), ResponseCode.MESSAGE_ILLEGAL,
             "bytes left"),
        id="batch-entry-cut-short",
    ),
    pytest.param(
        Case(lambda: batch_request(TOPIC, patched(ENTRY, BODY_LENGTH_AT, 1_000)),
             ResponseCode.MESSAGE_ILLEGAL, "BODYLENGTH"),
        id="batch-body-length-past-the-end",
    ),
    pytest.param(
        Case(lambda: batch_request(TOPIC, patched(ENTRY, BODY_LENGTH_AT, -1)),
             ResponseCode.MESSAGE_ILLEGAL, "BODYLENGTH"),
        id="batch-negative-body-length",
    ),
    pytest.param(
        Case(lambda: batch_request(TOPIC, patched(ENTRY, PROPERTIES_LENGTH_AT, 500, size=2)),
             ResponseCode.MESSAGE_ILLEGAL, "PROPERTIESLENGTH"),
        id="batch-properties-length-past-the-end",
    ),
    pytest.param(
        Case(lambda: batch_request(TOPIC, ENTRY + ENTRY[:-3]), ResponseCode.MESSAGE_ILLEGAL,
             "batch message 1"),
        id="batch-valid-entry-then-a-cut-one",
    ),
    pytest.param(
        Case(lambda: batch_request(TOPIC, b""), ResponseCode.MESSAGE_ILLEGAL, "no messages"),
        id="batch-without-entries",
    ),
    pytest.param(
        Case(lambda: batch_request(NEW_TOPIC, ENTRY * (MAX_MESSAGE_SIZE // len(ENTRY) + 1)),
             ResponseCode.MESSAGE_ILLEGAL, "max_message_size"),
        id="batch-over-max-message-size-to-an-unknown-topic",
    ),
    pytest.param(
        Case(lambda: RemotingCommand.request(UNKNOWN_REQUEST_CODE, {"topic": TOPIC}, b"x"),
             ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "not supported"),
        id="unknown-request-code",
    ),
    pytest.param(
        Case(
            lambda: RemotingCommand.request(
                RequestCode.SEND_MESSAGE,
                {"producerGroup": "g", "defaultTopic": "TBW102", "queueId": "0"},
                b"x",
            ),
            ResponseCode.SYSTEM_ERROR,
            "topic",
        ),
        id="send-without-its-required-header-fields",
    ),
]


# --- the store's state -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreState:
    """What a rejected request must not change."""

    commit_log_max_offset: int
    queue_max_offsets: dict[tuple[str, int], int]
    topics: frozenset[str]


async def store_state(client: BrokerClient) -> StoreState:
    runtime = await client.runtime_info()
    offsets = {
        (topic, queue_id): await client.max_offset(topic, queue_id)
        for topic in PROBED_TOPICS
        for queue_id in range(QUEUE_NUMS)
    }
    topics = frozenset((await client.topic_configs()).topic_config_table)
    return StoreState(int(runtime["commitLogMaxOffset"]), offsets, topics)


# --- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
async def test_bad_request_gets_its_code_and_changes_nothing(
    broker: PyrmqProcess, case: Case
) -> None:
    async with await _connect(broker) as client:
        before = await store_state(client)
        assert before.commit_log_max_offset > 0
        assert {before.queue_max_offsets[(TOPIC, q)] for q in range(QUEUE_NUMS)} == {1}
        # The client pairs the answer with the request by opaque (P6).
        response = await client.invoke(case.request(), REQUEST_TIMEOUT_MS)
        assert (response.code, response.is_response) == (case.code, True), (
            f"{response.code} {response.remark!r}\n{broker.diagnostics()}"
        )
        assert case.remark in (response.remark or ""), response.remark
        # The same connection still answers, and the store is as it was.
        after = await store_state(client)
    assert after == before, broker.diagnostics()
    assert broker.alive(), broker.diagnostics()


async def test_a_good_send_after_the_bad_ones_is_stored(broker: PyrmqProcess) -> None:
    async with await _connect(broker) as client:
        before = await store_state(client)
        result = await Producer(client, "pyrmq_bad_input_producer").send(
            Message(TOPIC, b"good again", tags="TagA"), queue_id=0
        )
        after = await store_state(client)
    assert (result.queue_id, result.queue_offset) == (0, before.queue_max_offsets[(TOPIC, 0)])
    assert after.queue_max_offsets[(TOPIC, 0)] == before.queue_max_offsets[(TOPIC, 0)] + 1
    assert after.commit_log_max_offset > before.commit_log_max_offset
