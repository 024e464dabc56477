"""Frame codec properties: round trips, split-insensitive decoding, bounds, and fuzzing (P1-P3)."""

from __future__ import annotations

import json
import struct
import time
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remoting.codec import FRAME_BYTES_MAX, FRAME_PREFIX, FrameDecoder, encode
from remoting.codes import LanguageCode, SerializeType
from remoting.command import RemotingCommand
from remoting.errors import (
    CommandEncodeError,
    FrameLengthError,
    FrameTooLargeError,
    HeaderDecodeError,
    RemotingProtocolError,
    SerializeTypeError,
)

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def commands(draw: st.DrawFn, serialize_type: SerializeType | None = None) -> RemotingCommand:
    """Valid commands. ROCKETMQ headers have 16-bit codes and versions and cannot carry an
    empty remark, key or value (Java reads them back as null), so those are not drawn there."""
    if serialize_type is None:
        serialize_type = draw(st.sampled_from(SerializeType))
    binary = serialize_type == SerializeType.ROCKETMQ
    number = INT16 if binary else INT32
    text = st.text(min_size=1 if binary else 0, max_size=30)
    return RemotingCommand(
        code=draw(number),
        language=draw(st.sampled_from(LanguageCode)),
        version=draw(number),
        opaque=draw(INT32),
        flag=draw(INT32),
        remark=draw(st.none() | text),
        ext_fields=draw(st.dictionaries(text, text, max_size=6)),
        body=draw(st.binary(max_size=64)),
        serialize_type=serialize_type,
    )


def decode_all(stream: bytes, chunks: list[int] | None = None) -> list[RemotingCommand]:
    """Feed `stream` in pieces of the given sizes (whole if None), draining after each piece."""
    decoder = FrameDecoder()
    decoded: list[RemotingCommand] = []
    sizes = [len(stream)] if chunks is None else chunks
    position = 0
    for size in [*sizes, len(stream)]:
        piece = stream[position : position + size]
        position += len(piece)
        decoder.feed(piece)
        while (command := decoder.next_command()) is not None:
            decoded.append(command)
    assert decoder.buffered_bytes == 0
    return decoded


@given(command=commands(SerializeType.JSON))
def test_json_header_round_trip(command: RemotingCommand) -> None:
    assert decode_all(encode(command)) == [command]


@given(command=commands(SerializeType.ROCKETMQ))
def test_rocketmq_header_round_trip(command: RemotingCommand) -> None:
    assert decode_all(encode(command)) == [command]


@given(batch=st.lists(commands(), min_size=1, max_size=5), data=st.data())
def test_decoding_is_split_insensitive(batch: list[RemotingCommand], data: st.DataObject) -> None:
    stream = b"".join(encode(command) for command in batch)
    whole = decode_all(stream)
    byte_by_byte = decode_all(stream, [1] * len(stream))
    random_splits = decode_all(
        stream, data.draw(st.lists(st.integers(0, 40), max_size=len(stream)), label="splits")
    )
    assert whole == byte_by_byte == random_splits == batch


def test_rocketmq_header_drops_empty_values_as_java_reads_them_null() -> None:
    command = RemotingCommand(
        code=30,
        remark="",
        ext_fields={"a": "", "": "x", "b": "1"},
        serialize_type=SerializeType.ROCKETMQ,
    )
    (decoded,) = decode_all(encode(command))
    assert decoded.remark is None
    assert decoded.ext_fields == {"b": "1"}


def prefix(length: int, serialize_type: int = 0, header_length: int = 0) -> bytes:
    return FRAME_PREFIX.pack(length, (serialize_type << 24) | header_length)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        pytest.param(struct.pack(">i", -1), FrameLengthError, id="length-minus-1"),
        pytest.param(struct.pack(">i", 0), FrameLengthError, id="length-0"),
        pytest.param(struct.pack(">i", 3), FrameLengthError, id="length-3"),
        pytest.param(struct.pack(">i", -(2**31)), FrameLengthError, id="length-int-min"),
        pytest.param(
            struct.pack(">i", FRAME_BYTES_MAX - 3), FrameTooLargeError, id="frame-16MiB-plus-1"
        ),
        pytest.param(struct.pack(">i", 2**31 - 1), FrameTooLargeError, id="length-int-max"),
        pytest.param(prefix(10, 0, 7), FrameLengthError, id="header-longer-than-frame"),
        pytest.param(prefix(10, 0, 0xFFFFFF), FrameLengthError, id="header-length-24-bit-max"),
        pytest.param(prefix(10, 2, 0), SerializeTypeError, id="serialize-type-2"),
        pytest.param(prefix(10, 0xFF, 0), SerializeTypeError, id="serialize-type-255"),
    ],
)
def test_bad_prefix_is_refused_as_soon_as_it_arrives(
    data: bytes, error: type[RemotingProtocolError]
) -> None:
    decoder = FrameDecoder()
    with pytest.raises(error):
        decoder.feed(data)
    with pytest.raises(error):  # the decoder stays failed
        decoder.next_command()


