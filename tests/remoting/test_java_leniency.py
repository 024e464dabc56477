"""Decoding exactly as lenient as Java: one row per rule, with the Java code it copies.

Headers: `RemotingCommand.decodeCommandCustomHeaderDirectly` (reflective: a value that does not
parse is logged and the field keeps its default) and the `FastCodesHeader.decode` methods
(SEND_MESSAGE_V2/BATCH, PULL_MESSAGE: the NumberFormatException fails the request). Bodies:
fastjson 1.2.83 `JSON.parseObject(text, Class)` (`IntegerCodec`, `LongCodec`, `BooleanCodec`,
`StringCodec`, `EnumDeserializer`, `TypeUtils.castTo*`). The Java facts were read in the
5.3.3 and fastjson 1.2.83 sources; tests/interop/test_java_leniency_oracle.py runs every row
through the real jars in CI and fails if Java answers otherwise. RocketMQ 5.5.0 decodes bodies
with fastjson2, which answers ten body rows differently (that test lists them); the table keeps
5.3.3's answers.

`REFUSED` in a row means Java refuses the request; pyrmq then answers a typed error for that
request (HeaderFieldError / BodyDecodeError, both RemotingCommandError: SYSTEM_ERROR, the
connection stays open).
"""

from __future__ import annotations

import datetime
from typing import Final

import pytest

from remoting.bodies import ConsumerData, ConsumeType, DataVersion, TopicConfig
from remoting.codec import FrameDecoder
from remoting.errors import BodyDecodeError, HeaderDecodeError, HeaderFieldError
from remoting.headers import (
    GetMaxOffsetRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)

REFUSED: Final = "REFUSED"

# -- headers ------------------------------------------------------------------------------

SEND_V2: Final = {
    "a": "PG",
    "b": "T",
    "c": "TBW102",
    "d": "4",
    "e": "1",
    "f": "0",
    "g": "1",
    "h": "0",
}
PULL: Final = {
    "consumerGroup": "CG",
    "topic": "T",
    "queueId": "0",
    "queueOffset": "0",
    "maxMsgNums": "32",
    "sysFlag": "0",
    "commitOffset": "0",
    "suspendTimeoutMillis": "0",
    "subVersion": "0",
}


def send_v2(**fields: str) -> object:
    header = SendMessageRequestHeader.from_ext_fields_v2({**SEND_V2, **fields})
    return header.unit_mode if "k" in fields else header.reconsume_times


def send_v1(**fields: str) -> object:
    base = {
        "producerGroup": "PG",
        "topic": "T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "1",
        "flag": "0",
    }
    return SendMessageRequestHeader.from_ext_fields({**base, **fields}).max_reconsume_times


def max_offset(**fields: str) -> object:
    header = GetMaxOffsetRequestHeader.from_ext_fields({"topic": "T", "queueId": "0", **fields})
    return header.committed if "committed" in fields else header.queue_id


def pull(**fields: str) -> object:
    header = PullMessageRequestHeader.from_ext_fields({**PULL, **fields})
    return header.max_msg_bytes if "maxMsgBytes" in fields else header.queue_offset


