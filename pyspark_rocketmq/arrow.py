"""The source's schema, in Spark's and Arrow's types, and pulled records as one Arrow batch.

A pull's records become one `pyarrow.RecordBatch`, column by column, so Spark receives a
partition in bulk rather than a Python tuple per row.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Final

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from store.host_port import HostPort, offset_msg_id
from store.message_properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    parse_properties,
)
from store.record_layout import MessageRecord

SOURCE_SCHEMA: Final = StructType([
    StructField("topic", StringType(), False),
    StructField("brokerName", StringType(), False),
    StructField("queueId", IntegerType(), False),
    StructField("queueOffset", LongType(), False),
    StructField("msgId", StringType(), False),
    StructField("body", BinaryType(), True),
    StructField("tags", StringType(), True),
    StructField("keys", StringType(), True),
    StructField("properties", MapType(StringType(), StringType(), True), True),
    StructField("bornTimestamp", TimestampType(), False),
    StructField("storeTimestamp", TimestampType(), False),
    StructField("bornHost", StringType(), False),
    StructField("storeHost", StringType(), False),
    StructField("reconsumeTimes", IntegerType(), False),
    StructField("commitLogOffset", LongType(), False),
    StructField("flag", IntegerType(), False),
])

_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA: Final = pa.schema([
    pa.field("topic", pa.string(), False),
    pa.field("brokerName", pa.string(), False),
    pa.field("queueId", pa.int32(), False),
    pa.field("queueOffset", pa.int64(), False),
    pa.field("msgId", pa.string(), False),
    pa.field("body", pa.binary(), True),
    pa.field("tags", pa.string(), True),
    pa.field("keys", pa.string(), True),
    pa.field("properties", pa.map_(pa.string(), pa.string()), True),
    pa.field("bornTimestamp", _TIMESTAMP, False),
    pa.field("storeTimestamp", _TIMESTAMP, False),
    pa.field("bornHost", pa.string(), False),
    pa.field("storeHost", pa.string(), False),
    pa.field("reconsumeTimes", pa.int32(), False),
    pa.field("commitLogOffset", pa.int64(), False),
    pa.field("flag", pa.int32(), False),
])


def host_text(host: HostPort) -> str:
    ip = ipaddress.ip_address(host.ip)
    return f"[{ip}]:{host.port}" if ip.version == 6 else f"{ip}:{host.port}"


def _hosts(hosts: list[HostPort]) -> list[str]:
    """host_text of each, formatting each distinct host once (a pull has one store host and
    few born hosts)."""
    known: dict[bytes, str] = {}
    result = []
    for host in hosts:
        text = known.get(host.packed)
        if text is None:
            text = known[host.packed] = host_text(host)
        result.append(text)
    return result


def records_to_batch(records: Sequence[MessageRecord], broker_name: str, *,
                     include_properties: bool) -> pa.RecordBatch:
    """One `pyarrow.RecordBatch` of ARROW_SCHEMA. msgId is the UNIQ_KEY (the id the producer
    got), or the offsetMsgId for a message without one, as Java's consumers show it."""
    props = [parse_properties(record.properties) for record in records]
    n = len(records)
    columns = [
        pa.array([r.topic for r in records], pa.string()),
        pa.array([broker_name] * n, pa.string()),
        pa.array([r.queue_id for r in records], pa.int32()),
        pa.array([r.queue_offset for r in records], pa.int64()),
        pa.array([p.get(PROPERTY_UNIQ_KEY) or offset_msg_id(r.store_host, r.phy_offset)
                  for r, p in zip(records, props, strict=True)], pa.string()),
        pa.array([r.body for r in records], pa.binary()),
        pa.array([p.get(PROPERTY_TAGS) for p in props], pa.string()),
        pa.array([p.get(PROPERTY_KEYS) for p in props], pa.string()),
        pa.array([list(p.items()) for p in props] if include_properties else [None] * n,
                 pa.map_(pa.string(), pa.string())),
        pa.array([r.born_timestamp * 1000 for r in records], pa.int64()).cast(_TIMESTAMP),
        pa.array([r.store_timestamp * 1000 for r in records], pa.int64()).cast(_TIMESTAMP),
        pa.array(_hosts([r.born_host for r in records]), pa.string()),
        pa.array(_hosts([r.store_host for r in records]), pa.string()),
        pa.array([r.reconsume_times for r in records], pa.int32()),
        pa.array([r.phy_offset for r in records], pa.int64()),
        pa.array([r.flag for r in records], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
