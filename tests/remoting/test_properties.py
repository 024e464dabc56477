"""Java `.properties` syntax (`java.util.Properties.load`): the one reader of broker.conf and
controller.conf."""

from __future__ import annotations

import pytest

from remoting.properties import PropertiesSyntaxError, PropertyEntry, parse_properties


def pairs(text: str) -> list[tuple[str, str]]:
    return [(entry.key, entry.value) for entry in parse_properties(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a=1", [("a", "1")], id="equals"),
        pytest.param("a = 1", [("a", "1")], id="spaces-around-equals"),
        pytest.param("a:1", [("a", "1")], id="colon"),
        pytest.param("a 1", [("a", "1")], id="whitespace-separator"),
        pytest.param("a \t= : 1", [("a", ": 1")], id="one-separator-only"),
        pytest.param("   a=1", [("a", "1")], id="leading-whitespace"),
        pytest.param("a=1  ", [("a", "1  ")], id="trailing-whitespace-kept"),
        pytest.param("a=", [("a", "")], id="empty-value"),
        pytest.param("a", [("a", "")], id="key-only"),
        pytest.param("# c\n! c\n  # indented\n\na=1", [("a", "1")], id="comments-and-blanks"),
        pytest.param("a=1 # not a comment", [("a", "1 # not a comment")], id="hash-in-value"),
        pytest.param("a=1\\\n   2", [("a", "12")], id="continuation"),
        pytest.param("a=1\\\n\\\n3", [("a", "13")], id="continuation-twice"),
        pytest.param("a=x\\\\\nb=y", [("a", "x\\"), ("b", "y")], id="even-backslashes-end"),
        pytest.param("a=1\\\n# c", [("a", "1# c")], id="continuation-not-comment"),
        pytest.param("# c\\\na=1", [("a", "1")], id="comment-never-continues"),
        pytest.param("a=1\r\nb=2\rc=3", [("a", "1"), ("b", "2"), ("c", "3")], id="line-ends"),
        pytest.param("k\\=ey=v", [("k=ey", "v")], id="escaped-separator-in-key"),
        pytest.param("k\\ ey v", [("k ey", "v")], id="escaped-space-in-key"),
        pytest.param("a=\\t\\n\\r\\f", [("a", "\t\n\r\f")], id="char-escapes"),
        pytest.param("a=\\u0041\\u00e9", [("a", "Aé")], id="unicode-escapes"),
        pytest.param("a=\\q\\\\", [("a", "q\\")], id="other-escapes"),
        pytest.param("a=1\na=2", [("a", "1"), ("a", "2")], id="repeats-kept-in-order"),
        pytest.param("a=1\\", [("a", "1")], id="continuation-at-eof"),
        pytest.param("a=1\\\\\\", [("a", "1\\")], id="odd-backslashes-at-eof"),
        pytest.param("a=1\\\n", [("a", "1")], id="continuation-into-empty-last-line"),
        pytest.param("a=x\\\n\nb=2", [("a", "x"), ("b", "2")], id="continuation-into-blank"),
        pytest.param("a==1", [("a", "=1")], id="second-separator-is-value"),
        pytest.param("a : 1", [("a", "1")], id="colon-and-blanks"),
        pytest.param("\f\t a=1", [("a", "1")], id="formfeed-tab-leading"),
    ],
)
def test_properties_syntax(text: str, expected: list[tuple[str, str]]) -> None:
    assert pairs(text) == expected


def test_entries_carry_the_line_where_they_start() -> None:
    text = "# header\n\nbrokerName=broker-a\nnamesrvAddr=a:1;\\\n    b:2\nbrokerId=0\n"
    assert parse_properties(text) == [
        PropertyEntry("brokerName", "broker-a", 3),
        PropertyEntry("namesrvAddr", "a:1;b:2", 4),
        PropertyEntry("brokerId", "0", 6),
    ]


@pytest.mark.parametrize("text", ["a=\\u12", "a=\\u12zz", "\\uXYZW=1"])
def test_malformed_unicode_escape_names_the_line(text: str) -> None:
    with pytest.raises(PropertiesSyntaxError, match=r"line 2: .*malformed \\uxxxx"):
        parse_properties("ok=1\n" + text)