def test_frame_of_exactly_frame_bytes_max_is_accepted_and_one_byte_more_is_not() -> None:
    limit = 64 * 1024
    head_bytes = len(encode(RemotingCommand(code=1)))
    exact = RemotingCommand(code=1, body=b"x" * (limit - head_bytes))
    frame = encode(exact)
    assert len(frame) == limit
    decoder = FrameDecoder(frame_bytes_max=limit)
    decoder.feed(frame)
    assert decoder.next_command() == exact
    with pytest.raises(FrameTooLargeError, match=f"frame_bytes_max={limit - 1}"):
        FrameDecoder(frame_bytes_max=limit - 1).feed(frame[:4])


def test_declared_16_mib_with_10_bytes_does_not_allocate_16_mib() -> None:
    decoder = FrameDecoder()
    data = prefix(FRAME_BYTES_MAX - 4, 0, 100) + b"0123456789"
    tracemalloc.start()
    try:
        decoder.feed(data)
        assert decoder.next_command() is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoder.buffered_bytes == len(data)
    assert peak < 64 * 1024


def json_frame(header: bytes, body: bytes = b"") -> bytes:
    return prefix(4 + len(header) + len(body), 0, len(header)) + header + body


def rocketmq_frame(header: bytes) -> bytes:
    return prefix(4 + len(header), 1, len(header)) + header


FIXED = struct.Struct(">hBhiii")


def binary_header(remark_length: int, rest: bytes) -> bytes:
    return FIXED.pack(30, 0, 479, 7, 0, remark_length) + rest


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(json_frame(b"\xff\xfe{}"), id="json-invalid-utf8"),
        pytest.param(json_frame(b"[" * 100_000), id="json-deep-nesting"),
        pytest.param(json_frame(b'{"code":"x"}'), id="json-code-not-a-number"),
        pytest.param(json_frame(b'{"code":Infinity}'), id="json-code-infinity"),
        pytest.param(json_frame(b'{"code":1,}x'), id="json-text-after-the-header"),
        pytest.param(json_frame(b'{"code":true}'), id="json-code-boolean"),
        pytest.param(json_frame(b'{"opaque":1}'), id="json-missing-code"),
        pytest.param(json_frame(b'{"code":' + b"9" * 5000 + b"}"), id="json-huge-number"),
        pytest.param(json_frame(b'{"code":2147483648}'), id="json-code-above-int32"),
        pytest.param(json_frame(b'{"code":NaN}'), id="json-nan"),
        pytest.param(json_frame(b'{"code":1,"extFields":[]}'), id="json-extfields-not-a-map"),
        pytest.param(json_frame(b'{"code":1,"remark":{}}'), id="json-remark-object"),
        pytest.param(json_frame(b'{"code":1,"language":[]}'), id="json-language-array"),
        pytest.param(json_frame(b"[1,2]"), id="json-not-an-object"),
        pytest.param(json_frame(b""), id="json-empty-header"),
        pytest.param(rocketmq_frame(b"\x00" * 20), id="rmq-header-below-21"),
        pytest.param(rocketmq_frame(binary_header(5, b"ab" + b"\0\0\0\0")), id="rmq-remark-over"),
        pytest.param(rocketmq_frame(binary_header(-1, b"\0\0\0\0")), id="rmq-remark-negative"),
        pytest.param(rocketmq_frame(binary_header(1, b"\xff\0\0\0\0")), id="rmq-remark-utf8"),
        pytest.param(rocketmq_frame(binary_header(0, b"\0\0\0\x09")), id="rmq-ext-over-header"),
        pytest.param(rocketmq_frame(binary_header(0, b"\xff\xff\xff\xff")), id="rmq-ext-negative"),
        pytest.param(
            rocketmq_frame(binary_header(0, b"\0\0\0\x02" + b"\0\x01")), id="rmq-entry-truncated"
        ),
        pytest.param(
            rocketmq_frame(binary_header(0, b"\0\0\0\x07" + b"\0\x09a\0\0\0\0")),
            id="rmq-key-overruns",
        ),
        pytest.param(
            rocketmq_frame(binary_header(0, b"\0\0\0\x07" + b"\xff\xffa\0\0\0\0")),
            id="rmq-key-negative",
        ),
        pytest.param(
            rocketmq_frame(binary_header(0, b"\0\0\0\x08" + b"\0\x01a\0\0\0\x09x")),
            id="rmq-value-overruns",
        ),
        pytest.param(
            rocketmq_frame(binary_header(0, b"\0\0\0\x08" + b"\0\x01\xff\0\0\0\x01x")),
            id="rmq-key-utf8",
        ),
    ],
)
def test_malformed_header_raises_header_decode_error(frame: bytes) -> None:
    decoder = FrameDecoder()
    decoder.feed(frame)
    with pytest.raises(HeaderDecodeError):
        decoder.next_command()


