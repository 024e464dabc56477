"""The StoreCheckpoint file: Java layout in bytes [0, 48) (5.3.3: [0, 40)), pyrmq's CRC trailer,
bad-file rules, and pyrmq's earlier layout."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import asdict, astuple, replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store import testhooks
from store.checkpoint import (
    CHECKPOINT_FIELDS,
    CHECKPOINT_FIELDS_SPEC,
    CHECKPOINT_FILE_NAME,
    CHECKPOINT_FILE_SIZE,
    CHECKPOINT_TRAILER_SPEC,
    FIELDS_5_3_3,
    OLD_TRAILER_MAGIC,
    TRAILER_MAGIC,
    Checkpoint,
    decode_checkpoint,
    encode_checkpoint,
    load_checkpoint,
    write_checkpoint,
)
from store.errors import StoreIOError

i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
checkpoints = st.builds(Checkpoint, i64, i64, i64, i64, i64, i64)

SAMPLE = Checkpoint(
    physic_msg_timestamp=1_700_000_010_000,
    logics_msg_timestamp=1_700_000_005_000,
    index_msg_timestamp=1_700_000_001_000,
    master_flushed_offset=0,
    confirm_phy_offset=123_456,
    logics_physical_offset=121_000,
)


@pytest.fixture(autouse=True)
def _no_faults() -> Iterator[None]:
    yield
    testhooks.configure_faults("")


@given(checkpoint=checkpoints)
def test_encoding_matches_the_construct_spec(checkpoint: Checkpoint) -> None:
    data = encode_checkpoint(checkpoint)
    assert len(data) == CHECKPOINT_FILE_SIZE
    assert data[:48] == CHECKPOINT_FIELDS_SPEC.build(asdict(checkpoint))
    trailer = CHECKPOINT_TRAILER_SPEC.parse(data[48:60])
    assert trailer.crc == zlib.crc32(data[:48]) & 0x7FFFFFFF
    assert data[60:] == bytes(CHECKPOINT_FILE_SIZE - 60)
    assert decode_checkpoint(data).checkpoint == checkpoint


def test_layout_golden() -> None:
    data = encode_checkpoint(Checkpoint(1, 2, 3, 4, 5, 6))
    fields = b"".join(n.to_bytes(8, "big") for n in (1, 2, 3, 4, 5, 6))
    crc = (zlib.crc32(fields) & 0x7FFFFFFF).to_bytes(4, "big")
    assert data[:60] == fields + b"PYRMQCK2" + crc


def test_logics_physical_offset_is_at_offset_40_as_in_5_5_0() -> None:
    # docs/store-format.md §7's 5.5.0 example: records at 0, 121 and 242 dispatched, then a flush.
    data = encode_checkpoint(Checkpoint(logics_physical_offset=242))
    assert data[40:48] == bytes.fromhex("00000000000000f2")


def test_write_then_load(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE_NAME
    write_checkpoint(path, SAMPLE)
    loaded = load_checkpoint(path)
    assert (loaded.checkpoint, loaded.existed, loaded.bad, loaded.reason) == (
        SAMPLE,
        True,
        False,
        None,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE_NAME]


def test_absent_file_loads_as_zeros(tmp_path: Path) -> None:
    loaded = load_checkpoint(tmp_path / CHECKPOINT_FILE_NAME)
    assert (loaded.checkpoint, loaded.existed, loaded.bad) == (Checkpoint(), False, False)


def test_java_5_5_0_file_without_trailer_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE_NAME
    java_bytes = CHECKPOINT_FIELDS.pack(*astuple(SAMPLE)) + bytes(CHECKPOINT_FILE_SIZE - 48)
    path.write_bytes(java_bytes)
    loaded = load_checkpoint(path)
    assert (loaded.checkpoint, loaded.bad) == (SAMPLE, False)


def test_java_5_3_3_file_of_five_fields_loads_with_the_sixth_unknown(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE_NAME
    path.write_bytes(FIELDS_5_3_3.pack(*astuple(SAMPLE)[:5]) + bytes(CHECKPOINT_FILE_SIZE - 40))
    loaded = load_checkpoint(path)
    assert (loaded.checkpoint, loaded.bad) == (replace(SAMPLE, logics_physical_offset=0), False)


def test_pyrmqs_earlier_five_field_layout_still_loads(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE_NAME
    fields = FIELDS_5_3_3.pack(*astuple(SAMPLE)[:5])
    crc = (zlib.crc32(fields) & 0x7FFFFFFF).to_bytes(4, "big")
    path.write_bytes((fields + OLD_TRAILER_MAGIC + crc).ljust(CHECKPOINT_FILE_SIZE, b"\0"))
    loaded = load_checkpoint(path)
    assert (loaded.checkpoint, loaded.bad) == (replace(SAMPLE, logics_physical_offset=0), False)
    data = bytearray(path.read_bytes())
    data[3] ^= 0x01
    damaged = decode_checkpoint(bytes(data))
    assert damaged.bad
    assert damaged.reason is not None
    assert "crc32" in damaged.reason


def test_file_without_trailer_and_not_zero_after_the_fields_is_bad(tmp_path: Path) -> None:
    # Random bytes lose the trailer magic; they must not pass for a Java file (torture §7.2 g).
    path = tmp_path / CHECKPOINT_FILE_NAME
    java_bytes = bytearray(CHECKPOINT_FIELDS.pack(*astuple(SAMPLE)) + bytes(4048))
    java_bytes[49] = 0x01
    path.write_bytes(bytes(java_bytes))
    loaded = load_checkpoint(path)
    assert (loaded.checkpoint, loaded.bad) == (Checkpoint(), True)
    assert loaded.reason is not None
    assert "not the zeros Java leaves" in loaded.reason


def _damaged(how: str) -> bytes:
    data = bytearray(encode_checkpoint(SAMPLE))
    if how == "flip-field-bit":
        data[35] ^= 0x01
    elif how == "flip-crc-bit":
        data[58] ^= 0x80
    elif how == "truncated":
        return bytes(data[:100])
    elif how == "empty":
        return b""
    elif how == "too-long":
        return bytes(data) + b"\0"
    return bytes(data)


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        pytest.param("flip-field-bit", "crc32", id="flip-field-bit"),
        pytest.param("flip-crc-bit", "crc32", id="flip-crc-bit"),
        pytest.param("truncated", "size 100 != 4096", id="truncated"),
        pytest.param("empty", "size 0 != 4096", id="empty"),
        pytest.param("too-long", "size 4097 != 4096", id="too-long"),
    ],
)
def test_damaged_file_is_bad_and_loads_as_zeros(tmp_path: Path, how: str, reason: str) -> None:
    path = tmp_path / CHECKPOINT_FILE_NAME
    path.write_bytes(_damaged(how))
    loaded = load_checkpoint(path)
    assert (loaded.checkpoint, loaded.existed, loaded.bad) == (Checkpoint(), True, True)
    assert loaded.reason is not None
    assert reason in loaded.reason
    assert str(path) in loaded.reason
    assert loaded.checkpoint.min_timestamp() == 0


def test_damage_in_the_unused_area_after_the_trailer_is_ignored(tmp_path: Path) -> None:
    data = bytearray(encode_checkpoint(SAMPLE))
    data[4000] = 0xFF
    assert decode_checkpoint(bytes(data)).checkpoint == SAMPLE


def test_trailer_magic_constants() -> None:
    assert (TRAILER_MAGIC, OLD_TRAILER_MAGIC) == (b"PYRMQCK2", b"PYRMQCK1")


@pytest.mark.parametrize(
    ("physic", "logics", "index", "index_safe", "expected"),
    [
        pytest.param(10_000, 5_000, 0, False, 2_000, id="min-minus-3s"),
        pytest.param(1_000, 5_000, 0, False, 0, id="floored-at-0"),
        pytest.param(10_000, 9_000, 1_000, True, 1_000, id="index-safe-takes-index"),
        pytest.param(10_000, 9_000, 50_000, True, 6_000, id="index-safe-index-later"),
        pytest.param(0, 0, 0, False, 0, id="new-store"),
    ],
)
def test_min_timestamp(
    physic: int, logics: int, index: int, index_safe: bool, expected: int
) -> None:
    checkpoint = Checkpoint(physic, logics, index, 0, 0, 0)
    assert checkpoint.min_timestamp(message_index_safe=index_safe) == expected


def test_values_beyond_i64_are_refused() -> None:
    with pytest.raises(ValueError, match="confirm_phy_offset"):
        Checkpoint(confirm_phy_offset=2**63)


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE_NAME
    write_checkpoint(path, SAMPLE)
    testhooks.configure_faults("checkpoint.write.before_rename:1:eio")
    with pytest.raises(StoreIOError, match=str(path)):
        write_checkpoint(path, Checkpoint(confirm_phy_offset=999))
    assert load_checkpoint(path).checkpoint == SAMPLE
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE_NAME]
