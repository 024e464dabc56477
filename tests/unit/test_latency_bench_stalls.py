"""The latency benchmark's reading of the broker's stall lines (benchmarks/test_latency.py): each
stall with the host's pauses of the VM inside it, the time the host stopped the loop's CPU in
it, the CPUs' speed over it, and the count of those still over the threshold without them."""

from __future__ import annotations

from benchmarks.host_pauses import HostRecords, Late, Pause, Speed, SpeedBucket
from benchmarks.test_latency import STALL_THRESHOLD_MS, describe_stalls, stalls_in


def _line(lag_ms: float, cause: str, end_unix_s: float, cpu: str = "1",
          runqueue_wait_ms: str = "0.4", on_cpu_ms: str = "18.1", runnable: str = "-") -> str:
    return (f"2026-11-29 04:02:37,244 WARNING broker.loop_monitor event loop stall "
            f"lag_ms={lag_ms} cause={cause} on_cpu_ms={on_cpu_ms} "
            f"runqueue_wait_ms={runqueue_wait_ms} page_faults=0/0 kernel_wait=- gc_ms=0.0 "
            "requests=16/86 handling=17 host_steal_ms=0.0 kernel_samples=9 "
            f"loop_kernel=S:futex_do_wait/9 runnable_while_loop_waited={runnable} cpu={cpu} "
            f"end_unix_s={end_unix_s} samples=0 running=-")


def test_a_stall_is_read_with_the_pauses_inside_it() -> None:
    log = "\n".join([
        "2026-11-29 04:02:30,000 INFO broker.node something else",
        _line(16.1, "busy", 1000.020),  # over 1000.0039-1000.020: 8.6 ms of it paused
        _line(12.0, "not_scheduled", 1005.000),  # no pause inside
    ])
    # Speed buckets: full speed (9 us) at 900 s; over the first stall two at half speed and
    # one at 0.45; just before it and just after the second, slow ones that must not count.
    host = HostRecords(2, [], [
        SpeedBucket(0, 900.0, 900.05, 9_000),
        SpeedBucket(0, 999.99, 1000.01, 18_000), SpeedBucket(0, 1000.0, 1000.05, 18_000),
        SpeedBucket(1, 1000.0, 1000.05, 20_000), SpeedBucket(1, 999.9, 1000.003, 90_000),
        SpeedBucket(0, 1005.001, 1005.05, 90_000),
    ])
    stalls = stalls_in(log, [Pause(1000.0102, 1000.0188), Pause(1003.0, 1003.5)], host)
    assert [(s.lag_ms, s.cause, s.end_unix_s) for s in stalls] == [
        (16.1, "busy", 1000.020), (12.0, "not_scheduled", 1005.0)]
    assert abs(stalls[0].host_paused_ms - 8.6) < 1e-6
    assert abs(stalls[0].less_host_ms - 7.5) < 1e-6
    assert stalls[1].host_paused_ms == 0.0
    assert stalls[0].running == "-"
    # The speed is taken over each stall's own stretch.
    assert stalls[0].speed == Speed(0.5, 0.45, 1.0)
    assert stalls[1].speed is None
    assert "end_unix_s" not in stalls[0].figures
    assert describe_stalls(stalls).startswith(
        f"2 event-loop stalls over {STALL_THRESHOLD_MS} ms (causes: busy 1, not_scheduled 1), "
        "1 of them as the goal counts them (less the loop's waits for a CPU or the host's "
        f"stops, the largest), 1 over {STALL_THRESHOLD_MS} ms less the host's stops of the VM "
        "or of the loop's CPU alone, 0 of those while the host ran a CPU below 0.75 of full "
        "speed; the longest 16 ms, busy")
    # Without the pauses both are over the threshold, and the first was on a slowed CPU.
    unpaused = stalls_in(log, [], host)
    assert "2 of them as the goal counts them" in describe_stalls(unpaused)
    assert "2 over 10 ms less the host's stops of the VM or of the loop's CPU alone, 1 of " \
        "those while" in describe_stalls(unpaused)
    assert describe_stalls([]) == f"no event-loop stall over {STALL_THRESHOLD_MS} ms"


def test_a_stall_less_the_time_the_host_stopped_the_loops_cpu() -> None:
    # A 14 ms stall on cpu1 (1000.006-1000.020) in which cpu1's probe was overdue 9 ms and
    # cpu0's 12 ms: only cpu1's counts, and no pause of the whole VM came.
    lates = [Late(1, 1000.008, 0.009, 0.0), Late(0, 1000.006, 0.012, 0.0)]
    log = "\n".join([_line(14.0, "blocked", 1000.020, cpu="1"),
                     _line(14.0, "blocked", 1000.020, cpu="-")])
    named, unnamed = stalls_in(log, host=HostRecords(2, lates, []))
    assert named.cpu == 1
    assert abs(named.cpu_stopped_ms - 9.0) < 1e-6
    assert abs(named.less_host_ms - 5.0) < 1e-6
    # cpu0's stops are printed beside it, and never judged.
    assert abs(named.other_cpus_stopped_ms - 12.0) < 1e-6
    # A line without the loop's CPU (an older broker): only whole-VM pauses count.
    assert unnamed.cpu is None
    assert unnamed.cpu_stopped_ms == 0.0
    assert unnamed.less_host_ms == 14.0
    assert unnamed.other_cpus_stopped_ms == 0.0
    assert describe_stalls([named]).startswith(
        f"1 event-loop stalls over {STALL_THRESHOLD_MS} ms (causes: blocked 1), 0 of them as "
        "the goal counts them")


def test_the_goal_counts_a_stall_less_the_loops_waits_for_a_cpu() -> None:
    # 18 ms stalls: one waited 9 ms for a CPU (9 left: not counted), one 3 ms while the VM was
    # paused 6 ms of it (only the larger comes off: 12 left, counted), one from a broker whose
    # line has no wait figure ("-": nothing comes off).
    log = "\n".join([_line(18.0, "not_scheduled", 1000.020, runqueue_wait_ms="9.0"),
                     _line(18.0, "busy", 1001.020, runqueue_wait_ms="3.0"),
                     _line(18.0, "busy", 1002.020, runqueue_wait_ms="-"),
                     _line(10.7, "not_scheduled", 1003.020, runqueue_wait_ms="13.6")])
    waited, paused, unknown, longer_wait = stalls_in(log, [Pause(1001.010, 1001.016)])
    assert (waited.runqueue_wait_ms, paused.runqueue_wait_ms, unknown.runqueue_wait_ms) == \
        (9.0, 3.0, 0.0)
    assert abs(waited.judged_ms - 9.0) < 1e-6
    assert abs(paused.judged_ms - 12.0) < 1e-6
    assert unknown.judged_ms == 18.0
    # The wait is counted from the tick before, so it can exceed the lag: nothing is left.
    assert longer_wait.judged_ms == 0.0
    assert "(causes: busy 2, not_scheduled 1), 2 of them as the goal counts them" in \
        describe_stalls([waited, paused, unknown])


def test_a_blocked_stall_less_the_stops_of_the_gil_holders_cpu() -> None:
    # 20 ms stalls on cpu1 (1000.000-1000.020), the loop 2 ms on its CPU and 1 ms waiting for
    # one; cpu0 stopped 12 ms, cpu1 3 ms.
    lates = [Late(0, 1000.004, 0.012, 0.0), Late(1, 1000.010, 0.003, 0.0)]
    log = "\n".join([
        # store-io_2 was runnable on cpu0 while the loop waited: cpu0's 12 ms come off.
        _line(20.0, "blocked", 1000.020, on_cpu_ms="2.0", runqueue_wait_ms="1.0",
              runnable="store-io_2@0/7,loop-monitor@1/1"),
        # Off its CPU for only 5 ms of it: no more than those 5 come off.
        _line(20.0, "blocked", 1000.020, on_cpu_ms="14.0", runqueue_wait_ms="1.0",
              runnable="store-io_2@0/7"),
        # Nothing runnable while it waited: the holder's CPU is not known.
        _line(20.0, "blocked", 1000.020, on_cpu_ms="2.0", runqueue_wait_ms="1.0"),
        # Busy: the loop ran; a holder's stop does not explain that.
        _line(20.0, "busy", 1000.020, on_cpu_ms="2.0", runqueue_wait_ms="1.0",
              runnable="store-io_2@0/7"),
    ])
    held, mostly_running, unknown, busy = stalls_in(log, host=HostRecords(2, lates, []))
    assert abs(held.holder_cpus_stopped_ms - 12.0) < 1e-6
    assert abs(held.judged_ms - 8.0) < 1e-6
    assert abs(mostly_running.holder_cpus_stopped_ms - 5.0) < 1e-6
    assert abs(mostly_running.judged_ms - 15.0) < 1e-6
    assert unknown.holder_cpus_stopped_ms == 0.0
    assert abs(unknown.judged_ms - 17.0) < 1e-6  # less its own CPU's 3 ms stop
    assert busy.holder_cpus_stopped_ms == 0.0
    assert "4 event-loop stalls over 10 ms (causes: blocked 3, busy 1), 3 of them as the goal " \
        "counts them" in describe_stalls([held, mostly_running, unknown, busy])
