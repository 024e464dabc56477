"""The replication benchmark's stall figure as the goal judges it (benchmarks/test_ha_replication.py
`Rounds.judged`; README, "How the stall goals are judged"): the worst stall less the loops' waits
for a CPU, only in the rounds in which the host took no CPU time and the guest handed it no
memory back."""

from __future__ import annotations

from benchmarks.test_ha_replication import Rounds, Run


def _run(stall_ms: float, own_ms: float, steal_ms: float = 0.0,
         reported_mib: float | None = 0.0) -> Run:
    return Run(seconds=1.0, cpu_seconds=1.0, near_stall_s=stall_ms / 1000,
               far_stall_s=0.0, own_stall_s=own_ms / 1000, major_faults=0, steal_ms=steal_ms,
               reported_mib=reported_mib)


def test_the_goal_judges_the_rounds_the_host_took_nothing_in() -> None:
    rounds = Rounds(
        peer=[_run(6.0, 1.5), _run(3.0, 2.5), _run(9.0, 8.0, steal_ms=20.0)],
        repl=[
            _run(5.6, 1.8),  # a loop waited for a CPU: 1.8 ms of its own
            _run(24.4, 9.0, reported_mib=118.0),  # memory handed back: not judged
            _run(12.0, 7.0, steal_ms=30.0),  # CPU time taken: not judged
        ])
    assert rounds.judged() == (
        "the worst event-loop stall as the goal judges it 1.8 ms (goal < 5 ms; less the loops' "
        "waits for a CPU, in the 1 of 3 rounds in which the host took no CPU time and no memory "
        "back; the plain stream 2.5 ms)")
    # A round without the memory figure (no /proc/vmstat counter) counts as one the host took
    # nothing from: only what was counted excludes a round.
    assert "judges it 4.0 ms" in Rounds(peer=[_run(1.0, 1.0)],
                                        repl=[_run(6.0, 4.0, reported_mib=None)]).judged()


def test_no_round_to_judge() -> None:
    rounds = Rounds(peer=[_run(3.0, 1.0, steal_ms=10.0)],
                    repl=[_run(30.0, 20.0, reported_mib=64.0)])
    assert rounds.judged().startswith(
        "the worst event-loop stall as the goal judges it - (goal < 5 ms; less the loops' "
        "waits for a CPU, in the 0 of 1 rounds")
    assert rounds.judged().endswith("the plain stream -)")
