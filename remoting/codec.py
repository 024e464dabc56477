"""The remoting frame codec: `RemotingCommand` <-> bytes, sans I/O (docs/remoting-protocol.md
§1-§3).

One frame, all integers big-endian:

    0        4                    5              8             8+H
    | length | serialize_type     | header_len H | header      | body                        |
    | i32    | u8 (0 JSON, 1 RMQ) | u24          | H bytes     | length - 4 - H bytes        |

`length` excludes itself; the whole frame (`4 + length`) is at most `frame_bytes_max`, 16 MiB
like Netty's `LengthFieldBasedFrameDecoder(16777216, 0, 4, 0, 4)` in Java RocketMQ.

The JSON header (serialize type 0) is the fastjson object
`{"code":..,"extFields":{..},"flag":..,"language":"JAVA","opaque":..,"remark":..,
"serializeTypeCurrentRPC":"JSON","version":..}`: top-level keys sorted, compact, `extFields` and
`remark` omitted when empty/None, `extFields` in the dict's own order. The ROCKETMQ binary header
(serialize type 1):

    0      2          3         5        9      13           17       17+R         21+R
    | code | language | version | opaque | flag | remark_len R | remark | ext_len E | entries |
    | i16  | u8       | i16     | i32    | i32  | i32          | UTF-8  | i32       | E bytes |

    entry: | key_len K i16 | key UTF-8 | value_len V i32 | value UTF-8 |, H = 21 + R + E exactly.

Decoding is incremental and bounded (`FrameDecoder`): a frame's declared length is checked as
soon as its first 4 bytes arrive, before any of its body is buffered, and every length inside a
header is checked against what remains. Anything invalid raises one `RemotingProtocolError`
subclass naming the peer, the field, the value and the limit; the decoder then stays failed.

Decoding accepts what Java 5.3.3 (fastjson 1.2.83) accepts: its JSON syntax
(`remoting.fastjson.loads_lenient`: single quotes, unquoted names, stray commas...), numbers,
booleans, objects and arrays as `extFields` values (kept as the text fastjson gives them: an
integer's decimal, a float's BigDecimal text, "true"/"false", an object's JSON), null values
(dropped: Java leaves the field null), unknown languages (read as OTHER: Java reads them as null
and carries on), numeric strings and floats for the top-level integers (fastjson converts them,
a float truncated). In binary headers a zero-length remark is
None and a zero-length key or value drops its entry, as Java's decoder makes them null.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Final, TypeVar, cast

import construct as cs

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
from remoting.fastjson import (
    JavaDecimal,
    JSONValue,
    big_decimal_value,
    dump_fastjson,
    java_int,
    loads_lenient,
    parse_fastjson,
)

__all__ = [
    "FRAME_BYTES_MAX",
    "FRAME_PREFIX",
    "FRAME_PREFIX_SPEC",
    "ROCKETMQ_HEADER_SPEC",
    "FrameDecoder",
    "encode",
    "encode_head",
    "parse_fastjson",
]

FRAME_BYTES_MAX: Final = 16 * 1024 * 1024
"""Largest frame, length prefix included (`com.rocketmq.remoting.frameMaxLength`)."""

FRAME_PREFIX_SPEC: Final = cs.Struct(
    "length" / cs.Int32sb,
    "serialize_type" / cs.Int8ub,
    "header_length" / cs.Int24ub,
)
FRAME_PREFIX: Final = struct.Struct(">iI")  # length, (serialize_type << 24) | header_length
assert FRAME_PREFIX.size == FRAME_PREFIX_SPEC.sizeof() == 8
_LENGTH_FIELD_BYTES: Final = 4
_HEADER_LENGTH_MAX: Final = 0xFFFFFF

ROCKETMQ_EXT_FIELD_SPEC: Final = cs.Struct(
    "key" / cs.PascalString(cs.Int16sb, "utf8"),
    "value" / cs.PascalString(cs.Int32sb, "utf8"),
)
ROCKETMQ_HEADER_SPEC: Final = cs.Struct(
    "code" / cs.Int16sb,
    "language" / cs.Int8ub,
    "version" / cs.Int16sb,
    "opaque" / cs.Int32sb,
    "flag" / cs.Int32sb,
    "remark" / cs.PascalString(cs.Int32sb, "utf8"),
    "ext_fields" / cs.Prefixed(cs.Int32sb, cs.GreedyRange(ROCKETMQ_EXT_FIELD_SPEC)),
)
# code, language, version, opaque, flag, remark_len: everything before the remark.
ROCKETMQ_HEADER_FIXED: Final = struct.Struct(">hBhiii")
assert ROCKETMQ_HEADER_FIXED.size == 17
_I32: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")
_ROCKETMQ_HEADER_BYTES_MIN: Final = ROCKETMQ_HEADER_FIXED.size + _I32.size  # 21, R = E = 0

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_INT16_MIN: Final = -(2**15)
_INT16_MAX: Final = 2**15 - 1

_LANGUAGE_BY_NAME: Final = {language.name: language for language in LanguageCode}
_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------
# Encoding


def encode(command: RemotingCommand, *, frame_bytes_max: int = FRAME_BYTES_MAX) -> bytes:
    """The whole frame for `command`, in its `serialize_type`.

    Raises CommandEncodeError if a value does not fit its wire field (codes above 32767 and
    versions above 32767 cannot travel in a binary header) or the frame exceeds
    `frame_bytes_max`.
    """
    return encode_head(command, frame_bytes_max=frame_bytes_max) + command.body


def encode_head(command: RemotingCommand, *, frame_bytes_max: int = FRAME_BYTES_MAX) -> bytes:
    """The frame for `command` without its body: length prefix, serialize word, header.

    Writing `encode_head(c)` then `c.body` puts the same bytes on the wire as `encode(c)`
    without copying a large body. Raises CommandEncodeError like `encode`.
    """
    if command.serialize_type == SerializeType.ROCKETMQ:
        header = _rocketmq_header(command)
    else:
        header = _json_header(command)
    frame_bytes = FRAME_PREFIX.size + len(header) + len(command.body)
    if len(header) > _HEADER_LENGTH_MAX or frame_bytes > frame_bytes_max:
        raise CommandEncodeError(
            f"command code={command.code} opaque={command.opaque}: frame of {frame_bytes} bytes "
            f"(header {len(header)}) exceeds frame_bytes_max={frame_bytes_max}"
        )
    return (
        FRAME_PREFIX.pack(
            frame_bytes - _LENGTH_FIELD_BYTES,
            (int(command.serialize_type) << 24) | len(header),
        )
        + header
    )


def _check_range(command: RemotingCommand, name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise CommandEncodeError(
            f"command code={command.code} opaque={command.opaque}: {name}={value} outside "
            f"{low}..{high} of its {command.serialize_type.name} header field"
        )


def _json_header(command: RemotingCommand) -> bytes:
    code, flag, opaque, version = command.code, command.flag, command.opaque, command.version
    if not (
        _INT32_MIN <= code <= _INT32_MAX
        and _INT32_MIN <= flag <= _INT32_MAX
        and _INT32_MIN <= opaque <= _INT32_MAX
        and _INT32_MIN <= version <= _INT32_MAX
    ):
        for name in ("code", "flag", "opaque", "version"):
            _check_range(command, name, getattr(command, name), _INT32_MIN, _INT32_MAX)
    header: dict[str, JSONValue] = {"code": code}  # fastjson's order: keys sorted
    if command.ext_fields:
        header["extFields"] = cast(dict[str, JSONValue], command.ext_fields)
    header["flag"] = flag
    header["language"] = command.language.name
    header["opaque"] = opaque
    if command.remark is not None:
        header["remark"] = command.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = version
    return dump_fastjson(header).encode("utf-8")


def _rocketmq_header(command: RemotingCommand) -> bytes:
    _check_range(command, "code", command.code, _INT16_MIN, _INT16_MAX)
    _check_range(command, "version", command.version, _INT16_MIN, _INT16_MAX)
    _check_range(command, "opaque", command.opaque, _INT32_MIN, _INT32_MAX)
    _check_range(command, "flag", command.flag, _INT32_MIN, _INT32_MAX)
    remark = b"" if command.remark is None else command.remark.encode("utf-8", "surrogatepass")
    entries = bytearray()
    for key, value in command.ext_fields.items():
        key_bytes = key.encode("utf-8", "surrogatepass")
        value_bytes = value.encode("utf-8", "surrogatepass")
        _check_range(command, f"extFields key {_shown(key)} length", len(key_bytes), 0, _INT16_MAX)
        entries += _I16.pack(len(key_bytes))
        entries += key_bytes
        entries += _I32.pack(len(value_bytes))
        entries += value_bytes
    return b"".join(
        (
            ROCKETMQ_HEADER_FIXED.pack(
                command.code,
                int(command.language),
                command.version,
                command.opaque,
                command.flag,
                len(remark),
            ),
            remark,
            _I32.pack(len(entries)),
            entries,
        )
    )


# --------------------------------------------------------------------------------------------
# Decoding


class FrameDecoder:
    """Incremental, bounded frame decoder for one connection (wsproto style).

    `feed(data)` appends received bytes; `next_command()` returns the next complete command or
    None for "need more bytes". Both raise a `RemotingProtocolError` subclass for anything
    invalid, after which the decoder stays failed (every later call raises again): the
    connection must be closed. Memory held is what was fed and not yet decoded; nothing is
    reserved from a declared length.
    """

    __slots__ = ("_buffer", "_error", "_frame_bytes_max", "_frames_decoded", "_peer")

    def __init__(self, *, frame_bytes_max: int = FRAME_BYTES_MAX, peer: str = "peer") -> None:
        if not FRAME_PREFIX.size < frame_bytes_max <= FRAME_BYTES_MAX:
            raise ValueError(
                f"frame_bytes_max={frame_bytes_max} outside {FRAME_PREFIX.size + 1}.."
                f"{FRAME_BYTES_MAX}"
            )
        self._buffer = bytearray()
        self._frame_bytes_max = frame_bytes_max
        self._peer = peer
        self._frames_decoded = 0
        self._error: RemotingProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed but not yet returned as commands (partial frames included)."""
        return len(self._buffer)

    @property
    def frames_decoded(self) -> int:
        """How many commands `next_command` has returned so far."""
        return self._frames_decoded

    def feed(self, data: bytes) -> None:
        """Append received bytes. Raises at once if the pending frame's prefix is invalid, so a
        16 MiB + 1 declaration is refused before any of its body is kept."""
        self._raise_if_failed()
        self._buffer += data
        self._guarded(self._check_prefix)

    def next_command(self) -> RemotingCommand | None:
        """The next complete command, or None if more bytes are needed."""
        self._raise_if_failed()
        return self._guarded(self._next_command)

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _guarded(self, step: Callable[[], _T]) -> _T:
        try:
            return step()
        except RemotingProtocolError as err:
            self._error = err
            raise

    def _check_prefix(self) -> tuple[int, int] | None:
        """(length, header word) of the pending frame once 8 bytes are here, else None;
        the length alone is checked as soon as 4 bytes are here."""
        buffered = len(self._buffer)
        if buffered < _LENGTH_FIELD_BYTES:
            return None
        if buffered < FRAME_PREFIX.size:
            self._check_length(_I32.unpack_from(self._buffer, 0)[0])
            return None
        length, header_word = FRAME_PREFIX.unpack_from(self._buffer, 0)
        self._check_length(length)
        serialize_type = header_word >> 24
        header_length = header_word & _HEADER_LENGTH_MAX
        if serialize_type not in (SerializeType.JSON, SerializeType.ROCKETMQ):
            raise SerializeTypeError(
                f"frame from {self._peer}: serialize_type={serialize_type} is neither "
                f"JSON (0) nor ROCKETMQ (1)"
            )
        if header_length > length - _LENGTH_FIELD_BYTES:
            raise FrameLengthError(
                f"frame from {self._peer}: header_length={header_length} exceeds "
                f"length - 4 = {length - _LENGTH_FIELD_BYTES}"
            )
        return length, header_word

    def _check_length(self, length: int) -> None:
        if length < _LENGTH_FIELD_BYTES:
            raise FrameLengthError(
                f"frame from {self._peer}: length={length} is below the minimum "
                f"{_LENGTH_FIELD_BYTES} (the serialize/header-length word)"
            )
        if length > self._frame_bytes_max - _LENGTH_FIELD_BYTES:
            raise FrameTooLargeError(
                f"frame from {self._peer}: length={length} exceeds frame_bytes_max="
                f"{self._frame_bytes_max} - 4"
            )

    def _next_command(self) -> RemotingCommand | None:
        prefix = self._check_prefix()
        if prefix is None:
            return None
        length, header_word = prefix
        frame_end = _LENGTH_FIELD_BYTES + length
        if len(self._buffer) < frame_end:
            return None
        header_end = FRAME_PREFIX.size + (header_word & _HEADER_LENGTH_MAX)
        with memoryview(self._buffer) as view:
            header = bytes(view[FRAME_PREFIX.size : header_end])
            body = bytes(view[header_end:frame_end])
        del self._buffer[:frame_end]
        self._frames_decoded += 1
        if header_word >> 24 == SerializeType.ROCKETMQ:
            return _decode_rocketmq_header(header, body, self._peer)
        return _decode_json_header(header, body, self._peer)


