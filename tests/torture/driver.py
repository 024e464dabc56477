"""Runs a plan's operations against a real `MessageStore`, checking each result against the oracle.

The same driver runs inside the SIGKILL writer child (family A), where its progress lines go to
stdout, and in-process for the power-loss family (C). Each operation prints its lines only after
the store call returned, so a line is a promise: `APPENDED start end key` means the record was
in the mapping; `FLUSHED x` means [0, x) was msynced.

Progress lines per operation (`expected_lines` builds the same list from the oracle alone):
    Append              APPENDED <start> <end> <key>    one per record, after the append returned
    Flush               FLUSHED <flushed_offset>
    FlushConsumeQueues  CQFLUSHED
    WriteCheckpoint     CHECKPOINT
    Truncate            TRUNCATE <offset>, then TRUNCATED <offset>
    AppendEpoch         EPOCH <epoch> <start_offset>
    SetConfirm          CONFIRM <offset>, then CONFIRMED <offset>
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from store.message_store import MessageStore
from tests.torture.workload import (
    Append,
    AppendEpoch,
    Flush,
    FlushConsumeQueues,
    Layout,
    Op,
    Plan,
    SetConfirm,
    Truncate,
    WriteCheckpoint,
    append_single,
    encode_batch,
)

Emit = Callable[[str], None]


class FakeClock:
    """The store's wall clock in tests: set by the driver, so store timestamps are seeded too."""

    __slots__ = ("now_ms",)

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def _ignore(line: str) -> None:
    del line


def op_lines(op: Op, layout: Layout) -> list[str]:
    """The lines `op` prints, given the oracle *before* it; advances `layout` past it."""
    match op:
        case Append():
            return [f"APPENDED {r.start} {r.end} {r.key}" for r in layout.apply(op)]
        case Flush():
            layout.apply(op)
            return [f"FLUSHED {layout.max_phy_offset}"]
        case FlushConsumeQueues():
            return ["CQFLUSHED"]
        case WriteCheckpoint():
            return ["CHECKPOINT"]
        case Truncate(phy_offset=cut):
            layout.apply(op)
            return [f"TRUNCATE {cut}", f"TRUNCATED {cut}"]
        case AppendEpoch(epoch=epoch, start_offset=start):
            layout.apply(op)
            return [f"EPOCH {epoch} {start}"]
        case SetConfirm(confirm_offset=confirm):
            layout.apply(op)
            return [f"CONFIRM {confirm}", f"CONFIRMED {confirm}"]


def expected_lines(plan: Plan) -> list[tuple[int, str]]:
    """Every progress line of a complete run of `plan`, each with the index of its operation."""
    layout = Layout(controller=plan.controller)
    return [(index, line) for index, op in enumerate(plan.ops) for line in op_lines(op, layout)]


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a killed writer got: `ops_done` complete operations, then `partial_lines` lines
    of the next one (the operation in progress when the kill came, if any)."""

    ops_done: int
    partial_lines: int


def progress_of(plan: Plan, lines: list[str]) -> Progress:
    """Match a writer's progress lines against the oracle's; `AssertionError` on a difference."""
    expected = expected_lines(plan)
    if lines != [line for _, line in expected[: len(lines)]]:
        for (index, want), got in zip(expected, lines, strict=False):
            if want != got:
                raise AssertionError(f"writer line for op {index}: got {got!r}, oracle {want!r}")
        raise AssertionError(f"writer printed {len(lines)} lines, the plan has {len(expected)}")
    if len(lines) == len(expected):
        return Progress(len(plan.ops), 0)
    next_op = expected[len(lines)][0]
    partial = sum(1 for index, _ in expected[: len(lines)] if index == next_op)
    return Progress(next_op, partial)


class Driver:
    """Applies operations to `store`, comparing every result with its own `Layout` oracle.

    `layout` is the oracle after the operations applied so far. A store result that differs
    from the oracle raises `AssertionError` naming the operation.
    """

    def __init__(self, store: MessageStore, clock: FakeClock, *, controller: bool,
                 emit: Emit = _ignore) -> None:
        self.store = store
        self.clock = clock
        self.layout = Layout(controller=controller)
        self.emit = emit
        self.ops_done = 0

    async def apply(self, op: Op) -> None:
        store = self.store
        match op:
            case Append(msgs=msgs, batch=batch):
                added = self.layout.apply(op)
                self.clock.now_ms = self.layout.clock_ms
                if batch:
                    result = store.append_batch(encode_batch(msgs))
                else:
                    result = append_single(store, msgs[0])
                got = (result.phy_offset, result.end_offset, result.queue_offset)
                want = (added[0].start, added[-1].end, added[0].queue_offset)
                if got != want:
                    raise AssertionError(
                        f"op {self.ops_done}: append landed at (start, end, queue_offset)={got}, "
                        f"oracle {want}"
                    )
                for rec in added:
                    self.emit(f"APPENDED {rec.start} {rec.end} {rec.key}")
            case Flush():
                self.layout.apply(op)
                flushed = await store.flush()
                if flushed != self.layout.max_phy_offset:
                    raise AssertionError(f"op {self.ops_done}: flush returned {flushed}, "
                                         f"oracle end {self.layout.max_phy_offset}")
                self.emit(f"FLUSHED {flushed}")
            case FlushConsumeQueues():
                await store.flush_consume_queues()
                self.emit("CQFLUSHED")
            case WriteCheckpoint():
                await store.write_checkpoint()
                self.emit("CHECKPOINT")
            case Truncate(phy_offset=cut):
                self.emit(f"TRUNCATE {cut}")
                store.truncate_to_blocking(cut)
                self.layout.apply(op)
                self.emit(f"TRUNCATED {cut}")
            case AppendEpoch(epoch=epoch, start_offset=start):
                store.append_epoch_blocking(epoch, start)
                self.layout.apply(op)
                self.emit(f"EPOCH {epoch} {start}")
            case SetConfirm(confirm_offset=confirm):
                self.emit(f"CONFIRM {confirm}")
                store.set_confirm_offset(confirm)
                self.layout.apply(op)
                self.emit(f"CONFIRMED {confirm}")
        self.ops_done += 1
