"""`MappedFile.write_at` hands the kernel at most KERNEL_CALL_BYTES per pwritev (a thread in a
longer call keeps its CPU from a woken event loop on a PREEMPT_NONE kernel): how the parts are
cut into calls, and that the bytes land exactly either way."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from store.mapped_file import (
    _IOV_MAX,
    KERNEL_CALL_BYTES,
    MappedFile,
    _call_batch,
    offset_to_file_name,
)

sizes = st.lists(st.integers(0, 3 * KERNEL_CALL_BYTES // 2), min_size=1, max_size=40) | st.lists(
    st.integers(0, 4096), min_size=1, max_size=3 * _IOV_MAX)


@given(sizes)
def test_calls_take_the_parts_in_order_within_the_bound(part_sizes: list[int]) -> None:
    blob = memoryview(bytes(max(part_sizes)))
    pending = [blob[:size] for size in part_sizes]
    calls = []
    while pending:
        batch = _call_batch(pending)
        assert batch == pending[: len(batch)]  # a prefix: order kept
        assert 1 <= len(batch) <= _IOV_MAX
        total = sum(map(len, batch))
        assert total <= KERNEL_CALL_BYTES or len(batch) == 1  # only a lone part may be larger
        # As many parts as fit: the next one would have gone over a bound.
        if len(batch) < min(len(pending), _IOV_MAX):
            assert total + len(pending[len(batch)]) > KERNEL_CALL_BYTES
        calls.append(batch)
        del pending[: len(batch)]
    assert [len(view) for batch in calls for view in batch] == part_sizes


def test_several_calls_write_the_bytes_exactly(tmp_path: Path) -> None:
    mapped = MappedFile.create(tmp_path / offset_to_file_name(0), 8 * KERNEL_CALL_BYTES)
    try:
        parts = [os.urandom(32 * 1024) for _ in range(100)]  # 3.1 MiB of TRANSFER bodies
        parts.append(os.urandom(2 * KERNEL_CALL_BYTES + 5))  # one part over the bound
        parts += [os.urandom(100) for _ in range(10)]
        mapped.write_at(4096, parts)
        joined = b"".join(parts)
        assert bytes(mapped.buf[4096 : 4096 + len(joined)]) == joined
        with open(mapped.path, "rb") as file:  # the file, not only the mapping, has them
            file.seek(4096)
            assert file.read(len(joined)) == joined
    finally:
        mapped.close()
