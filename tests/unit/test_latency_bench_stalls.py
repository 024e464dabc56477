"""The latency benchmark's reading of the broker's stall lines (benchmarks/test_latency.py): each
stall with the host's pauses of the VM inside it and the CPUs' speed over it, and the count of
those still over the threshold without the pauses."""

from __future__ import annotations

from benchmarks.host_pauses import Pause, Speed
from benchmarks.test_latency import STALL_THRESHOLD_MS, describe_stalls, stalls_in


def _line(lag_ms: float, cause: str, end_unix_s: float) -> str:
    return (f"2026-11-29 04:02:37,244 WARNING broker.loop_monitor event loop stall "
            f"lag_ms={lag_ms} cause={cause} on_cpu_ms=18.1 runqueue_wait_ms=0.4 page_faults=0/0 "
            f"kernel_wait=- gc_ms=0.0 requests=16/86 handling=17 host_steal_ms=0.0 "
            f"end_unix_s={end_unix_s} samples=0 running=-")


def test_a_stall_is_read_with_the_pauses_inside_it() -> None:
    log = "\n".join([
        "2026-11-29 04:02:30,000 INFO broker.node something else",
        _line(16.1, "busy", 1000.020),  # over 1000.0039-1000.020: 8.6 ms of it paused
        _line(12.0, "not_scheduled", 1005.000),  # no pause inside
    ])
    spans: list[tuple[float, float]] = []

    def speed(start: float, end: float) -> Speed | None:
        spans.append((start, end))
        return Speed(0.5, 0.45, 1.0) if start < 1001 else None

    stalls = stalls_in(log, [Pause(1000.0102, 1000.0188), Pause(1003.0, 1003.5)], speed)
    assert [(s.lag_ms, s.cause, s.end_unix_s) for s in stalls] == [
        (16.1, "busy", 1000.020), (12.0, "not_scheduled", 1005.0)]
    assert abs(stalls[0].host_paused_ms - 8.6) < 1e-6
    assert abs(stalls[0].less_host_ms - 7.5) < 1e-6
    assert stalls[1].host_paused_ms == 0.0
    assert stalls[0].running == "-"
    # The speed is asked for over each stall's own stretch.
    assert [(round(a, 4), round(b, 4)) for a, b in spans] == [(1000.0039, 1000.020),
                                                              (1004.988, 1005.0)]
    assert stalls[0].speed == Speed(0.5, 0.45, 1.0)
    assert stalls[1].speed is None
    assert "end_unix_s" not in stalls[0].figures
    assert describe_stalls(stalls).startswith(
        f"2 event-loop stalls over {STALL_THRESHOLD_MS} ms (causes: busy 1, not_scheduled 1), "
        f"1 of them over {STALL_THRESHOLD_MS} ms less the VM's pauses, 0 of those while the "
        "host ran a CPU below 0.75 of full speed; the longest 16 ms, busy")
    # Without the pauses both are over the threshold, and the first was on a slowed CPU.
    unpaused = stalls_in(log, [], speed)
    assert "2 of them over 10 ms less the VM's pauses, 1 of those while" in \
        describe_stalls(unpaused)
    assert describe_stalls([]) == f"no event-loop stall over {STALL_THRESHOLD_MS} ms"