HEADER_RULES: Final = [
    # (decode, field, text, value or REFUSED, the Java behaviour copied)
    (send_v2, "k", "0", False, "Boolean.parseBoolean: anything but 'true' is false (C++ '0')"),
    (send_v2, "k", "1", False, "Boolean.parseBoolean('1') is false"),
    (send_v2, "k", "TRUE", True, "Boolean.parseBoolean ignores case"),
    (send_v2, "k", "", False, "Boolean.parseBoolean('') is false"),
    (send_v2, "k", "yes", False, "Boolean.parseBoolean('yes') is false, never an error"),
    (max_offset, "committed", "false", False, "a primitive default (true) is overwritten"),
    (max_offset, "committed", "nope", False, "reflective decoder: parseBoolean, no error"),
    (max_offset, "queueId", "+7", 7, "Integer.parseInt takes a leading +"),
    (max_offset, "queueId", "-0", 0, "Integer.parseInt('-0') is 0"),
    (max_offset, "queueId", "0007", 7, "Integer.parseInt takes leading zeros"),
    (max_offset, "queueId", "١٢", 12, "Character.digit reads every Unicode Nd digit"),
    (max_offset, "queueId", " 7", REFUSED, "Integer.parseInt refuses blanks (required field)"),
    (max_offset, "queueId", "2147483648", REFUSED, "Integer.parseInt refuses overflow"),
    (max_offset, "queueId", "1.0", REFUSED, "Integer.parseInt refuses a decimal point"),
    (max_offset, "queueId", "", REFUSED, "Integer.parseInt('') throws"),
    (send_v1, "maxReconsumeTimes", "x", None, "reflective decoder: logged, field stays null"),
    (send_v1, "maxReconsumeTimes", "16", 16, "Integer.parseInt"),
    (send_v2, "j", "x", REFUSED, "SendMessageRequestHeaderV2.decode: parseInt escapes"),
    (send_v2, "j", "3", 3, "SendMessageRequestHeaderV2.decode: Integer.parseInt"),
    (pull, "maxMsgBytes", "x", REFUSED, "PullMessageRequestHeader.decode: parseInt escapes"),
    (pull, "queueOffset", "9223372036854775807", 2**63 - 1, "Long.parseLong, full range"),
    (pull, "queueOffset", "9223372036854775808", REFUSED, "Long.parseLong refuses overflow"),
]


@pytest.mark.parametrize(
    ("decode", "field", "text", "expected", "java"),
    HEADER_RULES,
    ids=[f"{row[0].__name__}-{row[1]}={row[2]!r}" for row in HEADER_RULES],
)
def test_header_field_decodes_as_java_does(
    decode: object, field: str, text: str, expected: object, java: str
) -> None:
    assert callable(decode)
    if expected == REFUSED:
        with pytest.raises(HeaderFieldError, match=f"field {field}="):
            decode(**{field: text})
    else:
        assert decode(**{field: text}) == expected, java


def test_missing_required_header_field_is_refused_up_front() -> None:
    # Java logs "the custom field <queueId> is null" and the processor then fails with
    # SYSTEM_ERROR; pyrmq refuses the same request at once, naming the field.
    with pytest.raises(HeaderFieldError, match="required field queueId is missing"):
        GetMaxOffsetRequestHeader.from_ext_fields({"topic": "T"})


# -- JSON bodies ----------------------------------------------------------------------------


def read_queue_nums(json_value: str) -> object:
    return TopicConfig.decode(f'{{"topicName":"T","readQueueNums":{json_value}}}').read_queue_nums


def order(json_value: str) -> object:
    return TopicConfig.decode(f'{{"topicName":"T","order":{json_value}}}').order


def topic_name(json_value: str) -> object:
    return TopicConfig.decode(f'{{"topicName":{json_value}}}').topic_name


def counter(json_value: str) -> object:
    return DataVersion.decode(f'{{"counter":{json_value}}}').counter


def topic_name_document(text: str) -> object:
    return TopicConfig.decode(text).topic_name


def local_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    """Epoch ms of a wall-clock time in the local zone (Java: the JVM's default TimeZone)."""
    return round(datetime.datetime(year, month, day, hour, minute).timestamp()) * 1000


def consume_type(json_value: str) -> object:
    return ConsumerData.decode(f'{{"groupName":"G","consumeType":{json_value}}}').consume_type


BODY_RULES: Final = [
    # (decode, JSON value text, value or REFUSED, the fastjson behaviour copied)
    (read_queue_nums, "8", 8, "IntegerCodec: an integer literal"),
    (read_queue_nums, '"8"', 8, "castToInt: a numeric string (C++ clients)"),
    (read_queue_nums, '"1,024"', 1024, "castToInt removes commas"),
    (read_queue_nums, '"8.000"', 8, "castToInt removes a trailing .0*"),
    (read_queue_nums, '"8.5"', REFUSED, "castToInt: Integer.parseInt('8.5') throws"),
    (read_queue_nums, "8.9", 8, "IntegerCodec: a float literal, BigDecimal.intValue()"),
    (read_queue_nums, "-8.9", -8, "BigDecimal.intValue() truncates toward zero"),
    (read_queue_nums, "true", 1, "castToInt(Boolean.TRUE) is 1"),
    (read_queue_nums, '""', 16, "castToInt('') is null: the Java default stays"),
    (read_queue_nums, '"null"', 16, "castToInt('null') is null"),
    (read_queue_nums, "null", 16, "JSON null: the default stays"),
    (read_queue_nums, "2147483648", REFUSED, "an int literal out of range throws"),
    (read_queue_nums, '"x"', REFUSED, "castToInt: NumberFormatException"),
    (read_queue_nums, "{}", REFUSED, "castToInt(JSONObject) throws"),
    (counter, '"9223372036854775807"', 2**63 - 1, "castToLong: Long.parseLong"),
    (counter, '"1,000"', 1000, "castToLong removes commas"),
    (counter, '"8.0"', REFUSED, "castToLong keeps the .0: parseLong throws"),
    (counter, "false", 0, "castToLong(Boolean.FALSE) is 0"),
    (order, "true", True, "BooleanCodec: the literal"),
    (order, "1", True, "BooleanCodec: an int literal is true iff it is 1"),
    (order, "2", False, "BooleanCodec: any other int literal is false"),
    (order, "1.7", True, "castToBoolean(BigDecimal): intValue() == 1"),
    (order, '"TRUE"', True, "castToBoolean: 'true' ignoring case"),
    (order, '"False"', False, "castToBoolean: 'false' ignoring case"),
    (order, '"1"', True, "castToBoolean: '1'"),
    (order, '"0"', False, "castToBoolean: '0'"),
    (order, '"y"', True, "castToBoolean: 'Y' ignoring case"),
    (order, '"T"', True, "castToBoolean: 'T' (upper case only)"),
    (order, '"t"', REFUSED, "castToBoolean: 't' is not listed, JSONException"),
    (order, '"f"', False, "castToBoolean: 'F' ignoring case"),
    (order, '"N"', False, "castToBoolean: 'N' (upper case only)"),
    (order, '"n"', REFUSED, "castToBoolean: 'n' is not listed"),
    (order, '""', False, "castToBoolean('') is null: the default stays"),
    (order, '"yes"', REFUSED, "castToBoolean: JSONException"),
    (topic_name, "12", "12", "StringCodec: an int literal's text"),
    (topic_name, "true", "true", "StringCodec: Boolean.toString()"),
    (consume_type, '"CONSUME_PASSIVELY"', ConsumeType.CONSUME_PASSIVELY, "by name"),
    (consume_type, '"consume_passively"', ConsumeType.CONSUME_PASSIVELY, "ASCII case ignored"),
    (consume_type, "1", ConsumeType.CONSUME_PASSIVELY, "by ordinal (C++ clients)"),
    (consume_type, '"NO_SUCH"', None, "an unknown name is null, no error"),
    (consume_type, '""', None, "an empty name is null"),
    (consume_type, "3", REFUSED, "an ordinal out of range: JSONException"),
    (consume_type, "-1", REFUSED, "a negative ordinal: JSONException"),
    # castToLong reads an ISO-8601 date or time (JSONScanner.scanISO8601DateIfMatch)
    (counter, '"2024-01-02T03:04:05.678Z"', 1704164645678, "castToLong: an ISO time in UTC"),
    (counter, '"2024-01-02T03:04:05+08:00"', 1704135845000, "castToLong: an ISO time, +HH:mm"),
    (counter, '"2024-01-02T03:04:05-0330"', 1704177245000, "castToLong: an ISO time, -HHmm"),
    (counter, '"2024-01-02T03:04:05+08"', 1704135845000, "castToLong: an ISO time, +HH"),
    (counter, '"2024-01-02 03:04:05.6"', local_ms(2024, 1, 2, 3, 4) + 5006,
     "castToLong: local time; the fraction is a number of milliseconds"),
    (counter, '"2024-01-02T03:04"', local_ms(2024, 1, 2, 3, 4), "castToLong: no seconds"),
    (counter, '"2024/01/02"', local_ms(2024, 1, 2), "castToLong: a date, local midnight"),
    (counter, '"2024-1-2"', local_ms(2024, 1, 2), "castToLong: one-digit month and day"),
    (counter, '"2024-02-30"', local_ms(2024, 3, 1), "castToLong: a lenient Calendar rolls over"),
    (counter, '"2024-13-02"', REFUSED, "castToLong: month 13 is not a date"),
    (counter, '"2024-01-02T25:04:05"', REFUSED, "castToLong: hour 25 is not a time"),
    (counter, '"2024-01-02Z"', REFUSED, "castToLong: a zone needs a time"),
    (counter, '"2024-01-02T03:04:05.6789"', REFUSED, "castToLong: at most 3 fraction digits"),
    (counter, '"20240102"', 20240102, "castToLong: digits are a number, not a date"),
    (read_queue_nums, '"2024-01-02"', REFUSED, "castToInt reads no dates"),
    # number literals (JSONLexer)
    (read_queue_nums, "8L", 8, "a long suffix"),
    (read_queue_nums, "8.5F", 8, "a float suffix"),
    (read_queue_nums, "+8", 8, "a leading +"),
    (read_queue_nums, "08", 8, "leading zeros"),
    (read_queue_nums, "1e1", 10, "an exponent: BigDecimal.intValue()"),
    (read_queue_nums, ".5", REFUSED, "a fraction needs a leading digit"),
    (read_queue_nums, "1e50", 0, "TypeUtils.intValue: scale -50, BigDecimal.intValue() wraps"),
    (read_queue_nums, "123456789012.9", -1097262572, "BigDecimal.intValue(): the low 32 bits"),
    (read_queue_nums, "1e400", REFUSED, "scale -400: intValueExact() overflows"),
    (read_queue_nums, "1e-400", REFUSED, "scale 400: intValueExact() of a fraction throws"),
    (counter, "1e50", -5376172055173529600, "BigDecimal.longValue(): the low 64 bits"),
    (counter, "1e100", 0, "scale -100: still longValue()"),
    (counter, "1e101", REFUSED, "scale -101: longValueExact() overflows"),
    (read_queue_nums, "NaN", 16, "NaN reads as null: the default stays"),
    (read_queue_nums, "undefined", 16, "undefined reads as null"),
    # StringCodec for a float, object or array
    (topic_name, "1.50", "1.50", "a float's BigDecimal text keeps its scale"),
    (topic_name, "1e3", "1E+3", "BigDecimal.toString(): scientific for a negative scale"),
    (topic_name, "-0.0", "0.0", "BigDecimal has no negative zero"),
    (topic_name, '{"a":1}', '{"a":1}', "a JSONObject's toString() is its JSON text"),
    (topic_name, '[1,"x"]', '[1,"x"]', "a JSONArray's toString() is its JSON text"),
    # the syntax fastjson 1.2.83 reads by default (remoting.fastjson._LenientParser)
    (topic_name_document, "{'topicName':'it\\'s'}", "it's", "AllowSingleQuotes"),
    (topic_name_document, '{topicName:"T"}', "T", "AllowUnQuotedFieldNames"),
    (topic_name_document, '{,"topicName":"T",,"order":true,}', "T", "AllowArbitraryCommas"),
    (topic_name_document, '{"topicName":"T"/*c*/}', "T", "comments are whitespace"),
    (topic_name_document, '{"topicName":"\\x41\\u0042"}', "AB", "\\x escapes"),
    (topic_name_document, '{"topicName":"a\\qb"}', REFUSED, "an unknown escape"),
    (topic_name_document, '{"topicName":"T"} x', REFUSED, "text after the object"),
    (topic_name_document, '[{"topicName":"T"}]', REFUSED, "an array for an object"),
]


