"""Golden frames from docs/remoting-protocol.md §1, §3 and §15, byte for byte.

Each vector is decoded and re-encoded: decoding must yield the documented fields, and encoding
the same command must give the documented bytes (the spec's vectors; for frames the real jars
write, including Java's HashMap order of extFields, see tests/interop/test_golden_frames.py).
The vectors are Java 5.3.3's (header version 479); pyrmq announces 5.5.0 (PYRMQ_VERSION 513),
so commands built here are set to 479 to emulate 5.3.3, the only difference between the two
releases' bytes (§2).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from remoting.codec import (
    FRAME_PREFIX,
    FRAME_PREFIX_SPEC,
    ROCKETMQ_HEADER_SPEC,
    FrameDecoder,
    encode,
    encode_head,
)
from remoting.codes import (
    JAVA_VERSION_5_3_3,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from remoting.command import RemotingCommand
from remoting.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from tests.remoting.support import hexdump

# §1 worked example: CONTROLLER_GET_METADATA_INFO, opaque 1, no body.
GET_METADATA_JSON_HEADER = (
    b'{"code":1005,"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON",'
    b'"version":479}'
)
GET_METADATA_ROCKETMQ_FRAME = hexdump(
    "00 00 00 19  01 00 00 15  03 ed  00  01 df  00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00"
)

# §3 decoder test vector: GET_MAX_OFFSET, version 479, opaque 7, topic=T, queueId=0.
GET_MAX_OFFSET_ROCKETMQ_FRAME = hexdump(
    """
0000: 00 00 00 33 01 00 00 2f 00 1e 00 01 df 00 00 00
0010: 07 00 00 00 00 00 00 00 00 00 00 00 1a 00 05 74
0020: 6f 70 69 63 00 00 00 01 54 00 07 71 75 65 75 65
0030: 49 64 00 00 00 01 30
"""
)

# §15.1: SEND_MESSAGE_V2 request, opaque 42, JSON header, 14-byte body.
SEND_V2_HEADER = (
    rb'{"code":310,"extFields":{"a":"PG","b":"TopicTest","c":"TBW102","d":"4","e":"1","f":"0","'
    rb'g":"1700000000000","h":"0","i":"UNIQ_KEY\u0001C0A8000100002A9F0000000000000001\u0002WAIT'
    rb'\u0001true\u0002TAGS\u0001TagA\u0002","j":"0","k":"false","m":"false","n":"broker-a"},"f'
    rb'lag":0,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":479}'
)
SEND_V2_FRAME = hexdump(
    """
