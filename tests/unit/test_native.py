"""store._native (store/_native.c): its CRC-32 against zlib on every implementation this CPU
runs, its folding constants recomputed from the polynomial, and its refusals of bad arguments."""

from __future__ import annotations

import os
import platform
import re
import struct
import zlib
from array import array
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import store.native
from store.message_batch import prepare_batch, prepare_batch_body, write_batch_python
from store.message_encoder import write_record_python
from store.message_properties import encode_properties, java_string_hash
from store.record_layout import MAGIC_CODE_V1
from tests.support.store_helpers import BORN_HOST, STORE_HOST, batch, message

native = store.native.native
pytestmark = pytest.mark.skipif(
    native is None and not os.environ.get("CI"), reason="store._native not built"
)
SOURCE = Path(__file__).parents[2] / "store" / "_native.c"


def test_the_extension_is_built_in_ci() -> None:
    # CI must measure and test the C path, never fall back to Python silently.
    assert native is not None


# Every implementation this CPU runs (the best is the default): each is held to zlib.
IMPLEMENTATIONS = native.supported_crc32_implementations() if native is not None else ()


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    assert native is not None
    name: str = request.param
    previous = native.set_crc32_implementation(name)
    yield name
    native.set_crc32_implementation(previous)


def test_x86_64_runs_the_carry_less_multiply_crc() -> None:
    # PCLMULQDQ is on every x86-64 CPU since 2010; AVX-512 VPCLMULQDQ only on newer ones (the
    # machines this was measured on have it: then all three implementations are tested).
    assert native is not None
    if platform.machine() == "x86_64":
        assert "pclmulqdq" in native.supported_crc32_implementations()
    assert native.supported_crc32_implementations()[0] == "slicing-by-8"


LENGTHS = [*range(0, 600), 1000, 1023, 1024, 1025, 1117, 4095, 4096, 65537, 300_001]


def test_crc32_equals_zlib_at_every_length_and_alignment(implementation: str) -> None:
    assert native is not None
    data = os.urandom(300_100)
    for length in LENGTHS:
        for align in (0, 1, 7):
            chunk = memoryview(data)[align : align + length]
            assert native.crc32(chunk) == zlib.crc32(chunk), (implementation, length, align)
            assert native.crc32(chunk, 0xDEADBEEF) == zlib.crc32(chunk, 0xDEADBEEF)


def test_crc32_continues_across_pieces(implementation: str) -> None:
    assert native is not None
    data = os.urandom(5000)
    for cut in (0, 1, 63, 64, 255, 256, 1000, 4999):
        assert native.crc32(data[cut:], native.crc32(data[:cut])) == zlib.crc32(data)


def test_unknown_implementation_is_refused() -> None:
    assert native is not None
    with pytest.raises(ValueError, match="not available"):
        native.set_crc32_implementation("crc-by-hand")


def _folding_constant(distance_bits: int) -> int:
    """x^distance mod P (P = 0x104C11DB7), bit-reflected over 32 bits and shifted left one."""
    value = 1
    for _ in range(distance_bits):
        value <<= 1
        if value >> 32 & 1:
            value ^= 0x104C11DB7
    return int(f"{value:032b}"[::-1], 2) << 1


def test_folding_constants_are_the_polynomial_powers() -> None:
    source = SOURCE.read_text()
    defined = {name: int(value, 16) for name, value in
               re.findall(r"#define (K\w+) (0x[0-9a-fA-F]+)ULL", source)}
    expected = {"K64": _folding_constant(64)}
    for distance in (128, 256, 384, 512, 1024, 1536, 2048):
        expected[f"K{distance}_LO"] = _folding_constant(distance + 32)
        expected[f"K{distance}_HI"] = _folding_constant(distance - 32)
    assert defined == expected


# ------------------------------------------------------------------ bad arguments


def test_write_batch_refuses_sizes_that_do_not_tile_the_template() -> None:
    assert native is not None
    encoded = batch([b"a" * 300, b"b" * 300])
    buf = bytearray(encoded.total_size + 100)
    sizes = encoded.sizes.copy()
    sizes[0] += 1
    with pytest.raises(ValueError, match="sizes add up to"):
        native.write_batch(buf, 0, encoded.template, sizes, 0, 0, 1, encoded.store_timestamp_at,
                           True)
    assert buf == bytearray(len(buf))  # nothing written


