"""Java hash-table iteration order. Every expected line was printed by Java 17 putting the same
keys, in the same order, into the same collection (`new HashMap<>()`, `new HashSet<>(keys)`,
`new ConcurrentHashMap<>(128)` / `(32)`, `new HashMap<>(map)`)."""

from __future__ import annotations

import pytest

from controller.java_hash_order import (
    copied_map_capacity,
    copied_set_capacity,
    grown_capacity,
    java_long_hash,
    java_string_hash,
    long_key_order,
    string_key_order,
)

NAMES = [
    *("broker-a", "broker-b", "broker-c", "DefaultCluster"),
    *(f"b{index}" for index in range(1, 14)),
    *("zz\u00e9", "x\U0001f600"),
]


@pytest.mark.parametrize(
    ("count", "hash_map", "hash_set_copy", "chm_128", "chm_32"),
    [
        pytest.param(
            3,
            "broker-b,broker-c,broker-a",
            "broker-b,broker-c,broker-a",
            "broker-b,broker-c,broker-a",
            "broker-b,broker-c,broker-a",
            id="3",
        ),
        pytest.param(
            12,
            "b2,b3,b4,b5,b6,b7,b8,broker-b,broker-c,broker-a,DefaultCluster,b1",
            "DefaultCluster,b1,b2,b3,b4,b5,b6,b7,b8,broker-b,broker-c,broker-a",
            "b1,b2,b3,b4,b5,b6,b7,b8,DefaultCluster,broker-b,broker-c,broker-a",
            "b1,b2,b3,b4,b5,b6,b7,b8,broker-b,broker-c,broker-a,DefaultCluster",
            id="12-full-16-buckets",
        ),
        pytest.param(
            13,
            "DefaultCluster,b1,b2,b3,b4,b5,b6,b7,b8,b9,broker-b,broker-c,broker-a",
            "DefaultCluster,b1,b2,b3,b4,b5,b6,b7,b8,b9,broker-b,broker-c,broker-a",
            "b1,b2,b3,b4,b5,b6,b7,b8,b9,DefaultCluster,broker-b,broker-c,broker-a",
            "b1,b2,b3,b4,b5,b6,b7,b8,b9,broker-b,broker-c,broker-a,DefaultCluster",
            id="13-resized-to-32",
        ),
        pytest.param(
            19,
            "b10,b12,b11,b13,x\U0001f600,zz\u00e9,DefaultCluster,b1,b2,b3,b4,b5,b6,b7,b8,b9,"
            "broker-b,broker-c,broker-a",
            "b10,b12,b11,b13,x\U0001f600,zz\u00e9,DefaultCluster,b1,b2,b3,b4,b5,b6,b7,b8,b9,"
            "broker-b,broker-c,broker-a",
            "b10,b12,b11,b13,b1,b2,b3,b4,b5,b6,b7,b8,b9,DefaultCluster,broker-b,broker-c,"
            "broker-a,zz\u00e9,x\U0001f600",
            "b10,b12,b11,b13,x\U0001f600,b1,b2,b3,b4,b5,b6,b7,b8,b9,broker-b,broker-c,broker-a,"
            "zz\u00e9,DefaultCluster",
            id="19-non-ascii",
        ),
    ],
)
def test_string_keys_iterate_like_java(
    count: int, hash_map: str, hash_set_copy: str, chm_128: str, chm_32: str
) -> None:
    keys = NAMES[:count]
    in_map = string_key_order(keys, capacity=grown_capacity(count))
    assert ",".join(in_map) == hash_map
    assert ",".join(string_key_order(in_map, capacity=copied_set_capacity(count))) == hash_set_copy
    assert ",".join(string_key_order(keys, capacity=grown_capacity(count, initial=256))) == chm_128
    assert ",".join(string_key_order(keys, capacity=grown_capacity(count, initial=64))) == chm_32


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        pytest.param([5, 0], "0,5", id="2"),
        pytest.param([5, 0, 2], "0,2,5", id="3"),
        pytest.param([5, 0, 2, 16, 17], "0,16,17,2,5", id="5-same-buckets"),
        pytest.param(
            [5, 0, 2, 16, 17, 33, -1, 1 << 40, 4],
            "0,16,-1,1099511627776,17,33,2,4,5",
            id="9-negative-and-large",
        ),
    ],
)
def test_long_keys_iterate_like_java_also_after_a_copy(keys: list[int], expected: str) -> None:
    in_map = long_key_order(keys, capacity=grown_capacity(len(keys)))
    assert ",".join(map(str, in_map)) == expected
    copied = long_key_order(in_map, capacity=copied_map_capacity(len(keys)))
    assert ",".join(map(str, copied)) == expected


@pytest.mark.parametrize(
    ("text", "hash_code"),
    [("", 0), ("a", 97), ("broker-a", 0x1636EB6D), ("\U0001f600", (0xD83D * 31 + 0xDE00))],
)
def test_java_string_hash(text: str, hash_code: int) -> None:
    assert java_string_hash(text) == hash_code


def test_java_long_hash() -> None:
    assert java_long_hash(7) == 7
    assert java_long_hash(-1) == 0
    assert java_long_hash(1 << 40) == 1 << 8