0000: 00 00 01 6e 00 00 01 5c 7b 22 63 6f 64 65 22 3a
0010: 33 31 30 2c 22 65 78 74 46 69 65 6c 64 73 22 3a
0020: 7b 22 61 22 3a 22 50 47 22 2c 22 62 22 3a 22 54
0030: 6f 70 69 63 54 65 73 74 22 2c 22 63 22 3a 22 54
0040: 42 57 31 30 32 22 2c 22 64 22 3a 22 34 22 2c 22
0050: 65 22 3a 22 31 22 2c 22 66 22 3a 22 30 22 2c 22
0060: 67 22 3a 22 31 37 30 30 30 30 30 30 30 30 30 30
0070: 30 22 2c 22 68 22 3a 22 30 22 2c 22 69 22 3a 22
0080: 55 4e 49 51 5f 4b 45 59 5c 75 30 30 30 31 43 30
0090: 41 38 30 30 30 31 30 30 30 30 32 41 39 46 30 30
00a0: 30 30 30 30 30 30 30 30 30 30 30 30 30 31 5c 75
00b0: 30 30 30 32 57 41 49 54 5c 75 30 30 30 31 74 72
00c0: 75 65 5c 75 30 30 30 32 54 41 47 53 5c 75 30 30
00d0: 30 31 54 61 67 41 5c 75 30 30 30 32 22 2c 22 6a
00e0: 22 3a 22 30 22 2c 22 6b 22 3a 22 66 61 6c 73 65
00f0: 22 2c 22 6d 22 3a 22 66 61 6c 73 65 22 2c 22 6e
0100: 22 3a 22 62 72 6f 6b 65 72 2d 61 22 7d 2c 22 66
0110: 6c 61 67 22 3a 30 2c 22 6c 61 6e 67 75 61 67 65
0120: 22 3a 22 4a 41 56 41 22 2c 22 6f 70 61 71 75 65
0130: 22 3a 34 32 2c 22 73 65 72 69 61 6c 69 7a 65 54
0140: 79 70 65 43 75 72 72 65 6e 74 52 50 43 22 3a 22
0150: 4a 53 4f 4e 22 2c 22 76 65 72 73 69 6f 6e 22 3a
0160: 34 37 39 7d 48 65 6c 6c 6f 20 52 6f 63 6b 65 74
0170: 4d 51
"""
)

# §15.2: its response.
SEND_RESPONSE_HEADER = (
    rb'{"code":0,"extFields":{"queueId":"1","transactionId":"C0A8000100002A9F0000000000000001",'
    rb'"msgId":"C0A8000A00002A9F0000000000000F3C","TRACE_ON":"true","MSG_REGION":"DefaultRegion'
    rb'","queueOffset":"17"},"flag":1,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"'
    rb'JSON","version":479}'
)

# §15.3: PULL_MESSAGE request and its FOUND response (body: docs/store-format.md §3.9 vector 2).
PULL_REQUEST_HEADER = (
    rb'{"code":11,"extFields":{"queueId":"1","maxMsgBytes":"262144","maxMsgNums":"32","sysFlag"'
    rb':"3","suspendTimeoutMillis":"15000","commitOffset":"17","bname":"broker-a","topic":"Topi'
    rb'cTest","queueOffset":"17","expressionType":"TAG","subVersion":"1700000000000","consumerG'
    rb'roup":"CG"},"flag":0,"language":"JAVA","opaque":43,"serializeTypeCurrentRPC":"JSON","ver'
    rb'sion":479}'
)
PULL_RESPONSE_HEADER = (
    rb'{"code":0,"extFields":{"suggestWhichBrokerId":"0","groupSysFlag":"0","nextBeginOffset":"'
    rb'18","maxOffset":"18","minOffset":"0","topicSysFlag":"0"},"flag":1,"language":"JAVA","opa'
    rb'que":43,"remark":"FOUND","serializeTypeCurrentRPC":"JSON","version":479}'
)
PULL_RESPONSE_FRAME_START = hexdump(
    """