@pytest.mark.parametrize(
    ("decode", "json_value", "expected", "java"),
    BODY_RULES,
    ids=[f"{row[0].__name__}={row[1]}" for row in BODY_RULES],
)
def test_body_property_decodes_as_fastjson_does(
    decode: object, json_value: str, expected: object, java: str
) -> None:
    assert callable(decode)
    if expected == REFUSED:
        with pytest.raises(BodyDecodeError):
            decode(json_value)
    else:
        assert decode(json_value) == expected, java


def test_unknown_body_properties_are_ignored_and_missing_ones_take_java_defaults() -> None:
    config = TopicConfig.decode('{"topicName":"T","someFutureField":{"x":[1,2]}}')
    assert config == TopicConfig(topic_name="T")  # readQueueNums 16, perm 6, order false


# -- the JSON header itself -------------------------------------------------------------------


def command_field(header_json: str, key: str) -> object:
    """The extFields value `key` of a frame with this JSON header, as pyrmq decodes it."""
    header = header_json.encode("utf-8")
    frame = (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header
    decoder = FrameDecoder(peer="test")
    decoder.feed(frame)
    command = decoder.next_command()
    assert command is not None
    return command.ext_fields.get(key)


COMMAND_RULES: Final = [
    # (JSON header, extFields key, value or REFUSED, the fastjson behaviour copied)
    ('{"code":10,"extFields":{"queueId":1.50}}', "queueId", "1.50", "a float's BigDecimal text"),
    ('{"code":10,"extFields":{"queueId":1e3}}', "queueId", "1E+3", "BigDecimal.toString()"),
    ('{"code":10,"extFields":{"queueId":-0.0}}', "queueId", "0.0", "no negative zero"),
    ('{"code":10,"extFields":{"queueId":1.5F}}', "queueId", "1.5", "a float suffix"),
    ('{"code":10,"extFields":{"queueId":7L}}', "queueId", "7", "a long suffix"),
    ('{"code":10,"extFields":{"queueId":{"a":1}}}', "queueId", '{"a":1}', "an object's JSON"),
    ('{"code":10,"extFields":{"queueId":[1,"x"]}}', "queueId", '[1,"x"]', "an array's JSON"),
    ('{"code":10,"extFields":{"queueId":true}}', "queueId", "true", "Boolean.toString()"),
    ('{"code":10,"extFields":{"queueId":null}}', "queueId", None, "null: absent"),
    ('{"code":10,"extFields":{"queueId":12345678901234567890}}', "queueId",
     "12345678901234567890", "a BigInteger's text"),
    ("{'code':10,'extFields':{'queueId':'3'}}", "queueId", "3", "AllowSingleQuotes"),
    ("{code:10,extFields:{queueId:'3'},/*x*/}", "queueId", "3",
     "AllowUnQuotedFieldNames, stray commas, comments"),
    ('{"code":"10","extFields":{"queueId":"3"}}', "queueId", "3", "castToInt of the code"),
    ('{"code":10.7,"extFields":{"queueId":"3"}}', "queueId", "3", "a float code truncated"),
    ('{"code":1e50,"extFields":{"queueId":"3"}}', "queueId", "3", "intValue() wraps to 0"),
    ('{"code":1e400,"extFields":{"queueId":"3"}}', "queueId", REFUSED, "intValueExact()"),
    ('{"code":4294967306,"extFields":{"queueId":"3"}}', "queueId", REFUSED, "an int overflow"),
    ('{"code":10,"remark":5,"extFields":{"queueId":"3"}}', "queueId", "3", "a number remark"),
    ('{"code":10,"language":[],"extFields":{"queueId":"3"}}', "queueId", REFUSED,
     "an array for the language enum"),
    ('{"code":10,"extFields":{"queueId":"3","queueId":"4"}}', "queueId", "4", "the last wins"),
    ('{"code":10,"extFields":{"queueId":"3"}}garbage', "queueId", REFUSED, "text after it"),
    ('{"code":10,"opaque":"2024-01-02","extFields":{"queueId":"3"}}', "queueId", REFUSED,
     "castToInt reads no dates"),
]


@pytest.mark.parametrize(
    ("header_json", "key", "expected", "java"),
    COMMAND_RULES,
    ids=[row[0] for row in COMMAND_RULES],
)
def test_json_header_decodes_as_fastjson_does(
    header_json: str, key: str, expected: object, java: str
) -> None:
    if expected == REFUSED:
        with pytest.raises(HeaderDecodeError):
            command_field(header_json, key)
    else:
        assert command_field(header_json, key) == expected, java
