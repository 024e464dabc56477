"""The rule tables of tests/remoting/test_java_leniency.py checked against Java itself: every
row's input goes through the RocketMQ 5.3.3 jars (fastjson 1.2.83, RemotingCommand's header
decoders) in one JVM (`LeniencyOracle`), and Java's answer must be the row's expectation.

For a header, "REFUSED" in a row means pyrmq answers the request with an error. Java either
throws (fast-codec headers) or leaves a required field null, which its processor then fails on;
both count as Java refusing.

The tables copy 5.3.3's fastjson 1.2.83. 5.5.0 decodes headers and bodies with fastjson2, which
answers some rows differently (`FASTJSON2_ANSWERS`, `FASTJSON2_COMMAND_ANSWERS`: decimal strings
truncated, null and "" giving 0 instead of the field's initial value, fewer boolean spellings,
no unquoted names, stray commas, comments or NaN, other ISO-date forms, 1e3 printed as
"1000.0"). pyrmq cannot be both. It keeps 1.2.83's rules, decided: they accept nearly every
form 5.5.0 accepts (a Java 5.3.3 client's or broker's bytes must keep working, and 5.3.3 is the
widely deployed release), and this test pins what 5.5.0 does so that each difference stays
known. No stock client sends these forms: the C++ client's string numbers, ordinals and
omitted fields decode alike in both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Final

import pytest

from tests.interop.harness import JavaEnv
from tests.remoting import test_java_leniency as rules

pytestmark = pytest.mark.interop

ORACLE_MAIN: Final = "pyrmq.interop.LeniencyOracle"
HEADER_PACKAGE: Final = "org.apache.rocketmq.remoting.protocol.header."

# decode function of a rule row -> (Java class, getter, the whole input for a value)
BODIES: Final[dict[Callable[[str], object], tuple[str, str, str]]] = {
    rules.read_queue_nums: (
        "org.apache.rocketmq.common.TopicConfig", "getReadQueueNums",
        '{"topicName":"T","readQueueNums":%s}',
    ),
    rules.order: ("org.apache.rocketmq.common.TopicConfig", "isOrder",
                  '{"topicName":"T","order":%s}'),
    rules.topic_name: ("org.apache.rocketmq.common.TopicConfig", "getTopicName",
                       '{"topicName":%s}'),
    rules.topic_name_document: ("org.apache.rocketmq.common.TopicConfig", "getTopicName", "%s"),
    rules.counter: ("org.apache.rocketmq.remoting.protocol.DataVersion", "getCounter",
                    '{"counter":%s}'),
    rules.consume_type: (
        "org.apache.rocketmq.remoting.protocol.heartbeat.ConsumerData", "getConsumeType",
        '{"groupName":"G","consumeType":%s}',
    ),
}


def header_case(decode: object, field: str, text: str) -> tuple[str, str, dict[str, str]]:
    if decode is rules.send_v2:
        getter = {"k": "isK", "j": "getJ"}[field]
        return HEADER_PACKAGE + "SendMessageRequestHeaderV2", getter, {**rules.SEND_V2, field: text}
    if decode is rules.send_v1:
        base = {"producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102",
                "defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0",
                "bornTimestamp": "1", "flag": "0"}
        return HEADER_PACKAGE + "SendMessageRequestHeader", "getMaxReconsumeTimes", \
            {**base, field: text}
    if decode is rules.max_offset:
        getter = "isCommitted" if field == "committed" else "getQueueId"
        return HEADER_PACKAGE + "GetMaxOffsetRequestHeader", getter, \
            {"topic": "T", "queueId": "0", field: text}
    assert decode is rules.pull
    getter = "getMaxMsgBytes" if field == "maxMsgBytes" else "getQueueOffset"
    return HEADER_PACKAGE + "PullMessageRequestHeader", getter, {**rules.PULL, field: text}


ANY_ANSWER: Final = "*"

# (decode function name, JSON value) -> what RocketMQ 5.5.0 (fastjson2) answers instead.
FASTJSON2_ANSWERS: Final = {
    ("read_queue_nums", '"8.5"'): "8",
    ("read_queue_nums", '""'): "0",
    ("read_queue_nums", '"null"'): "0",
    ("read_queue_nums", "null"): "0",
    ("read_queue_nums", "{}"): "0",
    ("counter", '"8.0"'): "8",
    ("order", "1.7"): "false",
    ("order", '"y"'): "REFUSED",
    ("order", '"T"'): "REFUSED",
    ("order", '"f"'): "REFUSED",
    # ISO dates: no date without a time, no minutes-only time, a fraction as a decimal,
    # a strict calendar
    ("counter", '"2024-01-02 03:04:05.6"'): str(rules.local_ms(2024, 1, 2, 3, 4) + 5600),
    ("counter", '"2024-01-02T03:04"'): "REFUSED",
    ("counter", '"2024/01/02"'): "REFUSED",
    ("counter", '"2024-1-2"'): "REFUSED",
    ("counter", '"2024-02-30"'): "REFUSED",
    ("counter", '"2024-01-02Z"'): "1704153600000",
    ("counter", '"2024-01-02T03:04:05.6789"'): str(rules.local_ms(2024, 1, 2, 3, 4) + 5678),
    # fastjson2 rolls hour 25 over to the next day when the JVM's zone is UTC, and refuses it in
    # other zones (seen with TZ=UTC and TZ=Asia/Kolkata): either answer is 5.5.0's
    ("counter", '"2024-01-02T25:04:05"'): ANY_ANSWER,
    # number literals and syntax
    ("read_queue_nums", ".5"): "0",
    ("read_queue_nums", "NaN"): "REFUSED",
    ("read_queue_nums", "undefined"): "REFUSED",
    ("topic_name", "1e3"): "1000.0",
    ("read_queue_nums", "1e50"): "2147483647",  # fastjson2 saturates instead of wrapping
    ("read_queue_nums", "1e400"): "2147483647",
    ("read_queue_nums", "1e-400"): "0",
    ("counter", "1e50"): "9223372036854775807",
    ("counter", "1e100"): "9223372036854775807",
    ("counter", "1e101"): "9223372036854775807",
    ("topic_name_document", '{topicName:"T"}'): "REFUSED",
    ("topic_name_document", '{,"topicName":"T",,"order":true,}'): "REFUSED",
    ("topic_name_document", '{"topicName":"T"/*c*/}'): "REFUSED",
}

# JSON header text -> what RocketMQ 5.5.0 (fastjson2) puts in that extFields value instead.
FASTJSON2_COMMAND_ANSWERS: Final = {
    '{"code":10,"extFields":{"queueId":1e3}}': "1000.0",
    '{"code":1e400,"extFields":{"queueId":"3"}}': "3",
    "{code:10,extFields:{queueId:'3'},/*x*/}": "REFUSED",
}


def java_text(value: object) -> str:
    """How Java prints the value a row expects."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return value.name
    return str(value)