# JSON header ---------------------------------------------------------------------------------

_SHOWN_CHARS_MAX: Final = 64


def _shown(value: object) -> str:
    """`repr(value)`, cut short: error messages name bad values without echoing megabytes."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS_MAX else f"{text[:_SHOWN_CHARS_MAX]}..."


def _json_int32(fields: Mapping[str, JSONValue], key: str, default: int | None, peer: str) -> int:
    value = fields.get(key)
    if type(value) is int and _INT32_MIN <= value <= _INT32_MAX:
        return value  # what every client sends
    if value is None:
        if default is None:
            raise HeaderDecodeError(f"JSON header from {peer}: required key {key!r} is missing")
        return default
    # fastjson converts numeric strings into int fields, and truncates a float (intValue())
    if isinstance(value, str):
        parsed: JSONValue = java_int(value, bits=32)
    elif isinstance(value, float):
        try:
            parsed = big_decimal_value(value, 32)
        except ValueError as err:
            raise HeaderDecodeError(f"JSON header from {peer}: {key}: {err}") from err
    else:
        parsed = value
    if isinstance(parsed, bool) or not isinstance(parsed, int):
        raise HeaderDecodeError(f"JSON header from {peer}: {key}={_shown(value)} is not an int32")
    if not _INT32_MIN <= parsed <= _INT32_MAX:
        raise HeaderDecodeError(
            f"JSON header from {peer}: {key}={parsed} outside int32 {_INT32_MIN}..{_INT32_MAX}"
        )
    return parsed


def _json_language(fields: Mapping[str, JSONValue], peer: str) -> LanguageCode:
    value = fields.get("language")
    if value is None:
        return LanguageCode.JAVA  # the Java field's default
    if isinstance(value, str):
        return _LANGUAGE_BY_NAME.get(value, LanguageCode.OTHER)
    if isinstance(value, int) and not isinstance(value, bool):
        return LanguageCode(value) if 0 <= value <= LanguageCode.NODE_JS else LanguageCode.OTHER
    raise HeaderDecodeError(
        f"JSON header from {peer}: language={_shown(value)} is neither a name nor an ordinal"
    )


def _json_ext_fields(fields: Mapping[str, JSONValue], peer: str) -> dict[str, str]:
    value = fields.get("extFields")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HeaderDecodeError(
            f"JSON header from {peer}: extFields={_shown(value)} is not an object"
        )
    for item in value.values():
        if type(item) is not str:
            break
    else:
        return cast(dict[str, str], value)  # the common case: Java writes only strings
    ext_fields: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, str):
            ext_fields[key] = item
        elif item is None:
            continue  # Java keeps the header field null: the same as absent
        elif isinstance(item, bool):
            ext_fields[key] = "true" if item else "false"
        elif isinstance(item, int):
            ext_fields[key] = str(item)  # the C++ client sends some ints as JSON numbers
        elif isinstance(item, JavaDecimal):
            ext_fields[key] = item.java_text  # fastjson: the BigDecimal's text
        else:
            ext_fields[key] = dump_fastjson(item)  # an object or array: its JSON text
    return ext_fields


def _decode_json_header(header: bytes, body: bytes, peer: str) -> RemotingCommand:
    try:
        fields = loads_lenient(header.decode("utf-8"))
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError, JSONDecodeError included
        raise HeaderDecodeError(f"JSON header from {peer}: {err}") from err
    if not isinstance(fields, dict):
        raise HeaderDecodeError(f"JSON header from {peer}: {_shown(fields)} is not an object")
    remark = fields.get("remark")
    if isinstance(remark, JavaDecimal):
        remark = remark.java_text  # StringCodec: a number's or boolean's text
    elif isinstance(remark, bool):
        remark = "true" if remark else "false"
    elif isinstance(remark, int):
        remark = str(remark)
    elif remark is not None and not isinstance(remark, str):
        raise HeaderDecodeError(f"JSON header from {peer}: remark={_shown(remark)} is not a string")
    return RemotingCommand(
        code=_json_int32(fields, "code", None, peer),
        language=_json_language(fields, peer),
        version=_json_int32(fields, "version", 0, peer),
        opaque=_json_int32(fields, "opaque", 0, peer),
        flag=_json_int32(fields, "flag", 0, peer),
        remark=remark,
        ext_fields=_json_ext_fields(fields, peer),
        body=body,
        serialize_type=SerializeType.JSON,
    )


# ROCKETMQ binary header ----------------------------------------------------------------------


def _utf8(header: bytes, start: int, size: int, what: str, peer: str) -> str:
    try:
        return header[start : start + size].decode("utf-8")
    except UnicodeDecodeError as err:
        raise HeaderDecodeError(
            f"ROCKETMQ header from {peer}: {what} at byte {start} is not UTF-8: {err}"
        ) from err


def _decode_rocketmq_header(header: bytes, body: bytes, peer: str) -> RemotingCommand:
    header_length = len(header)
    if header_length < _ROCKETMQ_HEADER_BYTES_MIN:
        raise HeaderDecodeError(
            f"ROCKETMQ header from {peer}: header_length={header_length} is below the minimum "
            f"{_ROCKETMQ_HEADER_BYTES_MIN}"
        )
    code, language, version, opaque, flag, remark_length = ROCKETMQ_HEADER_FIXED.unpack_from(
        header, 0
    )
    position = ROCKETMQ_HEADER_FIXED.size
    remark_length_max = header_length - position - _I32.size
    if not 0 <= remark_length <= remark_length_max:
        raise HeaderDecodeError(
            f"ROCKETMQ header from {peer}: remark_length={remark_length} outside "
            f"0..{remark_length_max} (header_length={header_length})"
        )
    remark = _utf8(header, position, remark_length, "remark", peer) if remark_length else None
    position += remark_length
    (ext_length,) = _I32.unpack_from(header, position)
    position += _I32.size
    if ext_length != header_length - position:
        raise HeaderDecodeError(
            f"ROCKETMQ header from {peer}: ext_length={ext_length} != the "
            f"{header_length - position} header bytes after it (header_length={header_length})"
        )
    ext_fields: dict[str, str] = {}
    while position < header_length:
        if header_length - position < _I16.size + _I32.size:
            raise HeaderDecodeError(
                f"ROCKETMQ header from {peer}: extFields entry at byte {position} needs "
                f"{_I16.size + _I32.size} length bytes, {header_length - position} left"
            )
        (key_length,) = _I16.unpack_from(header, position)
        position += _I16.size
        key_length_max = header_length - position - _I32.size
        if not 0 <= key_length <= key_length_max:
            raise HeaderDecodeError(
                f"ROCKETMQ header from {peer}: extFields key_length={key_length} outside "
                f"0..{key_length_max} at byte {position - _I16.size}"
            )
        key = _utf8(header, position, key_length, "extFields key", peer)
        position += key_length
        (value_length,) = _I32.unpack_from(header, position)
        position += _I32.size
        value_length_max = header_length - position
        if not 0 <= value_length <= value_length_max:
            raise HeaderDecodeError(
                f"ROCKETMQ header from {peer}: extFields[{_shown(key)}] value_length="
                f"{value_length} outside 0..{value_length_max}"
            )
        value = _utf8(header, position, value_length, f"extFields[{_shown(key)}]", peer)
        position += value_length
        if key and value:  # Java reads a zero-length key or value as null
            ext_fields[key] = value
    return RemotingCommand(
        code=code,
        language=LanguageCode(language) if language <= LanguageCode.NODE_JS else LanguageCode.OTHER,
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext_fields,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )
