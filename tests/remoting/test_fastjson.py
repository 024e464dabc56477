"""fastjson-compatible JSON text: escaping, unquoted numeric keys, Java integer parsing."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remoting.errors import BodyDecodeError
from remoting.fastjson import (
    JavaDecimal,
    JSONValue,
    _dump_into,
    _LenientParser,
    dump_fastjson,
    java_int,
    parse_fastjson,
    quote_fastjson,
)


@pytest.mark.parametrize(
    ("text", "written"),
    [
        pytest.param("\x00", r'"\u0000"', id="nul"),
        pytest.param("\x01\x02", r'"\u0001\u0002"', id="property-separators"),
        pytest.param("\x0b\x1a\x1f", r'"\u000B\u001A\u001F"', id="upper-case-hex"),
        pytest.param("\b\t\n\f\r", r'"\b\t\n\f\r"', id="short-escapes"),
        pytest.param("\x7f\x80\x9f", r'"\u007F\u0080\u009F"', id="c1-controls"),
        pytest.param("a\x7f", r'"a\u007F"', id="del-in-ascii-text"),
        pytest.param("\u2028\u2029", r'"\u2028\u2029"', id="line-separators"),
        pytest.param('"\\', r'"\"\\"', id="quote-backslash"),
        pytest.param("/é中😀", '"/é中😀"', id="raw-slash-and-non-ascii"),
        pytest.param("\ud800", r'"\uD800"', id="lone-surrogate"),
    ],
)
def test_strings_are_escaped_as_fastjson_escapes_them(text: str, written: str) -> None:
    assert quote_fastjson(text) == written
    assert dump_fastjson([text]) == f"[{written}]"


def slow_dump(value: JSONValue) -> str:
    parts: list[str] = []
    _dump_into(value, parts)
    return "".join(parts)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
)


# ASCII text, controls and all: the fast writer's cheaper check of ASCII output.
ASCII_VALUES = st.recursive(
    st.text(st.characters(max_codepoint=0x7F), max_size=12),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(st.characters(max_codepoint=0x7F), max_size=8), children,
                          max_size=4)
    ),
    max_leaves=10,
)


@given(value=JSON_VALUES | ASCII_VALUES)
def test_fast_writer_equals_the_exact_slow_writer(value: JSONValue) -> None:
    assert dump_fastjson(value) == slow_dump(value)


@given(value=JSON_VALUES)
def test_parse_reads_back_what_dump_wrote(value: JSONValue) -> None:
    assert parse_fastjson(dump_fastjson(value).encode("utf-8")) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param('{0:"a",2:"b"}', {"0": "a", "2": "b"}, id="unquoted-keys"),
        pytest.param('{"0":"a","2":"b"}', {"0": "a", "2": "b"}, id="quoted-keys"),
        pytest.param("{ -1 : 5 , 7:{3:[1,2]}}", {"-1": 5, "7": {"3": [1, 2]}}, id="nested"),
        pytest.param('{"s":"{1:2,3:4}",1:"x"}', {"s": "{1:2,3:4}", "1": "x"}, id="in-strings"),
        pytest.param('{"s":"a\\"{1:",2:3}', {"s": 'a"{1:', "2": 3}, id="escaped-quote"),
        pytest.param(
            '{"offsetTable":{"t@g":{0:12,1:7}}}',
            {"offsetTable": {"t@g": {"0": 12, "1": 7}}},
            id="consumer-offsets",
        ),
    ],
)
def test_parse_accepts_unquoted_numeric_keys(text: str, value: JSONValue) -> None:
    assert parse_fastjson(text) == value


@given(value=JSON_VALUES)
def test_lenient_parser_reads_standard_json_as_the_standard_decoder_does(value: JSONValue) -> None:
    for text in (json.dumps(value), json.dumps(value, indent=1, ensure_ascii=True)):
        assert _LenientParser(text).document() == value


# Each row: text fastjson 1.2.83 reads (checked against the real jars for the same forms by
# tests/interop/test_java_leniency_oracle.py), and the value it gives.
LENIENT_SYNTAX = [
    pytest.param("{'a':'it\\'s \"q\"'}", {"a": 'it\'s "q"'}, id="single-quotes"),
    pytest.param('{a:1,$b_2:2,-3:3}', {"a": 1, "$b_2": 2, "-3": 3}, id="unquoted-names"),
    pytest.param('{,"a":1,,"b":2,}', {"a": 1, "b": 2}, id="stray-commas-in-objects"),
    pytest.param('[1,2,]', [1, 2], id="trailing-comma-in-arrays"),
    pytest.param('/*x*/{"a"/*y*/:1}//z', {"a": 1}, id="comments"),
    pytest.param('"\\x41\\v\\0\\u00e9\\/"', "A\x0b\x00é/", id="escapes"),
    pytest.param('[8L,8S,8B,+8,08,-0]', [8, 8, 8, 8, 8, 0], id="integer-forms"),
    pytest.param('{"a":NaN,"b":undefined}', {"a": None, "b": None}, id="nan-undefined-null"),
    pytest.param('{"a":"1","a":"2"}', {"a": "2"}, id="duplicate-key-last-wins"),
]


@pytest.mark.parametrize(("text", "value"), LENIENT_SYNTAX)
def test_parse_accepts_the_syntax_fastjson_accepts(text: str, value: JSONValue) -> None:
    assert parse_fastjson(text) == value


@pytest.mark.parametrize(
    ("literal", "java_text"),
    [("1.50", "1.50"), ("1e3", "1E+3"), ("-0.0", "0.0"), ("8.5F", "8.5"), ("1.5e-10", "1.5E-10"),
     ("-2.25", "-2.25")],
)
def test_floats_keep_the_text_bigdecimal_gives_them(literal: str, java_text: str) -> None:
    value = parse_fastjson(f'{{"x":{literal}}}')
    assert isinstance(value, dict)
    number = value["x"]
    assert isinstance(number, JavaDecimal)
    assert number.java_text == java_text
    assert number == float(literal.rstrip("FD"))


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xff", id="not-utf8"),
        pytest.param(b"{a b:1}", id="name-with-a-blank"),
        pytest.param(b'{"a":Infinity}', id="infinity"),
        pytest.param(b'{"a":.5}', id="no-leading-digit"),
        pytest.param(b'{"a":"\\q"}', id="unknown-escape"),
        pytest.param(b'{"a":"\\x4"}', id="short-hex-escape"),
        pytest.param(b"[1,,2]", id="stray-comma-in-array"),
        pytest.param(b'{"a":1} x', id="text-after-the-value"),
        pytest.param(b"{/* open", id="unterminated-comment"),
        pytest.param(b"[" * 300 + b"x", id="lenient-nesting-bound"),
        pytest.param(b"[" * 50_000, id="deep-nesting"),
        pytest.param(b"1" * 5000, id="huge-number"),
        pytest.param(b'{"a":"unterminated', id="unterminated"),
        pytest.param(b"", id="empty"),
    ],
)
def test_parse_rejects_bad_json_with_body_decode_error(data: bytes) -> None:
    with pytest.raises(BodyDecodeError):
        parse_fastjson(data)


def test_parse_of_hostile_unterminated_strings_takes_linear_time() -> None:
    hostile = '{1:"' + '\\"' * 200_000 + "\\"
    started = time.process_time()
    with pytest.raises(BodyDecodeError):
        parse_fastjson(hostile)
    # CPU time, loose: a quadratic parser takes minutes here, a linear one milliseconds.
    assert time.process_time() - started < 5.0


@given(text=st.text(max_size=40))
def test_parse_never_raises_anything_but_body_decode_error(text: str) -> None:
    with contextlib.suppress(BodyDecodeError):
        parse_fastjson(text)


@pytest.mark.parametrize(
    ("text", "bits", "value"),
    [
        ("0", 32, 0),
        ("-1", 32, -1),
        ("+7", 32, 7),
        ("0000000000000000000000042", 32, 42),
        ("2147483647", 32, 2**31 - 1),
        ("-2147483648", 32, -(2**31)),
        ("2147483648", 32, None),
        ("9223372036854775807", 64, 2**63 - 1),
        ("9223372036854775808", 64, None),
        ("", 32, None),
        (" 1", 32, None),
        ("1_000", 32, None),
        ("١٢", 32, 12),  # Arabic-Indic digits: Character.digit reads every Nd digit
        ("\U0001d7ce", 32, None),  # a supplementary digit is two UTF-16 non-digits in Java
        ("1.0", 32, None),
        ("0x10", 32, None),
    ],
)
def test_java_int_parses_like_integer_parse_int(text: str, bits: int, value: int | None) -> None:
    assert java_int(text, bits=bits) == value


def test_standard_json_body_takes_the_fast_path() -> None:
    assert parse_fastjson(json.dumps({"a": [1, 2]})) == {"a": [1, 2]}
