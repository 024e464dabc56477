"""Type stub for the C extension `store/_native.c`."""

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

def set_crc32_implementation(name: str, /) -> str: ...
def supported_crc32_implementations() -> tuple[str, ...]: ...
def crc32(data: Buffer, value: int = 0, /) -> int: ...
def write_batch(
    buf: Buffer,
    pos: int,
    template: Buffer,
    sizes: npt.NDArray[np.int32],
    first_queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
    store_timestamp_at: int,
    append_prop_crc: bool,
    /,
) -> int: ...
def write_record(
    buf: Buffer,
    pos: int,
    template: Buffer,
    queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
    store_timestamp_at: int,
    append_prop_crc: bool,
    /,
) -> int: ...
def put_cq_units(
    buf: Buffer,
    pos: int,
    phy_offset: int,
    sizes: npt.NDArray[np.int32],
    tags_codes: npt.NDArray[np.int64],
    /,
) -> int: ...
def encode_message(
    body: Buffer,
    properties: Buffer,
    topic_part: Buffer,
    magic_code: int,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: Buffer,
    store_host: Buffer,
    reconsume_times: int,
    prepared_transaction_offset: int,
    append_prop_crc: bool,
    /,
) -> tuple[bytes, int] | None: ...
def append_message(
    buf: Buffer,
    pos: int,
    body: Buffer,
    properties: Buffer,
    topic_part: Buffer,
    magic_code: int,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: Buffer,
    store_host: Buffer,
    reconsume_times: int,
    prepared_transaction_offset: int,
    append_prop_crc: bool,
    queue_offset: int,
    phy_offset: int,
    clock: Callable[[], int],
    last_store_timestamp: int,
    cq_buf: Buffer | None,
    cq_pos: int,
    /,
) -> tuple[int, int, int] | None: ...
def encode_properties(props: object, /) -> bytes | None: ...
def batch_body_is_plain(body: Buffer, append_prop_crc: bool, /) -> bool: ...
def encode_batch(
    body: Buffer,
    magic_code: int,
    queue_id: int,
    middle: Buffer,
    topic_part: Buffer,
    append_prop_crc: bool,
    /,
) -> tuple[bytes, bytes, bytes, tuple[int, ...]] | None: ...
def records_surely_valid(
    buf: Buffer,
    positions: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    file_from_offset: int,
    verify_prop_crc: bool,
    /,
) -> bytes: ...
def walk_records(
    buf: Buffer,
    pos: int,
    file_size: int,
    magic_v1: int,
    magic_v2: int,
    size_min: int,
    /,
) -> tuple[bytes, int]: ...
def tags_codes(
    buf: Buffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], /
) -> bytes: ...
def prefault(
    fd: int, start: int, end: int, zero_from: int, map_address: int, heat_address: int, /
) -> tuple[int, int, bool]: ...
def sync_range(
    fd: int, map_address: int, start: int, length: int, chunk_bytes: int, /
) -> int: ...
