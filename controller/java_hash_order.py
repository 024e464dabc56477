"""The order in which Java's `HashMap`, `HashSet` and `ConcurrentHashMap` iterate their keys.

The name server's answers are fastjson dumps of Java hash maps and sets (route tables, cluster
info), and fastjson writes a map in its iteration order. To produce the bytes a Java name server
produces, pyrmq keeps its tables as insertion-ordered dicts and reorders keys the way the Java
collection would hold them: by bucket (`spread(hashCode) & (capacity - 1)`), and within a bucket
by insertion order (Java appends new nodes to a bucket's list; replacing a value keeps the node).

Approximations, all far from real use: a bucket of 8 or more keys in a table of 64 or more is a
red-black tree in Java (other order); a table that grew and then shrank keeps its larger capacity
in Java (we compute it from the current size); a `ConcurrentHashMap` resize may reorder a bucket.
Order never matters to a JSON decoder; it only makes our bytes comparable with Java's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, TypeVar

_K = TypeVar("_K")

_U32: Final = 0xFFFF_FFFF
_U64: Final = 0xFFFF_FFFF_FFFF_FFFF
HASH_MAP_DEFAULT_CAPACITY: Final = 16
"""`new HashMap<>()` / `new HashSet<>()`: 16 buckets, resized past 3/4 full."""


def java_string_hash(text: str) -> int:
    """`String.hashCode()` as an unsigned 32-bit value: `s[0]*31^(n-1) + ... + s[n-1]` over
    UTF-16 code units (a character above U+FFFF counts as its two surrogates)."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for index in range(0, len(units), 2):
        h = (31 * h + (units[index] << 8 | units[index + 1])) & _U32
    return h


def java_long_hash(value: int) -> int:
    """`Long.hashCode()` as an unsigned 32-bit value: `(int) (value ^ (value >>> 32))`."""
    bits = value & _U64
    return (bits ^ (bits >> 32)) & _U32


def _bucket(hash_code: int, capacity: int) -> int:
    # HashMap.hash() and ConcurrentHashMap.spread() both fold the high half into the low half;
    # spread() also clears the sign bit, which no capacity below 2**31 can see.
    return (hash_code ^ (hash_code >> 16)) & (capacity - 1)


def _table_size_for(cap: int) -> int:
    """`HashMap.tableSizeFor`: the smallest power of two >= cap (at least 1)."""
    size = 1
    while size < cap:
        size *= 2
    return size


def grown_capacity(size: int, *, initial: int = HASH_MAP_DEFAULT_CAPACITY) -> int:
    """Buckets of a hash map that started with `initial` buckets and had `size` keys put in:
    it doubles whenever it holds more than 3/4 of its buckets."""
    capacity = initial
    while size > capacity * 3 // 4:
        capacity *= 2
    return capacity


def copied_map_capacity(size: int) -> int:
    """Buckets of `new HashMap<>(otherMap)` holding `size` keys (`putMapEntries`)."""
    return _table_size_for(int(size / 0.75 + 1.0))


def copied_set_capacity(size: int) -> int:
    """Buckets of `new HashSet<>(collection)` holding `size` keys."""
    return _table_size_for(max(int(size / 0.75) + 1, HASH_MAP_DEFAULT_CAPACITY))


def hash_order(keys: Iterable[_K], *, capacity: int, hash_code: Callable[[_K], int]) -> list[_K]:
    """`keys`, given in insertion order, in the iteration order of a Java hash table with
    `capacity` buckets (a power of two)."""
    assert capacity > 0, capacity
    assert capacity & (capacity - 1) == 0, capacity
    return sorted(keys, key=lambda key: _bucket(hash_code(key), capacity))  # stable


def string_key_order(keys: Iterable[str], *, capacity: int) -> list[str]:
    """String keys in a Java hash table's iteration order (see `hash_order`)."""
    return hash_order(keys, capacity=capacity, hash_code=java_string_hash)


def long_key_order(keys: Iterable[int], *, capacity: int) -> list[int]:
    """Long keys in a Java hash table's iteration order (see `hash_order`)."""
    return hash_order(keys, capacity=capacity, hash_code=java_long_hash)
