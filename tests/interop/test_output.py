"""The parsers of the client programs' lines, and the Python twin of Common.body (no Java here)."""

from __future__ import annotations

import pytest

from tests.interop.output import (
    Received,
    Rejected,
    Sent,
    expected_body,
    parse_consume_output,
    parse_produce_output,
)


def test_produce_lines_become_sends_in_printed_order() -> None:
    stdout = "\n".join(
        [
            "SENT 7F00000100002A9F0000000000000001 3 17 sync-0 SEND_OK",
            "RocketMQLog:WARN something RocketMQ printed",
            "ONEWAY 7F00000100002A9F0000000000000002 oneway-0",
            "SENT 7F00000100002A9F0000000000000003 0 5 batch-1 SLAVE_NOT_AVAILABLE",
        ]
    )
    assert parse_produce_output(stdout) == (
        Sent("7F00000100002A9F0000000000000001", 3, 17, "sync-0", "SEND_OK"),
        Sent("7F00000100002A9F0000000000000002", None, None, "oneway-0", None),
        Sent("7F00000100002A9F0000000000000003", 0, 5, "batch-1", "SLAVE_NOT_AVAILABLE"),
    )
    assert [s.acknowledged for s in parse_produce_output(stdout)] == [True, False, True]


def test_consume_lines_become_deliveries() -> None:
    stdout = "\n".join(
        [
            "REJECTED sync-9 0",
            "RECEIVED sync-9 1 2 0 128 3651274507 TagA",
            "RECEIVED async-1 0 1 7 0 0 -",
            "DONE 2",
        ]
    )
    result = parse_consume_output(stdout, returncode=0)
    assert result.rejected == (Rejected("sync-9", 0),)
    assert result.received == (
        Received("sync-9", 1, 2, 0, 128, 3651274507, "TagA"),
        Received("async-1", 0, 1, 7, 0, 0, None),
    )
    assert result.done
    assert result.key_counts() == {"sync-9": 1, "async-1": 1}


def test_a_consumer_that_timed_out_is_not_done() -> None:
    result = parse_consume_output("RECEIVED k-1 0 0 0 4 1 -\nTIMEOUT 1 2\n", returncode=3)
    assert not result.done
    assert result.returncode == 3


@pytest.mark.parametrize(
    ("key", "body_bytes", "expected"),
    [
        pytest.param("k-1", 10, b"k-1|k-1|k-", id="repeated-and-cut"),
        pytest.param("k-1", 0, b"", id="empty"),
        pytest.param("ключ", 7, "ключ|".encode()[:7], id="utf8-bytes-not-chars"),
    ],
)
def test_expected_body_repeats_the_key(key: str, body_bytes: int, expected: bytes) -> None:
    assert expected_body(key, body_bytes) == expected