def test_json_header_with_100k_ext_fields_decodes_quickly() -> None:
    fields = ",".join(f'"k{index}":"{index}"' for index in range(100_000))
    header = b'{"code":1,"extFields":{' + fields.encode() + b"}}"
    started = time.process_time()
    (command,) = decode_all(json_frame(header))
    assert len(command.ext_fields) == 100_000
    # CPU time of this process, bound loose enough for a loaded CI machine: it catches
    # super-linear work (seconds per frame), not speed (benchmarks/ measures that).
    assert time.process_time() - started < 5.0


def test_unknown_language_is_read_as_other() -> None:
    (by_name,) = decode_all(json_frame(b'{"code":1,"language":"KOTLIN"}'))
    (by_byte,) = decode_all(rocketmq_frame(FIXED.pack(1, 99, 0, 0, 0, 0) + b"\0\0\0\0"))
    assert by_name.language == by_byte.language == LanguageCode.OTHER


def test_numeric_strings_are_accepted_for_top_level_integers() -> None:
    (command,) = decode_all(json_frame(b'{"code":"10","opaque":"+7","language":3}'))
    assert (command.code, command.opaque, command.language) == (10, 7, LanguageCode.PYTHON)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(
            RemotingCommand(code=200050, serialize_type=SerializeType.ROCKETMQ),
            id="pop-code-in-binary",
        ),
        pytest.param(
            RemotingCommand(code=1, version=40000, serialize_type=SerializeType.ROCKETMQ),
            id="version-i16",
        ),
        pytest.param(RemotingCommand(code=2**31), id="code-above-int32"),
        pytest.param(
            RemotingCommand(
                code=1, ext_fields={"k" * 40000: "v"}, serialize_type=SerializeType.ROCKETMQ
            )
        ),
        pytest.param(RemotingCommand(code=1, body=b"x" * FRAME_BYTES_MAX), id="frame-too-large"),
    ],
)
def test_unrepresentable_command_raises_command_encode_error(command: RemotingCommand) -> None:
    with pytest.raises(CommandEncodeError):
        encode(command)


# -- fuzzing (P1, P2): only typed errors, bounded work ----------------------------------------


def decode_fuzzed(stream: bytes) -> None:
    decoder = FrameDecoder()
    started = time.process_time()
    try:
        decoder.feed(stream)
        while decoder.next_command() is not None:
            pass
    except RemotingProtocolError:
        pass
    # P2, bounded work: CPU time of this process (not wall time, which other load inflates),
    # with a bound that only super-linear work on a few hundred bytes can exceed.
    assert time.process_time() - started < 0.5


@given(stream=st.binary(max_size=400))
def test_random_bytes_give_commands_or_a_protocol_error(stream: bytes) -> None:
    decode_fuzzed(stream)


@given(stream=st.binary(max_size=200))
def test_random_bytes_after_a_valid_prefix_give_commands_or_a_protocol_error(
    stream: bytes,
) -> None:
    decode_fuzzed(prefix(4 + len(stream), 0, len(stream)) + stream)
    decode_fuzzed(prefix(4 + len(stream), 1, len(stream)) + stream)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


@given(
    header=st.dictionaries(
        st.sampled_from(["code", "extFields", "flag", "language", "opaque", "remark", "version"]),
        JSON_VALUES,
    )
)
def test_arbitrary_json_headers_give_commands_or_a_protocol_error(
    header: dict[str, object],
) -> None:
    decode_fuzzed(json_frame(json.dumps(header).encode()))


@given(
    command=commands(),
    mutations=st.lists(
        st.tuples(st.sampled_from(["flip", "truncate", "insert", "delete"]), st.integers(0, 500)),
        min_size=1,
        max_size=4,
    ),
    value=st.integers(0, 255),
)
def test_mutated_valid_frames_give_commands_or_a_protocol_error(
    command: RemotingCommand, mutations: list[tuple[str, int]], value: int
) -> None:
    frame = bytearray(encode(command))
    for kind, position in mutations:
        at = position % (len(frame) + 1)
        if kind == "flip" and at < len(frame):
            frame[at] ^= value or 1
        elif kind == "truncate":
            del frame[at:]
        elif kind == "insert":
            frame[at:at] = bytes([value])
        elif kind == "delete" and at < len(frame):
            del frame[at]
    decode_fuzzed(bytes(frame))
