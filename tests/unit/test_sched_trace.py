"""The scheduler-trace reader (benchmarks/sched_trace.py) on a hand-written tracefs dump: the
seventeenth session's 17.6 ms wait in miniature (the loop woken onto a busy CPU while the other
idles) and a preemption by one of the store's workers."""

from __future__ import annotations

from pathlib import Path

from benchmarks.sched_trace import (
    Migrate,
    RunIndex,
    Switch,
    Wakeup,
    analyse,
    buffer_kb_to_restore,
    explain,
    histogram,
    parse,
    runs_and_waits,
    stall_triggers,
)

LOOP = 100


def _switch(cpu: int, at: float, prev: tuple[str, int], state: str, nxt: tuple[str, int]) -> str:
    return (f"  {prev[0]}-{prev[1]}   [{cpu:03d}] d..2. {at:.6f}: sched_switch: "
            f"prev_comm={prev[0]} prev_pid={prev[1]} prev_prio=120 prev_state={state} ==> "
            f"next_comm={nxt[0]} next_pid={nxt[1]} next_prio=120")


def _wakeup(cpu: int, at: float, waker: str, pid: int, target: int) -> str:
    return (f"  {waker}-7   [{cpu:03d}] d.s8. {at:.6f}: sched_wakeup: comm=python pid={pid} "
            f"prio=120 target_cpu={target:03d}")


def _migrate(cpu: int, at: float, pid: int, orig: int, dest: int) -> str:
    return (f"  x-7   [{cpu:03d}] d.s7. {at:.6f}: sched_migrate_task: comm=python pid={pid} "
            f"prio=120 orig_cpu={orig} dest_cpu={dest}")


LOOP_T = ("python", LOOP)
WORKER = ("store-io_1", 101)
JIT = ("C2 CompilerThre", 200)  # a name with a space, as the kernel cuts it
IDLE0, IDLE1 = ("swapper/0", 0), ("swapper/1", 0)

TRACE = [
    "# tracer: nop",
    _switch(0, 1.000, IDLE0, "R", LOOP_T),
    _switch(1, 1.000, IDLE1, "R", JIT),
    # a worker preempts the loop on cpu0 for 4 ms
    _switch(0, 1.001, LOOP_T, "R+", WORKER),
    _switch(0, 1.005, WORKER, "S", LOOP_T),
    # the loop sleeps; cpu0 goes idle
    _switch(0, 1.006, LOOP_T, "S", IDLE0),
    # woken by the JIT's CPU, moved there, and it waits 17 ms behind the JIT while cpu0 idles
    _migrate(1, 1.010, LOOP, 0, 1),
    _wakeup(1, 1.010, "C2 CompilerThre", LOOP, 1),
    _switch(1, 1.027, JIT, "R", LOOP_T),
    _switch(1, 1.030, LOOP_T, "S", JIT),
    _switch(0, 1.030, IDLE0, "R", WORKER),
]


def test_parse_reads_every_scheduler_event_and_skips_the_rest() -> None:
    events = list(parse(TRACE))
    assert len(events) == len(TRACE) - 1
    assert events[1] == Switch(1, 1.0, "swapper/1", 0, "R", "C2 CompilerThre", 200)
    assert Migrate(1.010, LOOP, 0, 1) in events
    assert Wakeup(1, 1.010, LOOP, 1) in events


def test_waits_say_how_they_began_and_where() -> None:
    _, waits = runs_and_waits(parse(TRACE), LOOP)
    assert [(round(w.seconds * 1000, 3), w.queued_cpu, w.ran_cpu, w.began) for w in waits] == [
        (4.0, 0, 0, "preempted by store-io_1"),
        (17.0, 1, 1, "woken from cpu1, moved from cpu0"),
    ]


