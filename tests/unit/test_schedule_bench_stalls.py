"""benchmarks/test_schedule_lateness.py names a held-up loop's stalls (with their cause)."""

from __future__ import annotations

import asyncio
import re
import time

from benchmarks.test_schedule_lateness import STALL_REPORT_MS, describe_stalls
from broker.loop_monitor import LoopMonitor


def test_the_longest_stall_is_named_with_its_cause_and_what_ran() -> None:
    monitor = LoopMonitor(sample_interval_ms=2, stall_threshold_ms=STALL_REPORT_MS)

    def hold_the_loop(cpu_seconds: float) -> None:  # on the CPU, however loaded the host
        until = time.thread_time() + cpu_seconds
        while time.thread_time() < until:
            pass

    async def run() -> None:
        monitor.start()
        try:
            await asyncio.sleep(0.01)
            hold_the_loop(2 * STALL_REPORT_MS / 1000)
            await asyncio.sleep(0.01)
        finally:
            monitor.close()

    assert describe_stalls(monitor) == f"no loop stall over {STALL_REPORT_MS} ms"
    asyncio.run(run())
    text = describe_stalls(monitor)
    # A loaded host may add stalls of its own; the loop's hold is the longest.
    match = re.match(rf"\d+ loop stalls? over {STALL_REPORT_MS} ms, the longest (\d+) ms (\w+) "
                     r"\(on the CPU (\d+) ms", text)
    assert match is not None, text
    assert int(match.group(1)) >= 2 * STALL_REPORT_MS - 1, text
    assert int(match.group(3)) >= 2 * STALL_REPORT_MS - 1, text
    assert "hold_the_loop" in text, text
