"""CPU shares per latency interval (benchmarks/cpu_intervals.py): the pure core against series
whose rates are known, and the sampler on this process's own threads."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.cpu_intervals import CpuSample, CpuSampler, CpuShares, shares_between


def _series(times: list[float], *, broker: float, load_generator: float, machine: float,
            loop: tuple[float, float] | None) -> list[CpuSample]:
    """Samples of processes using CPU at constant rates (cores) since time 0."""
    return [CpuSample(
        at_s=at, broker_s=broker * at, load_generator_s=load_generator * at,
        machine_busy_s=machine * at,
        loop_on_cpu_s=None if loop is None else loop[0] * at,
        loop_waited_s=None if loop is None else loop[1] * at,
    ) for at in times]


rates = st.floats(min_value=0.0, max_value=2.0, allow_nan=False)


@given(
    gaps=st.lists(st.floats(min_value=0.05, max_value=0.25), min_size=30, max_size=80),
    broker=rates, load_generator=rates, machine=rates,
    loop=st.none() | st.tuples(rates, rates),
    start_s=st.floats(min_value=0.5, max_value=2.0),
)
def test_constant_rates_read_back_as_shares(
        gaps: list[float], broker: float, load_generator: float, machine: float,
        loop: tuple[float, float] | None, start_s: float) -> None:
    times = [sum(gaps[:index]) for index in range(len(gaps) + 1)]
    samples = _series(times, broker=broker, load_generator=load_generator, machine=machine,
                      loop=loop)
    end_s = start_s + 2.0
    shares = shares_between(samples, start_s, end_s)
    if times[-1] < end_s - 0.25:
        assert shares is None  # the samples end before the stretch does
        return
    assert shares is not None
    assert shares.broker == pytest.approx(broker)
    assert shares.load_generator == pytest.approx(load_generator)
    assert shares.machine == pytest.approx(machine)
    if loop is None:
        assert shares.loop_on_cpu is None
        assert shares.loop_waited is None
    else:
        assert shares.loop_on_cpu == pytest.approx(loop[0])
        assert shares.loop_waited == pytest.approx(loop[1])


def test_a_stretch_is_measured_between_the_samples_nearest_its_ends() -> None:
    # The broker ran one core from 1.0 s to 2.0 s only: a stretch 1.0-2.0 (samples every
    # 0.25 s) sees all of it; 2.0-3.0 none of it.
    samples = [CpuSample(at_s=at / 4, broker_s=min(max(at / 4 - 1.0, 0.0), 1.0),
                         load_generator_s=0.0, machine_busy_s=0.0) for at in range(17)]
    busy = shares_between(samples, 1.0, 2.0)
    idle = shares_between(samples, 2.04, 3.1)
    assert busy is not None
    assert busy.broker == pytest.approx(1.0)
    assert idle is not None
    assert idle.broker == pytest.approx(0.0)


def test_no_shares_without_samples_near_both_ends() -> None:
    samples = _series([0.0, 0.25, 0.5, 0.75, 1.0], broker=1.0, load_generator=0.0,
                      machine=1.0, loop=None)
    assert shares_between(samples, 0.0, 1.0) is not None
    assert shares_between(samples, 0.0, 2.0) is None  # no sample near its end
    assert shares_between(samples, -1.0, 1.0) is None  # nor its start
    assert shares_between(samples, 0.5, 0.55) is None  # both ends on one sample
    assert shares_between(samples, 1.0, 1.0) is None
    assert shares_between([], 0.0, 1.0) is None


def test_text_names_the_loop_only_where_it_was_read() -> None:
    java = CpuShares(broker=0.8, load_generator=0.7, machine=1.6)
    pyrmq = CpuShares(broker=0.9, load_generator=0.7, machine=1.7, loop_on_cpu=0.66,
                      loop_waited=0.05)
    assert java.text() == "broker 80 %, load generator 70 %, machine 160 %"
    assert pyrmq.text() == ("loop on a CPU 66 %, waiting for one 5 %; broker 90 %, "
                            "load generator 70 %, machine 170 %")


def _schedstat(tid: int) -> tuple[float, float]:
    fields = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
    return int(fields[0]) / 1e9, int(fields[1]) / 1e9


def test_the_sampler_reads_the_named_thread() -> None:
    """This process is both 'broker' and 'load generator'; a thread that spins is the loop:
    what the sampler reads for it lies between the thread's own figures read just before and
    just after, each in its field (on a CPU, waiting for one)."""
    started = threading.Event()
    stop = threading.Event()

    def spin() -> None:
        started.set()
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    started.wait()
    tid = spinner.native_id
    assert tid is not None
    time.sleep(0.2)  # its time on a CPU grows ahead of its waits
    before = _schedstat(tid)
    sampler = CpuSampler(os.getpid(), os.getpid(), loop_tid=tid, period_s=0.05).start()
    time.sleep(0.6)
    samples = sampler.stop()
    after = _schedstat(tid)
    stop.set()
    spinner.join()
    assert len(samples) >= 5
    assert [sample.at_s for sample in samples] == sorted(sample.at_s for sample in samples)
    first, last = samples[0], samples[-1]
    assert first.loop_on_cpu_s is not None
    assert last.loop_on_cpu_s is not None
    assert first.loop_waited_s is not None
    assert last.loop_waited_s is not None
    assert before[0] <= first.loop_on_cpu_s < last.loop_on_cpu_s <= after[0]
    assert before[1] <= first.loop_waited_s <= last.loop_waited_s <= after[1]
    # The process holds the thread: it used at least what the thread ran (10 ms ticks).
    assert last.broker_s - first.broker_s >= last.loop_on_cpu_s - first.loop_on_cpu_s - 0.02
