"""A slave's dispatch in a worker thread (`MessageStore.dispatch_in_thread`) walks in steps of
at most `DISPATCH_WALK_BYTES_MAX` bytes and gives up the GIL after each: a walk holds the GIL
most of its time, and the event loop thread waits for it (up to the 5 ms switch interval) after
every system call. A record longer than a step is still dispatched (steps double until one
holds it), and every record gets its unit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from store import message_store as message_store_module
from store.message_store import MessageStore
from tests.support.store_helpers import message, small_config

COUNT = 40


async def replicated_slave(root: Path, body_bytes: int) -> tuple[MessageStore, int]:
    """A slave holding COUNT replicated records of `body_bytes` each, confirmed, undispatched."""
    master = MessageStore(small_config(root / "master"))
    master.open()
    try:
        for i in range(COUNT):
            await master.put_message(message(bytes([i]) * body_bytes))
        parts = []
        pos = 0
        while pos < master.max_phy_offset:
            mapped = master.commitlog.files.find(pos)
            assert mapped is not None
            parts.append(bytes(mapped.buf[: mapped.wrote_position]))
            pos = mapped.file_end_offset
    finally:
        master.close()
    slave = MessageStore(small_config(root / "slave", enable_controller_mode=True))
    slave.open()
    slave.fenced = True
    pos = 0
    for part in parts:
        slave.append_replicated(pos, part)
        pos += 64 * 1024
    end = slave.max_phy_offset
    slave.set_confirm_offset(end, dispatch=False)
    return slave, end


@pytest.mark.parametrize(("cap", "body_bytes"), [(3000, 1000), (500, 1000), (1 << 30, 1000)])
async def test_walks_are_bounded_and_dispatch_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cap: int, body_bytes: int
) -> None:
    monkeypatch.setattr(message_store_module, "DISPATCH_WALK_BYTES_MAX", cap)
    slave, end = await replicated_slave(tmp_path, body_bytes)
    try:
        walks: list[tuple[int, int]] = []
        original = slave._dispatch_bulk

        def spy(start: int, bound: int, touched: set[tuple[str, int]]) -> int:
            reached = original(start, bound, touched)
            walks.append((start, bound))
            return reached

        slave._dispatch_bulk = spy  # type: ignore[method-assign, assignment]
        await slave.dispatch_in_thread()
        assert slave.max_offset_in_queue("TopicTest", 0) == COUNT
        assert slave.reput_from_offset == end
        record_bytes = end // COUNT + 1  # upper bound of one record (they are the same size)
        for start, bound in walks:
            # A step covers at most the cap, unless the cap held no whole record: steps then
            # double until one does.
            assert bound - start <= max(cap, 2 * record_bytes)
        if cap < end:
            assert len(walks) > 1
    finally:
        slave.close()
