"""The store against a plain list: append / batch append / truncate / roll / reopen / crash.

The model is the list of (queue_id, body) in log order. After every step the store must hold
exactly the model's records, each queue dense from 0, in order, and maxPhyOffset must be the end
of the last model record.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from store.message_properties import encode_properties
from store.message_store import AppendResult, MessageStore
from tests.support.store_helpers import (
    BORN_HOST,
    STORE_HOST,
    batch,
    crash_image,
    message,
    read_all,
    small_config,
)

QUEUES = 2
bodies = st.binary(min_size=0, max_size=3000)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="pyrmq-sm-"))
        self.generation = 0
        self.root = self.tmp / "g0"
        self.store = MessageStore(small_config(self.root))
        self.store.open()
        # (queue_id, body, phy_offset, size) in log order
        self.model: list[tuple[int, bytes, int, int]] = []

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _record(self, queue_id: int, bodies_: list[bytes], result: AppendResult) -> None:
        phy = result.phy_offset
        records = read_all(self.store, "TopicTest", queue_id)[-len(bodies_):]
        for body, rec in zip(bodies_, records, strict=True):
            assert rec.body == body
            assert rec.phy_offset == phy
            self.model.append((queue_id, body, phy, rec.total_size))
            phy += rec.total_size

    @rule(queue_id=st.integers(0, QUEUES - 1), body=bodies)
    def append(self, queue_id: int, body: bytes) -> None:
        result = self.store.append_message(message(body, queue_id=queue_id))
        self._record(queue_id, [body], result)

    @rule(queue_id=st.integers(0, QUEUES - 1), body=bodies, tags=st.sampled_from(["", "a", "é"]))
    def append_fields(self, queue_id: int, body: bytes, tags: str) -> None:
        """The send's path: one C call for the common message (`append_message_fields`)."""
        result = self.store.append_message_fields(
            topic="TopicTest", queue_id=queue_id, flag=0, body=body,
            properties=encode_properties({"TAGS": tags} if tags else {}), sys_flag=0,
            born_timestamp=1_700_000_000_000, born_host=BORN_HOST, store_host=STORE_HOST)
        self._record(queue_id, [body], result)

    @rule(queue_id=st.integers(0, QUEUES - 1), items=st.lists(bodies, min_size=1, max_size=8))
    def append_batch(self, queue_id: int, items: list[bytes]) -> None:
        result = self.store.append_batch(batch(items, queue_id=queue_id))
        self._record(queue_id, items, result)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.model) - 1))
        self.store.truncate_to_blocking(self.model[index][2])
        del self.model[index:]

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = MessageStore(small_config(self.root))
        report = self.store.open()
        assert not report.abnormal
        assert not report.lost_committed

    @rule()
    def crash_and_recover(self) -> None:
        self.generation += 1
        image = crash_image(self.root, self.tmp / f"g{self.generation}")
        self.store.close()
        self.root = image
        self.store = MessageStore(small_config(self.root))
        assert self.store.open().abnormal

    @invariant()
    def store_equals_model(self) -> None:
        end = self.model[-1][2] + self.model[-1][3] if self.model else None
        if end is not None:
            assert self.store.max_phy_offset == end
        for queue_id in range(QUEUES):
            expected = [body for q, body, _, _ in self.model if q == queue_id]
            records = read_all(self.store, "TopicTest", queue_id)
            assert [r.body for r in records] == expected
            assert [r.queue_offset for r in records] == list(range(len(expected)))
            assert self.store.next_queue_offset("TopicTest", queue_id) == len(expected)


StoreMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestStoreMachine = StoreMachine.TestCase