def test_explain_names_who_held_the_cpu_and_the_idle_one() -> None:
    runs, waits = runs_and_waits(parse(TRACE), LOOP)
    index = RunIndex(runs)
    preempted, woken = (explain(w, index) for w in waits)
    assert preempted.on_queued_cpu.keys() == {"store-io_1"}
    assert abs(preempted.on_queued_cpu["store-io_1"] - 0.004) < 1e-9
    assert preempted.idle_elsewhere_s == 0.0  # cpu1 ran the JIT throughout
    assert woken.on_queued_cpu.keys() == {"C2 CompilerThre"}
    assert abs(woken.on_queued_cpu["C2 CompilerThre"] - 0.017) < 1e-9
    assert abs(woken.idle_elsewhere_s - 0.017) < 1e-9


def test_a_balancer_move_while_waiting_changes_the_queue() -> None:
    trace = [
        _switch(0, 2.000, IDLE0, "R", LOOP_T),
        _switch(0, 2.001, LOOP_T, "R", WORKER),
        _migrate(1, 2.003, LOOP, 0, 1),
        _switch(1, 2.004, IDLE1, "R", LOOP_T),
    ]
    _, waits = runs_and_waits(parse(trace), LOOP)
    assert [(w.queued_cpu, w.ran_cpu, w.began) for w in waits] == [
        (1, 1, "preempted by store-io_1, moved from cpu0")]


def test_a_move_without_a_wakeup_is_not_pinned_on_the_next_one() -> None:
    trace = [
        _switch(0, 3.000, IDLE0, "R", LOOP_T),
        _migrate(1, 3.001, LOOP, 0, 1),  # running: moved by the active balancer
        _switch(1, 3.001, IDLE1, "R", LOOP_T),
        _switch(1, 3.002, LOOP_T, "S", IDLE1),
        _wakeup(0, 3.005, "x", LOOP, 1),
        _switch(1, 3.006, IDLE1, "R", LOOP_T),
    ]
    _, waits = runs_and_waits(parse(trace), LOOP)
    assert [w.began for w in waits] == ["woken from cpu0"]


def test_histogram_buckets() -> None:
    _, waits = runs_and_waits(parse(TRACE), LOOP)
    assert histogram(waits) == {"<0.1": 0, "<1": 0, "<2": 0, "<5": 1, "<10": 0, ">=10": 1}


def test_stall_triggers_on_an_unstolen_stall_of_the_cause() -> None:
    line = ("2026-11-29 01:00:37,696 WARNING broker.loop_monitor event loop stall lag_ms=13.8 "
            "cause=not_scheduled on_cpu_ms=0.6 runqueue_wait_ms=17.7 page_faults=1/0 "
            "kernel_wait=- gc_ms=0.0 requests=29/77 handling=43 host_steal_ms=0.0 samples=1 "
            "running=-")
    assert stall_triggers(line, min_lag_ms=10, cause="not_scheduled")
    assert stall_triggers(line, min_lag_ms=10, cause="any")
    assert not stall_triggers(line, min_lag_ms=15, cause="not_scheduled")
    assert not stall_triggers(line, min_lag_ms=10, cause="busy")
    stolen = line.replace("host_steal_ms=0.0", "host_steal_ms=10.0")
    assert not stall_triggers(stolen, min_lag_ms=10, cause="any")
    assert not stall_triggers("INFO broker.node started", min_lag_ms=0, cause="any")


def test_analyse_reports_the_long_waits(tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("\n".join(TRACE) + "\n")
    report = analyse(trace, LOOP, min_ms=10).splitlines()
    assert "thread 100 waited for a CPU 2 times" in report[0]
    assert len(report) == 2
    assert "17.00 ms on cpu1 (woken from cpu1, moved from cpu0; ran on cpu1)" in report[1]
    assert "held by C2 CompilerThre 17.00" in report[1]
    assert report[1].endswith("other CPUs idle 17.00 ms")


def test_the_ring_size_read_back_is_one_tracefs_takes() -> None:
    # Freshly mounted, before any resize, the file names the size it will expand to.
    assert buffer_kb_to_restore("7 (expanded: 1408)\n") == "1408"
    assert buffer_kb_to_restore("49155\n") == "49155"