def test_write_batch_refuses_a_batch_that_does_not_fit() -> None:
    assert native is not None
    encoded = batch([b"a" * 300])
    buf = bytearray(encoded.total_size + 10)
    with pytest.raises(ValueError, match="does not fit"):
        native.write_batch(buf, 11, encoded.template, encoded.sizes, 0, 0, 1,
                           encoded.store_timestamp_at, True)
    with pytest.raises(ValueError, match="does not fit"):
        native.write_batch(buf, -1, encoded.template, encoded.sizes, 0, 0, 1,
                           encoded.store_timestamp_at, True)
    assert buf == bytearray(len(buf))


def test_write_batch_refuses_wrong_arrays_and_layouts() -> None:
    assert native is not None
    encoded = batch([b"a" * 300])
    buf = bytearray(encoded.total_size)
    at = encoded.store_timestamp_at
    with pytest.raises(TypeError, match="int32"):
        native.write_batch(buf, 0, encoded.template, encoded.sizes.astype(np.int64), 0, 0, 1, at,
                           True)
    with pytest.raises(TypeError, match="int32"):
        native.write_batch(buf, 0, encoded.template, encoded.sizes.astype(">i4"), 0, 0, 1, at,
                           True)
    with pytest.raises(ValueError, match="store_timestamp_at"):
        native.write_batch(buf, 0, encoded.template, encoded.sizes, 0, 0, 1, 8, True)
    with pytest.raises(ValueError, match="at least one record"):
        native.write_batch(buf, 0, b"", np.zeros(0, np.int32), 0, 0, 1, at, True)
    with pytest.raises(ValueError, match="below the fixed"):
        native.write_batch(buf, 0, encoded.template[:60], np.array([60], np.int32), 0, 0, 1, at,
                           True)
    with pytest.raises(BufferError):  # read-only
        native.write_batch(bytes(buf), 0, encoded.template, encoded.sizes, 0, 0, 1, at, True)
    assert buf == bytearray(len(buf))


def test_write_record_refuses_what_does_not_fit() -> None:
    assert native is not None
    msg = message(b"x" * 100)
    buf = bytearray(msg.total_size - 1)
    with pytest.raises(ValueError, match="does not fit"):
        native.write_record(buf, 0, msg.template, 1, 2, 3, msg.store_timestamp_at, True)
    with pytest.raises(ValueError, match="below the fixed"):
        native.write_record(bytearray(100), 0, b"x" * 40, 1, 2, 3, msg.store_timestamp_at, True)
    assert buf == bytearray(len(buf))


def test_put_cq_units_refuses_what_does_not_fit() -> None:
    assert native is not None
    sizes = np.array([10, 20], np.int32)
    tags = np.array([1, 2], np.int64)
    with pytest.raises(ValueError, match="do not fit"):
        native.put_cq_units(bytearray(39), 0, 0, sizes, tags)
    with pytest.raises(ValueError, match="tags codes"):
        native.put_cq_units(bytearray(40), 0, 0, sizes, tags[:1])
    with pytest.raises(TypeError, match="int64"):
        native.put_cq_units(bytearray(40), 0, 0, sizes, tags.astype(np.int32))


def _append_args(buf: bytearray, pos: int, cq: bytearray | None, cq_pos: int,
                 born: bytes = BORN_HOST.packed, clock: Callable[[], int] = lambda: 7,
                 last_store_timestamp: int = 0) -> tuple[Any, ...]:
    return (buf, pos, b"body", b"TAGS\x01a\x02", b"\x01T", MAGIC_CODE_V1, 0, 0, 0, 1, born,
            STORE_HOST.packed, 0, 0, True, 5, 6, clock, last_store_timestamp, cq, cq_pos)


def _no_clock() -> int:
    raise AssertionError("the clock was read for a message C does not write")


def test_append_message_refuses_a_unit_that_does_not_fit_before_writing() -> None:
    assert native is not None
    buf, cq = bytearray(400), bytearray(39)
    for cq_pos in (-1, 20, 40):
        with pytest.raises(ValueError, match="does not fit"):
            native.append_message(*_append_args(buf, 0, cq, cq_pos))
    for pos in (-1, 401):
        with pytest.raises(ValueError, match="outside"):
            native.append_message(*_append_args(buf, pos, cq, 0, clock=_no_clock))
    with pytest.raises(ZeroDivisionError):  # the clock's own error, before any write
        native.append_message(*_append_args(buf, 0, bytearray(20), 0, clock=lambda: 1 // 0))
    with pytest.raises(OverflowError):
        native.append_message(*_append_args(buf, 0, bytearray(20), 0, clock=lambda: 1 << 64))
    with pytest.raises(ValueError, match="8 or 20 bytes"):
        native.append_message(*_append_args(buf, 0, cq, 0, born=b"\x7f\0\0\x01"))
    with pytest.raises(TypeError, match="21 arguments"):
        native.append_message(*_append_args(buf, 0, cq, 0)[:-1])
    with pytest.raises(BufferError):  # read-only
        native.append_message(*_append_args(bytes(400), 0, cq, 0))  # type: ignore[arg-type]
    assert buf == bytearray(400)
    assert cq == bytearray(39)


def test_append_message_leaves_a_record_without_its_end_of_file_minimum_to_the_caller() -> None:
    """A record that fits but leaves fewer than 8 bytes before the end of the buffer (the file)
    is the caller's: its general path rolls the file with a BLANK first."""
    assert native is not None
    got = native.append_message(*_append_args(bytearray(400), 0, None, 0))
    assert got is not None
    size, tags_code, store_timestamp = got
    assert tags_code == java_string_hash("a")
    assert store_timestamp == 7
    for free in (size + 7, size, size - 1, 0):
        buf, cq = bytearray(free + 3), bytearray(20)
        assert native.append_message(*_append_args(buf, 3, cq, 0, clock=_no_clock)) is None
        assert buf == bytearray(free + 3)
        assert cq == bytearray(20)
    assert native.append_message(*_append_args(bytearray(size + 8), 0, None, 0)) == got


def test_append_message_never_takes_a_store_timestamp_below_the_last() -> None:
    assert native is not None
    buf = bytearray(400)
    got = native.append_message(*_append_args(buf, 0, None, 0, last_store_timestamp=9))
    assert got is not None
    assert got[2] == 9
    assert struct.unpack_from(">q", buf, 56)[0] == 9  # STORETIMESTAMP, IPv4 born host
    got = native.append_message(*_append_args(buf, 0, None, 0, clock=lambda: 11,
                                              last_store_timestamp=9))
    assert got is not None
    assert got[2] == 11


def _not_exported(*buffers: bytearray | array[int]) -> None:
    """Each buffer can grow again: a view the C function failed to release would make a
    bytearray or an array refuse to resize (BufferError)."""
    for b in buffers:
        b.append(0)
        b.pop()


def test_every_refusal_releases_the_buffers_already_got() -> None:
    assert native is not None
    c: Any = native  # arguments the stub refuses, on purpose: None and array.array
    encoded = batch([b"a" * 300])
    at = encoded.store_timestamp_at
    buf, template = bytearray(encoded.total_size), bytearray(encoded.template)
    sizes, wide = array("i", encoded.sizes.tolist()), array("q", [encoded.total_size])
    with pytest.raises(TypeError):
        c.write_batch(buf, 0, None, sizes, 0, 0, 1, at, True)
    with pytest.raises(TypeError):
        c.write_batch(buf, 0, template, None, 0, 0, 1, at, True)
    with pytest.raises(TypeError, match="int32"):
        c.write_batch(buf, 0, template, wide, 0, 0, 1, at, True)
    assert c.write_batch(buf, 0, template, sizes, 0, 0, 1, at, True) == len(template)
    _not_exported(buf, template, sizes, wide)

    with pytest.raises(TypeError):
        c.write_record(buf, 0, None, 1, 2, 3, at, True)
    with pytest.raises(ValueError, match="does not fit"):
        c.write_record(buf, 1, template, 1, 2, 3, at, True)
    assert c.write_record(buf, 0, template, 1, 2, 3, at, True) == len(template)
    _not_exported(buf, template)

    units = bytearray(20)
    with pytest.raises(TypeError):
        c.put_cq_units(units, 0, 0, None, wide)
    with pytest.raises(TypeError):
        c.put_cq_units(units, 0, 0, sizes, None)
    with pytest.raises(TypeError, match="int64"):
        c.put_cq_units(units, 0, 0, sizes, sizes)
    assert c.put_cq_units(units, 0, 0, sizes, wide) == len(template)
    _not_exported(units, sizes, wide)

    starts = array("q", [0])
    with pytest.raises(TypeError):
        c.records_surely_valid(buf, None, wide, 0, True)
    with pytest.raises(TypeError):
        c.records_surely_valid(buf, starts, None, 0, True)
    with pytest.raises(ValueError, match="1 positions but 2 sizes"):
        c.records_surely_valid(buf, starts, array("q", [1, 2]), 0, True)
    # The record write_record left at 0: PHYSICALOFFSET 2, both CRCs right.
    assert c.records_surely_valid(buf, starts, wide, 2, True) == b"\x01"
    _not_exported(buf, starts, wide)

    with pytest.raises(TypeError):
        c.tags_codes(buf, None, wide)
    with pytest.raises(TypeError):
        c.tags_codes(buf, starts, None)
    with pytest.raises(ValueError, match="outside the buffer"):
        c.tags_codes(buf, starts, array("q", [len(buf) + 1]))
    assert c.tags_codes(buf, starts, wide) == bytes(8)  # no TAGS property
    _not_exported(buf, starts, wide)

    body, middle, topic = bytearray(_entry(b"x", b"")), bytearray(52), bytearray(b"\x01T")
    with pytest.raises(TypeError):
        c.encode_batch(body, MAGIC_CODE_V1, 3, None, topic, True)
    with pytest.raises(TypeError):
        c.encode_batch(body, MAGIC_CODE_V1, 3, middle, None, True)
    assert c.encode_batch(body[:-1], MAGIC_CODE_V1, 3, middle, topic, True) is None
    assert c.encode_batch(body, MAGIC_CODE_V1, 3, middle, topic, True) is not None
    _not_exported(body, middle, topic)

    buf, cq = bytearray(400), bytearray(20)
    with pytest.raises(BufferError):  # read-only
        c.append_message(*_append_args(buf, 0, bytes(20), 0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not fit"):
        c.append_message(*_append_args(buf, 0, cq, 1))
    with pytest.raises(ValueError, match="outside"):
        c.append_message(*_append_args(buf, 401, cq, 0))
    with pytest.raises(ZeroDivisionError):
        c.append_message(*_append_args(buf, 0, cq, 0, clock=lambda: 1 // 0))
    assert c.append_message(*_append_args(buf, 390, cq, 0, clock=_no_clock)) is None
    assert c.append_message(*_append_args(buf, 0, cq, 0)) is not None
    assert c.append_message(*_append_args(buf, 0, None, 0)) is not None
    _not_exported(buf, cq)


def test_encode_properties_takes_only_a_dict_of_str() -> None:
    assert native is not None
    assert native.encode_properties({"a": "b"}) == b"a\x01b\x02"
    for other in ([("a", "b")], {"a": 1}, {1: "a"}, "a", None):
        assert native.encode_properties(other) is None
    assert encode_properties(OrderedMapping({"a": "b"})) == b"a\x01b\x02"


class OrderedMapping(Mapping[str, str]):
    """A mapping that is no dict: `encode_properties` takes it through Python."""

    def __init__(self, items: dict[str, str]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def test_mixed_sizes_and_small_records_match_python(implementation: str) -> None:
    # Pairs of equal sizes run side by side, odd ones alone, records under 256 bytes in
    # software: every branch against the reference.
    assert native is not None
    bodies = [b"a" * 1024, b"b" * 1024, b"c" * 10, b"d" * 2000, b"e" * 2000, b"f" * 2000, b""]
    inner = [(0, body, b"") for body in bodies * 12]  # 84 records: more than one C chunk (64)
    for append_prop_crc in (True, False):
        encoded = prepare_batch(
            topic="T", queue_id=1, inner=inner, sys_flag=0, born_timestamp=5,
            born_host=BORN_HOST, store_host=STORE_HOST, append_prop_crc=append_prop_crc,
            max_message_size=1 << 20,
        )
        got = bytearray(encoded.total_size + 3)
        want = bytearray(encoded.total_size + 3)
        native.write_batch(got, 3, encoded.template, encoded.sizes, 77, 1 << 40, 123,
                           encoded.store_timestamp_at, append_prop_crc)
        write_batch_python(want, 3, encoded, first_queue_offset=77, phy_offset=1 << 40,
                           store_timestamp=123)
        assert got == want, implementation


# ------------------------------------------------------------------ batch bodies


def _entry(body: bytes, properties: bytes, flag: int = 0) -> bytes:
    return (struct.pack(">iiiii", 22 + len(body) + len(properties), 0, 0, flag, len(body)) + body
            + struct.pack(">h", len(properties)) + properties)


def _encode(body: bytes, append_prop_crc: bool = True) -> object:
    assert native is not None
    return native.encode_batch(body, MAGIC_CODE_V1, 3, bytes(52), b"\x01T", append_prop_crc)


def test_encode_batch_takes_the_common_body_and_matches_prepare_batch() -> None:
    inner = [(7, b"x" * 1024, encode_properties({"TAGS": "TagA", "KEYS": "k1"})),
             (8, b"", b""), (9, b"y" * 10, encode_properties({"a": "b"}))]
    body = b"".join(_entry(b, p, f) for f, b, p in inner)
    assert native is not None
    assert native.batch_body_is_plain(body, True)
    assert _encode(body) is not None
    kwargs: dict[str, object] = {
        "topic": "T", "queue_id": 3, "sys_flag": 0, "born_timestamp": 5,
        "born_host": BORN_HOST, "store_host": STORE_HOST, "max_message_size": 1 << 20}
    fast = prepare_batch_body(body=body, **kwargs)  # type: ignore[arg-type]
    slow = prepare_batch(inner=inner, **kwargs)  # type: ignore[arg-type]
    assert fast.template == slow.template
    assert fast.bounds == slow.bounds
    assert fast.sizes.tolist() == slow.sizes.tolist()
    assert fast.tags_codes.tolist() == [java_string_hash("TagA"), 0, 0]
    assert not fast.sizes.flags.writeable
    assert not fast.tags_codes.flags.writeable


@pytest.mark.parametrize(
    ("properties", "append_prop_crc"),
    [
        (encode_properties({"TAGS": "\u00e9t\u00e9"}), True),  # non-ASCII tags: Python's hash
        (encode_properties({"__CRC32#": "123"}), True),  # the client's CRC: normalised
        (b"TAGS\x01a", True),  # unterminated: normalised
        (b"a\x01" + b"b" * 32750 + b"\x02", True),  # over 32767 with the CRC reservation
    ],
)
def test_encode_batch_leaves_the_rest_to_python(properties: bytes, append_prop_crc: bool) -> None:
    body = _entry(b"x", properties)
    assert _encode(body, append_prop_crc) is None


@pytest.mark.parametrize("body", [b"", b"\x00" * 21, _entry(b"x", b"")[:-1],
                                  _entry(b"x", b"") + b"\x00"])
def test_encode_batch_returns_none_for_malformed_bodies(body: bytes) -> None:
    assert native is not None
    assert _encode(body) is None
    assert not native.batch_body_is_plain(body, True)


def _stored(body: bytes = b"b" * 300) -> bytes:
    msg = message(body, tags="TagA")
    buf = bytearray(msg.total_size)
    write_record_python(buf, 0, msg, queue_offset=3, phy_offset=0, store_timestamp=9)
    return bytes(buf)


def _surely(record: bytes, *, verify_prop_crc: bool = True, size: int | None = None) -> bool:
    assert native is not None
    flags = native.records_surely_valid(record, np.array([0], np.int64),
                                        np.array([size or len(record)], np.int64), 0,
                                        verify_prop_crc)
    return flags == b"\x01"


@pytest.mark.parametrize(
    ("what", "at", "value"),
    [
        ("TOTALSIZE", 3, 0x00),
        ("MAGICCODE", 4, 0x00),
        ("BODYCRC", 8, 0x00),
        ("SYSFLAG's IPv6 bit", 39, 0x10),
        ("PHYSICALOFFSET", 35, 0x01),
        ("a body byte", 88 + 100, 0x00),
        ("a topic byte (not ASCII)", 88 + 300 + 1, 0xC3),
        ("PROPERTIESLENGTH", 88 + 300 + 10, 0x7F),
        ("a CRC digit", -5, ord("x")),
        ("the CRC property name", -18, ord("X")),
        ("the final 0x02", -1, 0x00),
    ],
)
def test_records_surely_valid_refuses_each_damage(what: str, at: int, value: int) -> None:
    record = bytearray(_stored())
    assert _surely(bytes(record))
    record[at] = value
    assert record != _stored(), what
    assert not _surely(bytes(record)), what


def test_records_surely_valid_checks_the_body_crc_without_the_record_crc() -> None:
    record = bytearray(_stored())
    record[88 + 5] ^= 0xFF
    assert not _surely(bytes(record), verify_prop_crc=False)
    assert _surely(_stored(), verify_prop_crc=False)


def test_records_surely_valid_refuses_a_wrong_size_or_range() -> None:
    record = _stored()
    assert not _surely(record, size=len(record) - 1)
    assert not _surely(record + b"\x00", size=len(record) + 1)
    assert native is not None
    assert native.records_surely_valid(record, np.array([10], np.int64),
                                       np.array([len(record)], np.int64), 0, True) == b"\x00"


@pytest.mark.parametrize("properties", [b"T", b"TA", b"TAGS", b"TAGS\x01", b"x\x02TAG",
                                        b"TAGS\x01v", b"\x02\x02TAGS\x01"])
def test_encode_batch_reads_no_further_than_a_short_last_segment(properties: bytes) -> None:
    # The properties end the body: a TAGS lookup must not read past them (the sanitizer run,
    # tests/integration/test_native_sanitizers.py, checks the bytes read).
    kwargs: dict[str, object] = {
        "topic": "T", "queue_id": 3, "sys_flag": 0, "born_timestamp": 5,
        "born_host": BORN_HOST, "store_host": STORE_HOST, "max_message_size": 1 << 20,
        "append_prop_crc": False}
    body = _entry(b"x", properties)
    assert _encode(body, False) is not None
    fast = prepare_batch_body(body=body, **kwargs)  # type: ignore[arg-type]
    slow = prepare_batch(inner=[(0, b"x", properties)], **kwargs)  # type: ignore[arg-type]
    assert fast.template == slow.template
    assert fast.tags_codes.tolist() == slow.tags_codes.tolist()


def test_walk_records_and_tags_codes_refuse_ranges_outside_the_buffer() -> None:
    assert native is not None
    buf = bytearray(64)
    with pytest.raises(ValueError, match="outside the buffer"):
        native.walk_records(buf, 0, 65, MAGIC_CODE_V1, MAGIC_CODE_V1 + 1, 1)
    with pytest.raises(ValueError, match="outside the buffer"):
        native.walk_records(buf, -1, 64, MAGIC_CODE_V1, MAGIC_CODE_V1 + 1, 1)
    starts = np.array([0, 60], dtype=np.int64)
    with pytest.raises(ValueError, match="outside the buffer"):
        native.tags_codes(buf, starts, np.array([10, 65], dtype=np.int64))
    with pytest.raises(ValueError, match="outside the buffer"):
        native.tags_codes(buf, starts, np.array([10, 59], dtype=np.int64))
    with pytest.raises(ValueError, match="2 starts but 1 ends"):
        native.tags_codes(buf, starts, np.array([10], dtype=np.int64))


def test_tags_codes_hash_ascii_values_and_mark_the_others() -> None:
    assert native is not None
    props = [encode_properties({"TAGS": "TagA"}), encode_properties({"KEYS": "k"}),
             encode_properties({"TAGS": "Tag\u00e9"}), b"XTAGS\x01no\x02TAGS\x01\x02"]
    buf = b"".join(props)
    ends = np.cumsum([len(p) for p in props]).astype(np.int64)
    starts = ends - np.array([len(p) for p in props], dtype=np.int64)
    codes = np.frombuffer(native.tags_codes(buf, starts, ends), dtype=np.int64).tolist()
    assert codes == [java_string_hash("TagA"), 0, -(1 << 62), 0]