def test_every_rule_row_is_what_java_does(
    java_env: JavaEnv, rocketmq_version: str, tmp_path: Path
) -> None:
    lines: list[str] = []
    expected: list[tuple[str, set[str]]] = []
    for decode, json_value, value, java in rules.BODY_RULES:
        java_class, getter, template = BODIES[decode]
        lines.append("\t".join(["body", java_class, getter, template % json_value]))
        wanted = {"REFUSED"} if value == rules.REFUSED else {java_text(value)}
        if rocketmq_version != "5.3.3" and (decode.__name__, json_value) in FASTJSON2_ANSWERS:
            wanted = {FASTJSON2_ANSWERS[decode.__name__, json_value]}
            if wanted == {ANY_ANSWER}:
                wanted = set()  # any answer
        expected.append((f"body {decode.__name__}={json_value} ({java})", wanted))
    for header_json, key, value, java in rules.COMMAND_RULES:
        lines.append("\t".join(["command", "-", key, header_json]))
        wanted = {"REFUSED"} if value == rules.REFUSED else {java_text(value)}
        if rocketmq_version != "5.3.3" and header_json in FASTJSON2_COMMAND_ANSWERS:
            wanted = {FASTJSON2_COMMAND_ANSWERS[header_json]}
        expected.append((f"command {header_json} ({java})", wanted))
    for header_decode, field, text, value, java in rules.HEADER_RULES:
        java_class, getter, fields = header_case(header_decode, field, text)
        lines.append("\t".join(["header", java_class, getter, json.dumps(fields)]))
        wanted = {"REFUSED", "null"} if value == rules.REFUSED else {java_text(value)}
        name = getattr(header_decode, "__name__", "?")
        expected.append((f"header {name} {field}={text!r} ({java})", wanted))
    cases = tmp_path / "cases.tsv"
    cases.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = java_env.run_java(ORACLE_MAIN, [str(cases)], timeout_s=120)
    answers = [line.removeprefix("ANSWER ") for line in run.stdout.splitlines()
               if line.startswith("ANSWER ")]
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(answers) == len(expected), run.stdout + run.stderr
    wrong = [(case, wanted, answer) for (case, wanted), answer in zip(expected, answers,
                                                                     strict=True)
             if wanted and answer not in wanted]
    assert not wrong, "\n".join(f"{case}: Java says {answer}, the table {wanted}"
                                for case, wanted, answer in wrong)
