"""Tag filtering: which consume-queue tag hashes a TAG subscription accepts.

A pure core. RocketMQ's TAG expressions (`FilterAPI.build`): `*` or empty means every message;
otherwise the expression is split on `||`, each part trimmed, empty parts dropped, and a message
matches when its consume-queue `tagsCode` (Java `String.hashCode()` of its TAGS) is one of the
parts' hashes. The broker filters on hashes only; clients re-check the tag strings (hash
collisions), as Java clients do. Shared by the broker and pyrmq's client (`pyrmq_client`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from store.message_properties import java_string_hash

SUB_ALL: Final = "*"
EXPRESSION_TYPE_TAG: Final = "TAG"


class UnsupportedExpressionError(ValueError):
    """A subscription with an expression type other than TAG (SQL92 needs a property filter,
    which pyrmq does not have, as Java's default `enablePropertyFilter=false`)."""


@dataclass(frozen=True, slots=True)
class TagFilter:
    """The tag hashes a subscription accepts; `codes` None accepts every message."""

    sub_string: str
    codes: frozenset[int] | None

    def matches(self, tags_code: int | None) -> bool:
        """True if a unit with `tags_code` passes (None: unknown, e.g. a batch: passes)."""
        return self.codes is None or tags_code is None or tags_code in self.codes


MATCH_ALL: Final = TagFilter(SUB_ALL, None)


def _check_type(expression_type: str | None) -> None:
    if expression_type and expression_type.upper() != EXPRESSION_TYPE_TAG:
        raise UnsupportedExpressionError(
            f"The broker does not support consumer to filter message by {expression_type}"
        )


def build_tag_filter(sub_string: str | None, expression_type: str | None = None) -> TagFilter:
    """The filter of a TAG expression as sent in a pull (`subscription`, `expressionType`).

    Raises `UnsupportedExpressionError` for a non-TAG expression type.
    """
    _check_type(expression_type)
    if not sub_string or sub_string.strip() == SUB_ALL:
        return MATCH_ALL
    tags = [part.strip() for part in sub_string.split("||")]
    return TagFilter(sub_string, frozenset(java_string_hash(tag) for tag in tags if tag))


def filter_of_subscription(sub_string: str, expression_type: str | None,
                           code_set: Iterable[int]) -> TagFilter:
    """The filter of a subscription registered by heartbeat (a `SubscriptionData`'s
    subString, expressionType and codeSet): its own `codeSet`, as Java uses it (a `*`
    subscription accepts everything).

    Raises `UnsupportedExpressionError` for a non-TAG expression type.
    """
    _check_type(expression_type)
    if not sub_string or sub_string.strip() == SUB_ALL:
        return MATCH_ALL
    return TagFilter(sub_string, frozenset(code_set))
