"""Remoting frames as each release's own jars write them, against pyrmq's codec (issue 13).

java/.../GoldenFrames.java builds requests and responses with the release's typed headers and
writes them the way NettyEncoder does (fastEncodeHeader, then the body), in JSON and ROCKETMQ
serialization. pyrmq builds the same commands from its own typed headers and:
- its decoder reads Java's frame into exactly those commands (code, flag, language, version,
  opaque, remark, every extField, body);
- its encoder writes Java's bytes exactly, once the extFields are in Java's order.

That last clause is the one difference, and it is deliberate: Java puts a header's fields into
a HashMap (in the order of a HashSet of the header class's reflected fields), so the keys go on
the wire in hash order; pyrmq writes them in the header's declaration order. No decoder, Java's
included, depends on that order (docs/remoting-protocol.md §15.2). Where the order is part of what
pyrmq promises (the send response, the name server's tables), it is Java's, tested elsewhere.
"""

from __future__ import annotations

import dataclasses
from typing import Final

import pytest

from remoting.codec import FrameDecoder, encode
from remoting.codes import (
    JAVA_VERSION_5_3_3,
    JAVA_VERSION_5_5_0,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from remoting.command import RemotingCommand
from remoting.headers import (
    GetMaxOffsetRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from tests.interop.harness import Classpath, JavaEnv

pytestmark = pytest.mark.interop

GOLDEN_FRAMES_MAIN: Final = "pyrmq.interop.GoldenFrames"
JAVA_VERSION: Final = {"5.3.3": JAVA_VERSION_5_3_3, "5.5.0": JAVA_VERSION_5_5_0}
RESPONSE: Final = 1  # flag bit 0

SEND = SendMessageRequestHeader(
    producer_group="ProducerGroup", topic="TopicTest", default_topic="TBW102",
    default_topic_queue_nums=4, queue_id=1, sys_flag=0, born_timestamp=1_700_000_000_000, flag=0,
    properties="TAGS\x01TagA\x02WAIT\x01true\x02", reconsume_times=0, unit_mode=False,
    batch=False,
)
PULL = PullMessageRequestHeader(
    consumer_group="ConsumerGroup", topic="TopicTest", queue_id=2, queue_offset=100,
    max_msg_nums=32, sys_flag=6, commit_offset=0, suspend_timeout_millis=15_000,
    sub_version=1_700_000_000_001, subscription="TagA || TagB", expression_type="TAG",
)
# name -> (code, flag, extFields, body, remark): what GoldenFrames.java builds.
EXPECTED: Final = {
    "get_max_offset": (RequestCode.GET_MAX_OFFSET, 0,
                       GetMaxOffsetRequestHeader(topic="TopicTest", queue_id=3).to_ext_fields(),
                       b"", None),
    "send_message": (RequestCode.SEND_MESSAGE, 0, SEND.to_ext_fields(), b"hello", None),
    "send_message_v2": (RequestCode.SEND_MESSAGE_V2, 0, SEND.to_ext_fields_v2(), b"hello", None),
    "pull_message": (RequestCode.PULL_MESSAGE, 0, PULL.to_ext_fields(), b"", None),
    "send_response": (ResponseCode.SUCCESS, RESPONSE, SendMessageResponseHeader(
        msg_id="7F00000100002A9F0000000000000000", queue_id=1, queue_offset=42).to_ext_fields(),
        b"", None),
    "query_consumer_offset_response": (
        ResponseCode.SUCCESS, RESPONSE, QueryConsumerOffsetResponseHeader(offset=1234)
        .to_ext_fields(), b"", None),
    "system_error_response": (ResponseCode.SYSTEM_ERROR, RESPONSE, {}, b"", "no such thing"),
}


@pytest.fixture(scope="module")
def java_frames(interop_classpath: Classpath, tmp_path_factory: pytest.TempPathFactory
                ) -> dict[tuple[str, SerializeType], bytes]:
    with JavaEnv(interop_classpath, tmp_path_factory.mktemp("golden-frames")) as java:
        done = java.run_java(GOLDEN_FRAMES_MAIN, [], timeout_s=90)
        assert done.returncode == 0, done.stderr[-3000:]
    frames = {}
    for line in done.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "FRAME":
            name, serialize, hex_frame = rest.split()
            frames[(name, SerializeType[serialize])] = bytes.fromhex(hex_frame)
    assert {name for name, _ in frames} == set(EXPECTED)
    return frames


def _decode_one(frame: bytes) -> RemotingCommand:
    decoder = FrameDecoder(peer="java")
    decoder.feed(frame)
    command = decoder.next_command()
    assert command is not None
    assert decoder.next_command() is None
    return command


@pytest.mark.parametrize("serialize", [SerializeType.JSON, SerializeType.ROCKETMQ])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pyrmq_reads_and_writes_the_frames_java_writes(
    java_frames: dict[tuple[str, SerializeType], bytes], rocketmq_version: str, name: str,
    serialize: SerializeType,
) -> None:
    code, flag, ext_fields, body, remark = EXPECTED[name]
    ours = RemotingCommand(code=code, flag=flag, opaque=7, remark=remark, ext_fields=ext_fields,
                           body=body, serialize_type=serialize,
                           version=JAVA_VERSION[rocketmq_version])
    frame = java_frames[(name, serialize)]
    decoded = _decode_one(frame)
    assert dataclasses.replace(decoded, ext_fields={}) == dataclasses.replace(ours, ext_fields={})
    assert decoded.ext_fields == ours.ext_fields  # the same fields and values, any order
    in_java_order = dataclasses.replace(ours, ext_fields=dict(decoded.ext_fields))
    assert encode(in_java_order) == frame
