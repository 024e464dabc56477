"""The README's worked example, `examples/spark_tag_counts.py`, run end to end as its own
process against a topic whose messages were stored minutes apart, and its Parquet read back:
exactly the per-tag per-minute counts of the minutes the watermark has passed."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from broker.config import load_broker_config
from store.host_port import HostPort
from store.message_batch import prepare_batch
from store.message_properties import encode_properties
from store.message_store import MessageStore
from store.uniq_id import UniqIdGenerator
from tests.interop.pyrmq_env import PyrmqProcess
from tests.support.pyrmq_cluster import two_broker_groups

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
MINUTE = 60_000


def write_store(broker: PyrmqProcess, topic: str,
                messages: list[tuple[int, str]]) -> None:
    """Append (storeTimestamp, tag) messages of `topic` queue 0 to the stopped broker's store,
    each stored at its timestamp (the store's clock), as sends at those times would have."""
    config = load_broker_config(broker.config_path).config.store
    now: list[int] = [0]
    clock: Callable[[], int] = lambda: now[0]  # noqa: E731
    store = MessageStore(config, wall_ms=clock)
    store.open()
    try:
        host = HostPort.from_str(broker.addr)
        ids = UniqIdGenerator(host.ip)
        for n, (stored_at, tag) in enumerate(messages):
            now[0] = stored_at
            inner = [(0, f"m{n}".encode(), encode_properties({"TAGS": tag,
                                                               "UNIQ_KEY": ids.next_id()}))]
            store.append_batch(prepare_batch(
                topic=topic, queue_id=0, inner=inner, sys_flag=0, born_timestamp=stored_at,
                born_host=host, store_host=host, append_prop_crc=config.enabled_append_prop_crc,
                max_message_size=config.max_message_size))
    finally:
        store.close()


def test_worked_example_writes_the_tag_counts_per_minute(tmp_path: Path) -> None:
    base = (int(time.time() * 1000) // MINUTE - 10) * MINUTE  # a minute ten minutes ago
    messages = ([(base + 5_000 + i, "A") for i in range(3)]
                + [(base + 20_000 + i, "B") for i in range(2)]
                + [(base + MINUTE + 30_000 + i, "A") for i in range(4)]
                # Moves the watermark (newest storeTimestamp - 1 minute) past the first two
                # minutes but not past its own.
                + [(base + 3 * MINUTE + 10_000, "C")])
    with two_broker_groups(tmp_path / "cluster") as cluster:
        cluster.create_topic("TagCounts", queues=1)
        broker = cluster.brokers["broker-a"]
        assert broker.terminate() == 0, broker.diagnostics()
        write_store(broker, "TagCounts", messages)
        cluster.brokers["broker-a"] = cluster.env.start_broker(
            cluster.namesrv, broker_name="broker-a", name="broker-a-again",
            store_dir=broker.store_dir, listen_port=broker.port)
        out = tmp_path / "tag-counts"
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "spark_tag_counts.py"),
             "--name-server", cluster.namesrv_addr, "--topic", "TagCounts", "--out", str(out)],
            cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False)
        assert done.returncode == 0, done.stderr[-4000:]
    table = ds.dataset(out, format="parquet").to_table()  # skips _checkpoint, _spark_metadata
    # Spark's Parquet timestamps (INT96 by default) are UTC instants: as ms since 1970.
    minutes = table.column("minute").cast(pa.timestamp("ms")).cast(pa.int64()).to_pylist()
    counts = sorted((minute, tag, count) for minute, tag, count in zip(
        minutes, table.column("tags").to_pylist(), table.column("count").to_pylist(),
        strict=True))
    assert counts == [(base, "A", 3), (base, "B", 2), (base + MINUTE, "A", 4)]
