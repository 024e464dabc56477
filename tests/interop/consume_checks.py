"""Checks shared by the tests that point the Java clients at pyrmq: what a consumer received
against what the producers sent."""

from __future__ import annotations

from collections.abc import Iterable

from tests.interop.output import ConsumeResult, Sent, expected_body_crc32


def assert_exactly_once(
    result: ConsumeResult, sends: Iterable[Sent], *, tag: str, body_bytes: int
) -> None:
    """Every sent key consumed exactly once, with its body and tag, and nothing else; a first
    delivery (reconsumeTimes 0) of an acknowledged message comes from the queue and offset the
    broker acknowledged."""
    sends = list(sends)
    counts = result.key_counts()
    expected = {sent.key for sent in sends}
    assert set(counts) == expected, (
        f"missing {sorted(expected - set(counts))}, foreign {sorted(set(counts) - expected)}"
    )
    duplicates = {key: n for key, n in counts.items() if n > 1}
    assert not duplicates, f"consumed more than once: {duplicates}"
    received = {r.key: r for r in result.received}
    for key, r in received.items():
        assert (r.body_bytes, r.body_crc32, r.tags) == (
            body_bytes,
            expected_body_crc32(key, body_bytes),
            tag,
        ), r
    for sent in sends:
        r = received[sent.key]
        if sent.acknowledged and r.reconsume_times == 0:
            assert (r.queue_id, r.queue_offset) == (sent.queue_id, sent.queue_offset), (sent, r)