0000: 00 00 01 c3 00 00 00 f8 7b 22 63 6f 64 65 22 3a
0010: 30 2c 22 65 78 74 46 69 65 6c 64 73 22 3a 7b 22
0020: 73 75 67 67 65 73 74 57 68 69 63 68 42 72 6f 6b
0030: 65 72 49 64 22 3a 22 30 22 2c 22 67 72 6f 75 70
0040: 53 79 73 46 6c 61 67 22 3a 22 30 22 2c 22 6e 65
0050: 78 74 42 65 67 69 6e 4f 66 66 73 65 74 22 3a 22
0060: 31 38 22 2c 22 6d 61 78 4f 66 66 73 65 74 22 3a
0070: 22 31 38 22 2c 22 6d 69 6e 4f 66 66 73 65 74 22
0080: 3a 22 30 22 2c 22 74 6f 70 69 63 53 79 73 46 6c
0090: 61 67 22 3a 22 30 22 7d 2c 22 66 6c 61 67 22 3a
00a0: 31 2c 22 6c 61 6e 67 75 61 67 65 22 3a 22 4a 41
00b0: 56 41 22 2c 22 6f 70 61 71 75 65 22 3a 34 33 2c
00c0: 22 72 65 6d 61 72 6b 22 3a 22 46 4f 55 4e 44 22
00d0: 2c 22 73 65 72 69 61 6c 69 7a 65 54 79 70 65 43
00e0: 75 72 72 65 6e 74 52 50 43 22 3a 22 4a 53 4f 4e
00f0: 22 2c 22 76 65 72 73 69 6f 6e 22 3a 34 37 39 7d
0100: 00 00 00 c7 da a3 20 a7 69 c8 65 ed 00 00 00 01
"""
)
# The stored record in the pull response is docs/store-format.md's golden vector 2, kept as a
# fixture (tests/unit/test_message_format.py checks the fixture against the spec's hex).
STORED_RECORD = (Path(__file__).resolve().parents[1] / "fixtures" / "vector2.bin").read_bytes()


def decode_one(frame: bytes) -> RemotingCommand:
    decoder = FrameDecoder()
    decoder.feed(frame)
    command = decoder.next_command()
    assert command is not None
    assert decoder.next_command() is None
    assert decoder.buffered_bytes == 0
    return command


def test_get_metadata_json_frame_matches_spec() -> None:
    command = RemotingCommand(code=RequestCode.CONTROLLER_GET_METADATA_INFO, opaque=1,
                              version=JAVA_VERSION_5_3_3)
    frame = encode(command)
    assert frame[:8] == bytes.fromhex("00000066 00000062")
    assert frame[8:] == GET_METADATA_JSON_HEADER
    assert decode_one(frame) == command


def test_get_metadata_rocketmq_frame_matches_spec() -> None:
    command = RemotingCommand(
        code=RequestCode.CONTROLLER_GET_METADATA_INFO,
        opaque=1,
        serialize_type=SerializeType.ROCKETMQ,
        version=JAVA_VERSION_5_3_3,
    )
    assert encode(command) == GET_METADATA_ROCKETMQ_FRAME
    assert decode_one(GET_METADATA_ROCKETMQ_FRAME) == command


def test_get_max_offset_rocketmq_vector_decodes_and_reencodes() -> None:
    command = decode_one(GET_MAX_OFFSET_ROCKETMQ_FRAME)
    assert command == RemotingCommand(
        code=RequestCode.GET_MAX_OFFSET,
        language=LanguageCode.JAVA,
        version=479,
        opaque=7,
        ext_fields={"topic": "T", "queueId": "0"},
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert encode(command) == GET_MAX_OFFSET_ROCKETMQ_FRAME


def test_rocketmq_vector_agrees_with_the_construct_spec() -> None:
    prefix = FRAME_PREFIX_SPEC.parse(GET_MAX_OFFSET_ROCKETMQ_FRAME)
    assert (prefix.length, prefix.serialize_type, prefix.header_length) == (51, 1, 47)
    assert FRAME_PREFIX.unpack_from(GET_MAX_OFFSET_ROCKETMQ_FRAME) == (51, (1 << 24) | 47)
    header = ROCKETMQ_HEADER_SPEC.parse(GET_MAX_OFFSET_ROCKETMQ_FRAME[8:])
    assert (header.code, header.language, header.version, header.opaque, header.flag) == (
        30,
        0,
        479,
        7,
        0,
    )
    assert [(entry.key, entry.value) for entry in header.ext_fields] == [
        ("topic", "T"),
        ("queueId", "0"),
    ]


def test_send_message_v2_request_frame_matches_spec() -> None:
    command = decode_one(SEND_V2_FRAME)
    assert command.code == RequestCode.SEND_MESSAGE_V2
    assert (command.opaque, command.flag, command.version) == (42, 0, 479)
    assert command.body == b"Hello RocketMQ"
    header = SendMessageRequestHeader.from_ext_fields_v2(command.ext_fields)
    assert header == SendMessageRequestHeader(
        producer_group="PG",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=1,
        sys_flag=0,
        born_timestamp=1700000000000,
        flag=0,
        properties=(
            "UNIQ_KEY\x01C0A8000100002A9F0000000000000001\x02WAIT\x01true\x02TAGS\x01TagA\x02"
        ),
        reconsume_times=0,
        unit_mode=False,
        batch=False,
        broker_name="broker-a",
    )
    rebuilt = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, header.to_ext_fields_v2(), b"Hello RocketMQ"
    )
    assert encode(dataclasses.replace(rebuilt, opaque=42, version=JAVA_VERSION_5_3_3)) == \
        SEND_V2_FRAME
    assert encode_head(command) + command.body == SEND_V2_FRAME


def test_send_message_response_frame_matches_spec() -> None:
    request = decode_one(SEND_V2_FRAME)
    # Java's HashMap order for these keys, as the spec shows it.
    response = request.make_response(
        ResponseCode.SUCCESS,
        ext_fields={
            "queueId": "1",
            "transactionId": "C0A8000100002A9F0000000000000001",
            "msgId": "C0A8000A00002A9F0000000000000F3C",
            "TRACE_ON": "true",
            "MSG_REGION": "DefaultRegion",
            "queueOffset": "17",
        },
    )
    frame = encode(dataclasses.replace(response, version=JAVA_VERSION_5_3_3))
    assert frame[:8] == bytes.fromhex("00000120 0000011c")
    assert frame[8:] == SEND_RESPONSE_HEADER
    decoded = decode_one(frame)
    assert decoded.is_response
    assert not decoded.is_oneway
    assert SendMessageResponseHeader.from_ext_fields(decoded.ext_fields) == (
        SendMessageResponseHeader(
            msg_id="C0A8000A00002A9F0000000000000F3C",
            queue_id=1,
            queue_offset=17,
            transaction_id="C0A8000100002A9F0000000000000001",
            msg_region="DefaultRegion",
            trace_on=True,
        )
    )


def test_pull_request_frame_matches_spec() -> None:
    frame = bytes.fromhex("0000016e 0000016a") + PULL_REQUEST_HEADER
    command = decode_one(frame)
    assert (command.code, command.opaque, command.body) == (RequestCode.PULL_MESSAGE, 43, b"")
    assert encode(command) == frame
    assert PullMessageRequestHeader.from_ext_fields(command.ext_fields) == (
        PullMessageRequestHeader(
            consumer_group="CG",
            topic="TopicTest",
            queue_id=1,
            queue_offset=17,
            max_msg_nums=32,
            sys_flag=3,
            commit_offset=17,
            suspend_timeout_millis=15000,
            sub_version=1700000000000,
            expression_type="TAG",
            max_msg_bytes=262144,
            broker_name="broker-a",
        )
    )


def test_pull_found_response_frame_matches_spec() -> None:
    assert PULL_RESPONSE_FRAME_START[0x100:] == STORED_RECORD[:16]
    request = decode_one(bytes.fromhex("0000016e 0000016a") + PULL_REQUEST_HEADER)
    response = request.make_response(
        ResponseCode.SUCCESS,
        remark="FOUND",
        ext_fields={
            "suggestWhichBrokerId": "0",
            "groupSysFlag": "0",
            "nextBeginOffset": "18",
            "maxOffset": "18",
            "minOffset": "0",
            "topicSysFlag": "0",
        },
        body=STORED_RECORD,
    )
    response = dataclasses.replace(response, version=JAVA_VERSION_5_3_3)
    frame = encode(response)
    assert len(frame) == 455
    assert frame[:0x100] == PULL_RESPONSE_FRAME_START[:0x100]
    assert frame[8:0x100] == PULL_RESPONSE_HEADER
    assert frame[0x100:] == STORED_RECORD
    decoded = decode_one(frame)
    assert decoded == response
    assert PullMessageResponseHeader.from_ext_fields(decoded.ext_fields) == (
        PullMessageResponseHeader(
            suggest_which_broker_id=0,
            next_begin_offset=18,
            min_offset=0,
            max_offset=18,
            topic_sys_flag=0,
            group_sys_flag=0,
        )
    )


@pytest.mark.parametrize(
    ("header", "ext_fields"),
    [
        pytest.param(
            b'{"code":310,"extFields":{"d":4,"e":1,"f":0,"h":0,"l":0,"k":"false"},"flag":0,'
            b'"language":"CPP","opaque":1,"remark":"","version":333}',
            {"d": "4", "e": "1", "f": "0", "h": "0", "l": "0", "k": "false"},
            id="cpp-numbers-as-ints",
        ),
        pytest.param(
            b'{"code":11,"extFields":{"queueId":2,"sysFlag":true,"AccessKey":"","x":null},'
            b'"language":"CPP","opaque":2}',
            {"queueId": "2", "sysFlag": "true", "AccessKey": ""},
            id="booleans-and-nulls",
        ),
    ],
)
def test_json_header_accepts_cpp_client_quirks(header: bytes, ext_fields: dict[str, str]) -> None:
    frame = FRAME_PREFIX.pack(4 + len(header), len(header)) + header
    command = decode_one(frame)
    assert command.ext_fields == ext_fields
    assert command.language == LanguageCode.CPP
