"""The source's schema, in Spark's and Arrow's types, and a pull's records as one Arrow batch.

`pull_to_batch` turns a FOUND pull's body (commitlog records back to back) into one
`pyarrow.RecordBatch` column by column, with no Python object per message: record boundaries
come from one walk over the TOTALSIZE fields, fixed-offset fields are gathered with numpy,
variable-length ones (body, topic, properties) become Arrow binary views over the pull body,
and TAGS, KEYS and UNIQ_KEY are found among the properties split by Arrow's kernels (the last
non-empty value wins, as in `parse_properties`). Records this fast path does not take (IPv6
hosts, a structure that does not add up, text that is not UTF-8) and the `properties` map
column go through the per-record decoder (`decode_record`, which names what is corrupt) and
`records_to_batch`.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Collection, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
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

from pyrmq_client.broker_client import decode_records
from store.host_port import HostPort, offset_msg_id
from store.message_properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    parse_properties,
)
from store.record_layout import MAGIC_CODE_V1, MAGIC_CODE_V2, MessageRecord

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


def pull_to_batch(body: bytes, broker_name: str, *, end_offset: int,
                  tags: Collection[str] | None, include_properties: bool) -> pa.RecordBatch:
    """The records of a FOUND pull `body` with a queue offset below `end_offset` (and, with
    `tags`, a TAGS value among them: the client's re-check of the broker's hash filter), as
    one batch of ARROW_SCHEMA. Raises `RecordCorruptError` for a record that does not decode."""
    batch = None if include_properties else _fast_batch(body, broker_name, end_offset)
    if batch is None:
        records = [r for r in decode_records(body) if r.queue_offset < end_offset]
        batch = records_to_batch(records, broker_name, include_properties=include_properties)
    if tags is not None:
        batch = batch.filter(pc.is_in(batch.column("tags"),
                                      value_set=pa.array(sorted(tags), pa.string())))
    return batch


_TOTAL_SIZE: Final = struct.Struct(">i")
_HOST_V6_FLAGS: Final = 0x30
_BODY_POS: Final = 88  # with IPv4 born and store hosts (docs/store-format.md §3.1)
_VIEW_INLINE_MAX: Final = 12  # Arrow's binary view keeps values up to 12 bytes inline


def _record_positions(body: bytes) -> npt.NDArray[np.int64] | None:
    """Where each record starts, from the TOTALSIZE fields; None if they do not tile `body`."""
    positions = []
    pos, size_max = 0, len(body)
    unpack = _TOTAL_SIZE.unpack_from
    while pos < size_max:
        if pos + _BODY_POS > size_max:
            return None
        positions.append(pos)
        (size,) = unpack(body, pos)
        if size < _BODY_POS:
            return None
        pos += size
    return np.array(positions, np.int64) if pos == size_max else None


class _Fields:
    """Big-endian fields of the records at `positions` of one pull body."""

    def __init__(self, body: bytes, positions: npt.NDArray[np.int64]) -> None:
        self.buffer = pa.py_buffer(body)
        # padded so that a 12-byte read at any position stays inside
        self.bytes = np.frombuffer(body + bytes(_VIEW_INLINE_MAX), np.uint8)
        self.positions = positions
        # the fixed part of every record, one row each (one gather for all its fields)
        self.head = self.bytes[positions[:, None] + np.arange(_BODY_POS)]

    def at(self, offsets: npt.NDArray[np.int64], width: int, dtype: str) -> npt.NDArray[np.int64]:
        """The signed big-endian `dtype` fields (`width` bytes) at `offsets`."""
        gathered = self.bytes[offsets[:, None] + np.arange(width)]
        values: npt.NDArray[np.int64] = gathered.view(dtype).ravel().astype(np.int64)
        return values

    def fixed(self, offset: int, width: int, dtype: str) -> npt.NDArray[np.int64]:
        """The signed field at `offset` of the fixed part (before BODY)."""
        field = np.ascontiguousarray(self.head[:, offset:offset + width])
        values: npt.NDArray[np.int64] = field.view(dtype).ravel().astype(np.int64)
        return values

    def host(self, offset: int) -> npt.NDArray[np.uint64]:
        """The IPv4 host field (ip, then port as an i32) at `offset`: ip << 32 | port."""
        field = np.ascontiguousarray(self.head[:, offset:offset + 8])
        values: npt.NDArray[np.uint64] = field.view(">u8").ravel().astype(np.uint64)
        return values

    def binary(self, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
               ) -> pa.Array:
        """The byte ranges as one binary array: Arrow binary views over the body (values of
        up to 12 bytes inline), cast to plain binary (one copy, in C++)."""
        n = len(starts)
        views = np.zeros((n, 16), np.uint8)
        views[:, 0:4] = lengths.astype("<i4").view(np.uint8).reshape(n, 4)
        head = self.bytes[starts[:, None] + np.arange(_VIEW_INLINE_MAX)]
        views[:, 4:16] = np.where(np.arange(_VIEW_INLINE_MAX) < lengths[:, None], head, 0)
        out_of_line = lengths > _VIEW_INLINE_MAX
        views[out_of_line, 8:12] = 0  # buffer 0: the body
        views[out_of_line, 12:16] = starts[out_of_line].astype("<i4").view(np.uint8) \
            .reshape(-1, 4)
        array = pa.Array.from_buffers(pa.binary_view(), n,
                                      [None, pa.py_buffer(views), self.buffer])
        return array.cast(pa.binary())


def _host_texts(hosts: npt.NDArray[np.uint64]) -> pa.Array:
    """IPv4 hosts (ip << 32 | port) as "ip:port", each distinct one formatted once."""
    distinct, inverse = np.unique(hosts, return_inverse=True)
    texts = [f"{ipaddress.IPv4Address(int(h) >> 32)}:{int(h) & 0xFFFFFFFF}" for h in distinct]
    return pa.array(texts, pa.string()).take(pa.array(inverse.ravel()))


def _properties(properties: pa.Array, names: Sequence[str]) -> list[pa.Array]:
    """The value of each property of `names` in each row of `properties` (the raw property
    text), null where absent: as `parse_properties` gives it (segments split on 0x02, a
    segment `name 0x01 value` with a non-empty value, the last one winning)."""
    segments = pc.split_pattern(properties, PROPERTY_SEPARATOR)
    flat = segments.flatten()
    rows = pc.list_parent_indices(segments).to_numpy()
    lengths = pc.binary_length(flat)
    found = []
    for name in names:
        prefix = name + NAME_VALUE_SEPARATOR
        match = pc.and_(pc.starts_with(flat, prefix), pc.greater(lengths, len(prefix)))
        at = np.flatnonzero(match.to_numpy(zero_copy_only=False))
        last = np.full(len(properties), -1, np.int64)
        np.maximum.at(last, rows[at], at)
        values = flat.take(pa.array(last, mask=last < 0))
        found.append(pc.utf8_slice_codeunits(values, len(prefix)))
    return found


def _fast_batch(body: bytes, broker_name: str, end_offset: int) -> pa.RecordBatch | None:
    """`pull_to_batch` without a Python object per record, or None for a pull it does not
    take (see the module docstring)."""
    positions = _record_positions(body)
    if positions is None:
        return None
    fields = _Fields(body, positions)
    queue_offsets = fields.fixed(20, 8, ">i8")
    if not (keep := queue_offsets < end_offset).all():
        positions = positions[keep]
        fields = _Fields(body, positions)
        queue_offsets = queue_offsets[keep]
    n = len(positions)
    total_size = fields.fixed(0, 4, ">i4")
    magic = fields.fixed(4, 4, ">i4")
    sys_flag = fields.fixed(36, 4, ">i4")
    body_length = fields.fixed(84, 4, ">i4")
    v2 = magic == MAGIC_CODE_V2
    if not ((magic == MAGIC_CODE_V1) | v2).all() or (sys_flag & _HOST_V6_FLAGS).any() or \
            (body_length < 0).any() or \
            (positions + _BODY_POS + body_length + 1 + v2 + 2 > positions + total_size).any():
        return None
    topic_length_at = positions + _BODY_POS + body_length
    topic_length = np.where(v2, fields.at(topic_length_at, 2, ">i2"),
                            fields.at(topic_length_at, 1, ">i1"))
    topic_at = topic_length_at + 1 + v2
    properties_length_at = topic_at + topic_length
    if (topic_length < 0).any() or (properties_length_at + 2 > positions + total_size).any():
        return None
    properties_length = fields.at(properties_length_at, 2, ">i2")
    if (properties_length_at + 2 + properties_length != positions + total_size).any():
        return None
    born_host = fields.host(48)
    store_host = fields.host(64)
    if ((born_host & 0xFFFFFFFF) > 0xFFFF).any() or ((store_host & 0xFFFFFFFF) > 0xFFFF).any():
        return None
    try:
        topic = fields.binary(topic_at, topic_length).cast(pa.string())
        properties = fields.binary(properties_length_at + 2, properties_length) \
            .cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: the per-record decoder replaces, as Java does
        return None
    phy_offsets = fields.fixed(28, 8, ">i8")
    msg_id, tags, keys = _properties(properties, (PROPERTY_UNIQ_KEY, PROPERTY_TAGS,
                                                  PROPERTY_KEYS))
    if msg_id.null_count:
        ids = msg_id.to_pylist()
        for i in np.flatnonzero(~np.array(msg_id.is_valid())):
            host = int(store_host[i])
            ids[i] = offset_msg_id(HostPort((host >> 32).to_bytes(4, "big"),
                                            host & 0xFFFFFFFF), int(phy_offsets[i]))
        msg_id = pa.array(ids, pa.string())
    columns = [
        topic,
        pa.array([broker_name] * n, pa.string()),
        pa.array(fields.fixed(12, 4, ">i4"), pa.int32()),
        pa.array(queue_offsets, pa.int64()),
        msg_id,
        fields.binary(positions + _BODY_POS, body_length),
        tags,
        keys,
        pa.nulls(n, pa.map_(pa.string(), pa.string())),
        pa.array(fields.fixed(40, 8, ">i8") * 1000, _TIMESTAMP),
        pa.array(fields.fixed(56, 8, ">i8") * 1000, _TIMESTAMP),
        _host_texts(born_host),
        _host_texts(store_host),
        pa.array(fields.fixed(72, 4, ">i4"), pa.int32()),
        pa.array(phy_offsets, pa.int64()),
        pa.array(fields.fixed(16, 4, ">i4"), pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
