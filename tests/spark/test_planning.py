"""The pure cores of the data source: options and offset planning (no Spark session, no
broker)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyrmq_client import MessageQueue
from pyspark_rocketmq.errors import DataLossError, OptionError
from pyspark_rocketmq.options import (
    EARLIEST,
    LATEST,
    SinkOptions,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
)
from pyspark_rocketmq.planning import (
    QueueBounds,
    QueueRange,
    limit,
    ranges,
    reconcile,
    split,
)

A0, A1, B0 = (MessageQueue("T", "a", 0), MessageQueue("T", "a", 1), MessageQueue("T", "b", 0))


def test_offsets_json_round_trip() -> None:
    offsets = {A0: 3, A1: EARLIEST, B0: LATEST}
    assert offsets_to_json(offsets) == {"T": {"a": {"0": 3, "1": -2}, "b": {"0": -1}}}
    assert offsets_from_json(offsets_to_json(offsets)) == offsets


def test_options_are_case_insensitive_with_defaults() -> None:
    parsed = SourceOptions.parse({"nameserver": "h:1", "TOPIC": "T"}, streaming=False)
    assert (parsed.name_server, parsed.topics, parsed.starting.default, parsed.ending.default,
            parsed.fail_on_data_loss, parsed.pull_batch_size) == ("h:1", ("T",), EARLIEST,
                                                                   LATEST, True, 32)
    streaming = SourceOptions.parse({"nameServer": "h:1;h:2", "topics": "T, U"}, streaming=True)
    assert (streaming.topics, streaming.starting.default) == (("T", "U"), LATEST)
    spec = SourceOptions.parse({"nameServer": "h:1", "topic": "T",
                                "startingOffsets": '{"T": {"a": {"1": 5}}}'},
                               streaming=False).starting
    assert (spec.for_queue(A1), spec.for_queue(A0)) == (5, EARLIEST)


@pytest.mark.parametrize(("options", "option"), [
    ({"topic": "T", "startingOffsets": '{"T": {"a": {"0": -1}}}'}, "startingOffsets"),
    ({"topic": "T", "endingOffsets": '{"T": {"a": {"0": -2}}}'}, "endingOffsets"),
    ({"topic": "T", "startingOffsets": '{"T": {"a": {"0": -3}}}'}, "startingOffsets"),
    ({"topic": "T", "startingOffsets": '["T"]'}, "startingOffsets"),
    ({"topic": "T", "includeProperties": "yes"}, "includeProperties"),
    ({"topic": "T,U"}, "topic"),
    ({"topics": " , "}, "topics"),
    ({"topic": "T", "pullBatchSize": "1025"}, "pullBatchSize"),
    ({"topic": "T", "minPartitions": "0"}, "minPartitions"),
])
def test_bad_source_options(options: dict[str, str], option: str) -> None:
    with pytest.raises(OptionError) as caught:
        SourceOptions.parse({"nameServer": "h:1", **options}, streaming=False)
    assert caught.value.option == option
    assert "expected" in str(caught.value)


@pytest.mark.parametrize(("options", "option"), [
    ({"nameServer": "h:1", "sendBatchSize": "0"}, "sendBatchSize"),
    ({"nameServer": "h:1", "sendBatchSize": "1025"}, "sendBatchSize"),
    ({"nameServer": "h:1", "sendBatchSize": "lots"}, "sendBatchSize"),
    ({"nameServer": "h:1", "idempotencyKey": "yes"}, "idempotencyKey"),
    ({"nameServer": "h:1", "topic": " "}, "topic"),
    ({"topic": "T"}, "nameServer"),
    ({"nameServer": "h", "topic": "T"}, "nameServer"),
])
def test_bad_sink_options(options: dict[str, str], option: str) -> None:
    with pytest.raises(OptionError) as caught:
        SinkOptions.parse(options)
    assert caught.value.option == option
    assert "expected" in str(caught.value)


def test_ranges_skip_empty_queues_and_new_queues_start_at_earliest() -> None:
    assert ranges({A0: 2, A1: 5}, {A0: 4, A1: 5, B0: 3}) == [
        QueueRange("T", "a", 0, 2, 4), QueueRange("T", "b", 0, EARLIEST, 3)]


def test_split_to_min_partitions() -> None:
    parts = split([QueueRange("T", "a", 0, 0, 10), QueueRange("T", "a", 1, 0, 3)], 4)
    assert parts == [QueueRange("T", "a", 0, 0, 2), QueueRange("T", "a", 0, 2, 5),
                     QueueRange("T", "a", 0, 5, 10), QueueRange("T", "a", 1, 0, 3)]
    assert split([QueueRange("T", "a", 0, 0, 1)], 5) == [QueueRange("T", "a", 0, 0, 1)]


@given(st.dictionaries(st.sampled_from([A0, A1, B0]),
                       st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1),
       st.integers(1, 60))
def test_limit_reads_at_most_max_rows_and_moves_every_backlogged_queue_forward(
    spans: dict[MessageQueue, tuple[int, int]], max_rows: int
) -> None:
    start = {q: s for q, (s, _) in spans.items()}
    latest = {q: s + n for q, (s, n) in spans.items()}
    end = limit(start, latest, max_rows)
    read = sum(end[q] - start[q] for q in spans)
    assert read == min(max_rows, sum(n for _, n in spans.values()))
    assert all(start[q] <= end[q] <= latest[q] for q in spans)


def test_reconcile_data_loss() -> None:
    bounds = {A0: QueueBounds(0, 10), B0: QueueBounds(4, 8)}
    assert reconcile({A0: 5}, bounds, fail_on_data_loss=True) == {A0: 5, B0: 4}
    with pytest.raises(DataLossError, match="no longer exists"):
        reconcile({A1: 3}, bounds, fail_on_data_loss=True)
    assert reconcile({A1: 3, A0: 1}, bounds, fail_on_data_loss=False) == {A0: 1, B0: 4}
    with pytest.raises(DataLossError, match="below the committed offset"):
        reconcile({B0: 9}, bounds, fail_on_data_loss=True)
    assert reconcile({B0: 9}, bounds, fail_on_data_loss=False) == {A0: 0, B0: 8}
