"""The verdict rule with plain numbers: each line at, just below and just above, materiality,
hysteresis, CPU contention, and the device's verdict."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainperf import Verdict
from trainperf.records._verdict import (
    CONTENTION_LOAD_PCT,
    CONTENTION_WORKERS_PCT,
    GC_BOUND_SHARE,
    HOST_BOUND_UTILIZATION,
    HYSTERESIS,
    INPUT_BOUND_SHARE,
    LOOP_BOUND_SHARE,
    MATERIAL_MS,
    STARVED_SHARE,
    CpuLoad,
    Thresholds,
    judge,
    judge_device,
)

EPS = 1e-6


def test_the_documented_lines():
    assert (INPUT_BOUND_SHARE, GC_BOUND_SHARE, LOOP_BOUND_SHARE) == (20.0, 10.0, 20.0)
    assert (MATERIAL_MS, HYSTERESIS, HOST_BOUND_UTILIZATION) == (0.5, 0.8, 50.0)
    assert (CONTENTION_LOAD_PCT, CONTENTION_WORKERS_PCT, STARVED_SHARE) == (90.0, 50.0, 0.75)


@pytest.mark.parametrize(
    "part, line, kind",
    [("etl", 20.0, "input-bound"), ("gc", 10.0, "gc-bound"), ("other", 20.0, "loop-bound")],
)
def test_each_line_at_below_and_above(part, line, kind):
    """A 1 s window of 10 iterations: the share at its line is bad, just below it is fine."""

    def verdict(share):
        figures = {"etl_s": 0.0, "gc_s": 0.0, "other_s": 0.0}
        figures[f"{part}_s"] = share / 100.0
        return judge(1.0, iterations=10, **figures)

    assert verdict(line).kind == kind
    assert verdict(line).share == pytest.approx(line)
    assert verdict(line - 0.01).kind == "fine"
    assert verdict(line + 0.01).kind == kind


def test_the_largest_bad_share_names_the_verdict():
    assert judge(1.0, 0.30, 0.15, 0.25, iterations=10).kind == "input-bound"
    assert judge(1.0, 0.21, 0.25, 0.0, iterations=10).kind == "gc-bound"
    assert judge(1.0, 0.21, 0.0, 0.35, iterations=10).kind == "loop-bound"


def test_a_bad_share_must_cost_half_a_millisecond_per_iteration():
    """40% data wait: bad at 0.5 ms per iteration, fine just under it; the amount scales with iterations."""
    assert judge(10 * 1.25e-3, 10 * 0.5e-3, 0.0, iterations=10).kind == "input-bound"
    assert judge(10 * 1.25e-3, 10 * (0.5e-3 - EPS), 0.0, iterations=10).kind == "fine"
    assert judge(1.25e-3, 0.5e-3, 0.0, iterations=1).kind == "input-bound"
    assert judge(10 * 1.25e-3, 0.5e-3, 0.0, iterations=10).kind == "fine"  # 0.05 ms per iteration


def test_hysteresis_holds_a_bad_verdict_down_to_eight_tenths_of_its_line():
    line = 0.8 * INPUT_BOUND_SHARE / 100.0  # 16%
    assert judge(1.0, line, 0.0, iterations=10, previous="input-bound").kind == "input-bound"
    assert judge(1.0, line - EPS, 0.0, iterations=10, previous="input-bound").kind == "fine"
    assert judge(1.0, line, 0.0, iterations=10, previous="gc-bound").kind == "fine"  # only its own line
    assert judge(1.0, 0.0, 0.08, iterations=10, previous="gc-bound").kind == "gc-bound"


def test_custom_thresholds():
    strict = Thresholds(input_bound=5.0, gc_bound=1.0, loop_bound=50.0)
    assert judge(1.0, 0.05, 0.0, thresholds=strict, iterations=10).kind == "input-bound"
    assert judge(1.0, 0.0, 0.01, thresholds=strict, iterations=10).kind == "gc-bound"
    assert judge(1.0, 0.0, 0.0, 0.49, strict, iterations=10).kind == "fine"
    assert judge(1.0, 0.0, 0.0, 0.50, strict, iterations=10).kind == "loop-bound"


def test_reasons_and_gains():
    bad = judge(1.0, 0.5, 0.0, iterations=10)
    assert bad.reason == "50% of step waiting for data: free data would make this run 2.00x faster"
    gc = judge(1.0, 0.0, 0.2, iterations=10)
    assert gc.reason.endswith("GC-free training would make this run 1.25x faster")
    loop = judge(1.0, 0.0, 0.0, 0.25, iterations=10)
    assert "would make" not in loop.reason and loop.share == 25.0
    fine = judge(1.0, 0.05, 0.02, 0.03, iterations=10)
    assert fine.reason == "data wait 5%, GC 2%, other host work 3% of step" and fine.share == 5.0
    assert judge(1.0, 0.05, 0.02, 0.005, iterations=10).reason == "data wait 5%, GC 2% of step"
    assert judge(0.0, 0.0, 0.0) == judge(-1.0, 0.0, 0.0)
    assert judge(0.0, 0.0, 0.0).reason == "no time elapsed"
    assert judge(1.0, 2.0, 0.0, iterations=10).share == 100.0  # shares never pass 100


def test_cpu_load_lines():
    assert CpuLoad(90.0, 90.0, 2).load_pct == 90.0
    assert CpuLoad(90.0, 90.0, 2).contended
    assert not CpuLoad(90.0, 89.9, 2).contended  # load under 90%
    assert not CpuLoad(150.0, 49.9, 2).contended  # the workers hold less than half a core
    assert CpuLoad(150.0, 50.0, 2).contended
    assert CpuLoad(50.0, 50.0, 0).load_pct == 100.0  # no cores known: counted as one
    # known threads: contended only when the step got under 0.75 of what its compute needed
    needed = CpuLoad(134.9, 100.0, 2, step_threads=4, compute_pct=90.0)
    assert needed.needed_pct == 180.0 and needed.contended
    assert not CpuLoad(135.0, 100.0, 2, step_threads=4, compute_pct=90.0).contended
    assert CpuLoad(74.0, 150.0, 2, step_threads=1, compute_pct=100.0).contended
    assert not CpuLoad(76.0, 150.0, 2, step_threads=1, compute_pct=100.0).contended


def test_contention_wins_over_input_bound_but_not_over_gc_or_loop():
    busy = CpuLoad(100.0, 100.0, 2)
    assert judge(1.0, 0.5, 0.0, iterations=10, cpu=busy).kind == "cpu-contention"
    assert judge(1.0, 0.0, 0.3, iterations=10, cpu=busy).kind == "gc-bound"
    assert judge(1.0, 0.0, 0.0, 0.3, iterations=10, cpu=busy).kind == "loop-bound"
    assert judge(1.0, 0.0, 0.0, iterations=10, cpu=busy).share == 100.0
    # a GC or loop share over its line, smaller than the data wait: the window is input-bound, not contention
    assert judge(1.0, 0.5, 0.3, iterations=10, cpu=busy).kind == "input-bound"
    assert judge(1.0, 0.5, 0.0, 0.3, iterations=10, cpu=busy).kind == "input-bound"
    assert judge(1.0, 0.5, 0.05, 0.1, iterations=10, cpu=busy).kind == "cpu-contention"  # both under their lines


def _judged_by_the_rule(window_s, etl_s, gc_s, other_s, thresholds, iterations, previous, cpu):
    """The verdict's rule written out plainly, as the docs state it: every share over its line (lower
    for the previous window's kind) and worth fixing; contention unless GC or the loop is over its
    line; else the largest share, the first of equal ones."""
    shares = [(100.0 * etl_s / window_s, etl_s, thresholds.input_bound, "input-bound"),
              (100.0 * gc_s / window_s, gc_s, thresholds.gc_bound, "gc-bound"),
              (100.0 * other_s / window_s, other_s, thresholds.loop_bound, "loop-bound")]
    bound = [(min(100.0, share), kind) for share, seconds, line, kind in shares
             if min(100.0, share) >= line * (0.8 if kind == previous else 1.0)
             and seconds >= 0.0005 * max(1, iterations)]
    if cpu is not None and cpu.contended and all(kind == "input-bound" for _, kind in bound):
        return "cpu-contention", round(min(100.0, cpu.load_pct), 1)
    if not bound:
        return "fine", round(max(min(100.0, s[0]) for s in shares), 1)
    share, kind = max(bound, key=lambda b: b[0])
    return kind, round(share, 1)


@given(
    window_s=st.floats(0.001, 10.0),
    parts=st.tuples(*(st.floats(0.0, 1.0) for _ in range(3))),
    iterations=st.integers(1, 50),
    previous=st.sampled_from([None, "fine", "input-bound", "gc-bound", "loop-bound"]),
    load=st.none() | st.tuples(st.floats(0.0, 200.0), st.floats(0.0, 200.0)),
    lines=st.tuples(*(st.sampled_from([5.0, 10.0, 20.0, 35.0]) for _ in range(3))),
)
@settings(max_examples=400, deadline=None)
def test_the_verdict_follows_its_rule_on_any_window(window_s, parts, iterations, previous, load, lines):
    etl_s, gc_s, other_s = (window_s * p for p in parts)
    cpu = None if load is None else CpuLoad(load[0], load[1], 2)
    thresholds = Thresholds(*lines)
    got = judge(window_s, etl_s, gc_s, other_s, thresholds, iterations=iterations, previous=previous, cpu=cpu)
    assert (got.kind, got.share) == _judged_by_the_rule(window_s, etl_s, gc_s, other_s, thresholds, iterations,
                                                        previous, cpu)


# -- the device's verdict (CUDA) -------------------------------------------------------------------------
def test_device_input_bound_counts_only_the_idle_time_waiting_for_data():
    at = judge_device(1.0, 0.2, 0.2, 0.2, 0.0, iterations=10)
    assert at.kind == "input-bound" and at.share == 20.0
    assert judge_device(1.0, 0.2, 0.2 - EPS, 0.2, 0.0, iterations=10).kind == "fine"
    hidden = judge_device(1.0, 0.0, 0.0, 0.5, 0.0, iterations=10)  # a data wait hidden behind GPU work
    assert hidden.kind == "fine"
    assert hidden.reason == (
        "0% of the time the GPU waited for data; data: 50 ms per batch, hidden behind 100 ms of GPU work"
    )


def test_device_gc_and_loop_take_the_idle_time_left_after_data():
    gc = judge_device(1.0, 0.3, 0.1, 0.1, 0.1, iterations=10)
    assert gc.kind == "gc-bound" and gc.share == 10.0
    assert judge_device(1.0, 0.3, 0.25, 0.25, 0.1, iterations=10).kind == "input-bound"
    assert judge_device(1.0, 0.15, 0.1, 0.1, 0.1, iterations=10).kind == "fine"  # GC mostly hidden: 5% idle
    loop = judge_device(1.0, 0.3, 0.0, 0.0, 0.05, 0.3, iterations=10)
    assert loop.kind == "loop-bound" and loop.share == 25.0  # idle 0.3: 0.05 GC first, 0.25 loop
    assert judge_device(1.0, 0.3, 0.0, 0.0, 0.16, 0.3, iterations=10).kind == "gc-bound"  # 16% GC over 14% loop
    assert judge_device(1.0, 0.3, 0.0, 0.0, 0.11, 0.3, iterations=10).kind == "fine"  # GC 11% under loop 19%"


def test_device_host_bound_under_half_utilisation():
    assert judge_device(1.0, 0.01, 0.0, 0.0, 0.0, iterations=10, utilization=49.9).kind == "host-bound"
    assert judge_device(1.0, 0.01, 0.0, 0.0, 0.0, iterations=10, utilization=50.0).kind == "fine"
    host = judge_device(1.0, 0.01, 0.0, 0.0, 0.0, iterations=10, utilization=30.0)
    assert host.share == 70.0 and "waited between steps only 1%" in host.reason
    fine = judge_device(1.0, 0.1, 0.0, 0.0, 0.0, iterations=10)
    assert fine.reason == "0% of the time the GPU waited for data; 90 ms of GPU work per step"
    assert judge_device(0.0, 0.0, 0.0, 0.0, 0.0).reason == "no time elapsed"


def test_shares_are_of_the_window_whatever_its_length():
    """The same 2 s window judged on the host and on the device: shares are fractions of it."""
    assert judge(2.0, 0.5, 0.0, iterations=10).share == 25.0
    assert judge(2.0, 0.0, 0.3, iterations=10).share == 15.0
    assert judge(2.0, 0.0, 0.0, 0.6, iterations=10).share == 30.0
    assert judge_device(2.0, 0.5, 0.5, 0.5, 0.0, iterations=10).share == 25.0
    assert judge_device(2.0, 0.5, 0.0, 0.0, 0.3, iterations=10).share == 15.0
    assert judge_device(2.0, 0.6, 0.0, 0.0, 0.0, 0.6, iterations=10).share == 30.0
    assert judge_device(2.0, 0.04, 0.0, 0.0, 0.0, iterations=10, utilization=20.0).reason.endswith(
        "waited between steps only 2% of the time: the host cannot launch work fast enough"
    )


def test_the_devices_verdict_needs_a_material_amount_and_holds_down_to_its_hysteresis():
    """A 15 us step with 6 us of idle time waiting for data is no input pipeline to fix."""
    assert judge_device(10 * 15e-6, 10 * 6e-6, 10 * 6e-6, 10 * 6e-6, 0.0, iterations=10).kind == "fine"
    assert judge_device(10 * 2e-3, 10 * 1e-3, 10 * 1e-3, 10 * 1e-3, 0.0, iterations=10).kind == "input-bound"
    assert judge_device(10 * 2e-3, 10 * 1e-3, 0.0, 0.0, 10 * 0.49e-3, iterations=10).kind == "fine"  # GC under 0.5 ms
    held = judge_device(1.0, 0.17, 0.17, 0.17, 0.0, iterations=10, previous="input-bound")
    assert held.kind == "input-bound"
    assert judge_device(1.0, 0.17, 0.17, 0.17, 0.0, iterations=10).kind == "fine"
    assert judge_device(1.0, 0.15, 0.15, 0.15, 0.0, iterations=10, previous="input-bound").kind == "fine"
    assert judge_device(1.0, 0.17, 0.0, 0.0, 0.0, 0.17, iterations=10, previous="loop-bound").kind == "loop-bound"
    assert judge_device(1.0, 0.09, 0.0, 0.0, 0.09, iterations=10, previous="gc-bound").kind == "gc-bound"


def test_a_bottleneck_persists_from_three_windows_and_thirty_percent_of_those_judged():
    from trainperf.records._verdict import persists

    assert persists(3, 10) and persists(3, 3) and persists(4, 13)
    assert not persists(2, 2)  # too few windows, however large a share
    assert not persists(3, 11)  # 27% of the windows
    assert not persists(0, 0)


def test_cpu_load_in_percent_of_all_cores_and_what_the_step_needed():
    from trainperf.records._verdict import CpuLoad

    load = CpuLoad(process_pct=150.0, workers_pct=50.0, cores=4, step_threads=8, compute_pct=60.0)
    assert load.load_pct == 50.0
    assert load.needed_pct == 60.0 * 4  # no more cores than the process may run on
    assert CpuLoad(100.0, 100.0, cores=0).load_pct == 200.0  # no core known: one
    assert CpuLoad(100.0, 100.0, cores=2, step_threads=1, compute_pct=80.0).needed_pct == 80.0
    assert CpuLoad(100.0, 100.0, cores=2, compute_pct=80.0).needed_pct is None
    assert CpuLoad(100.0, 100.0, cores=2, step_threads=2).needed_pct is None


@pytest.mark.parametrize(("process", "workers", "threads", "compute", "contended"), [
    (130.0, 50.0, None, None, True),     # 90% of 2 cores, workers half a core: contended
    (130.0, 49.9, None, None, False),    # workers under half a core
    (129.0, 50.0, None, None, False),    # 89.5% of the cores
    (110.0, 70.0, 2, 80.0, True),        # the step got 110% where it needed 160%: starved
    (120.0, 60.0, 2, 80.0, False),       # 120% of 160% needed is 0.75: not starved
    (119.0, 61.0, 2, 80.0, True),
])
def test_cpu_contention_at_and_around_its_lines(process, workers, threads, compute, contended):
    from trainperf.records._verdict import CpuLoad

    assert CpuLoad(process, workers, cores=2, step_threads=threads, compute_pct=compute).contended is contended


def test_judge_with_no_time_and_shares_capped_at_the_whole_window():
    assert judge(0.0, 1.0, 0.0) == Verdict("fine", 0.0, "no time elapsed")
    assert judge(-1.0, 0.0, 0.0).kind == "fine"
    over = judge(0.010, 0.020, 0.0)  # more data wait than window (clock skew between readings)
    assert over.kind == "input-bound" and over.share == 100.0


def test_a_fine_window_names_its_largest_share_and_other_host_work_from_one_percent():
    fine = judge(1.0, 0.10, 0.02, 0.15)
    assert fine == Verdict("fine", 15.0, "data wait 10%, GC 2%, other host work 15% of step")
    assert judge(1.0, 0.10, 0.02, 0.0099).reason == "data wait 10%, GC 2% of step"
    assert judge(1.0, 0.10, 0.02, 0.010).reason == "data wait 10%, GC 2%, other host work 1% of step"
    assert judge(1.0, 0.05, 0.08, 0.0).share == 8.0


def test_the_material_amount_grows_with_the_windows_iterations():
    # 30% data wait of a 10 ms window: 3 ms, material for up to 6 iterations (0.5 ms each)
    assert judge(0.010, 0.003, 0.0, iterations=6).kind == "input-bound"
    assert judge(0.010, 0.003, 0.0, iterations=7).kind == "fine"
    assert judge(0.010, 0.003, 0.0, iterations=0).kind == "input-bound"  # counted as one


def test_bad_verdicts_say_what_free_data_or_gc_free_training_would_gain():
    data = judge(1.0, 0.5, 0.0)
    assert data == Verdict("input-bound", 50.0,
                           "50% of step waiting for data: free data would make this run 2.00x faster")
    gc = judge(1.0, 0.0, 0.2)
    assert gc.reason == "20% of step in garbage collection: GC-free training would make this run 1.25x faster"
    loop = judge(1.0, 0.0, 0.0, 0.25)
    assert loop.reason == "25% of step in the loop's own host work, outside the loader and the step"


def test_cpu_contention_gives_the_load_as_its_share_capped_at_the_whole():
    from trainperf.records._verdict import CpuLoad

    busy = CpuLoad(process_pct=150.0, workers_pct=60.0, cores=2)
    assert judge(1.0, 0.3, 0.0, cpu=busy) == Verdict("cpu-contention", 100.0, busy.reason())
    assert judge(1.0, 0.3, 0.0, cpu=CpuLoad(130.0, 52.34, cores=2)).share == 91.2
    assert judge(1.0, 0.0, 0.2, cpu=busy).kind == "gc-bound"  # another bad share is not the CPU's


def test_device_idle_goes_to_data_then_gc_then_the_loops_own_work():
    from trainperf.records._verdict import judge_device

    # 100 ms of device time, 40 ms idle: 10 ms of it free data would remove, 25 ms of GC, 30 ms other
    v = judge_device(0.100, 0.040, 0.010, etl_s=0.012, gc_s=0.025, other_s=0.030)
    assert v == Verdict("gc-bound", 25.0,
                        "25% of the time the GPU waited for garbage collection: "
                        "GC-free training would make this run 1.33x faster")
    # 5 ms of GC: the loop's work gets the 25 ms left of the idle time
    v = judge_device(0.100, 0.040, 0.010, etl_s=0.012, gc_s=0.005, other_s=0.030)
    assert v == Verdict("loop-bound", 25.0,
                        "25% of the time the GPU waited for the loop's own host work between steps")
    # the loop's work is capped by its own host time
    assert judge_device(0.100, 0.040, 0.010, etl_s=0.012, gc_s=0.005, other_s=0.015).kind == "fine"


def test_device_input_bound_at_its_line_and_not_below():
    from trainperf.records._verdict import judge_device

    at = judge_device(0.100, 0.020, 0.020, etl_s=0.020, gc_s=0.0)
    assert at == Verdict("input-bound", 20.0,
                         "20% of the time the GPU waited for data: free data would make this run 1.25x faster")
    assert judge_device(0.100, 0.0199, 0.0199, etl_s=0.020, gc_s=0.0).kind == "fine"
    assert judge_device(0.100, 0.0199, 0.0199, etl_s=0.020, gc_s=0.0, previous="input-bound").kind == "input-bound"
    # worth fixing: at least 0.5 ms of idle time per iteration
    assert judge_device(0.100, 0.020, 0.020, etl_s=0.020, gc_s=0.0, iterations=40).kind == "input-bound"
    assert judge_device(0.100, 0.020, 0.020, etl_s=0.020, gc_s=0.0, iterations=41).kind == "fine"


def test_device_host_bound_and_fine_words():
    from trainperf.records._verdict import HOST_BOUND_UTILIZATION, judge_device

    low = HOST_BOUND_UTILIZATION - 10.0
    v = judge_device(0.100, 0.002, 0.0, etl_s=0.0, gc_s=0.0, utilization=low)
    assert v.kind == "host-bound" and v.share == round(100.0 - low, 1)
    assert v.reason.endswith("yet it waited between steps only 2% of the time: the host cannot launch work fast enough")
    assert judge_device(0.100, 0.002, 0.0, etl_s=0.0, gc_s=0.0, utilization=HOST_BOUND_UTILIZATION).kind == "fine"
    hidden = judge_device(0.100, 0.010, 0.001, etl_s=0.030, gc_s=0.0, iterations=10)
    assert hidden == Verdict(
        "fine", 1.0, "1% of the time the GPU waited for data; data: 3 ms per batch, hidden behind 9 ms of GPU work")
    plain = judge_device(0.100, 0.010, 0.0, etl_s=0.0, gc_s=0.0, iterations=10)
    assert plain.reason == "0% of the time the GPU waited for data; 9 ms of GPU work per step"
    assert judge_device(0.0, 0.0, 0.0, etl_s=0.0, gc_s=0.0) == Verdict("fine", 0.0, "no time elapsed")


def test_shares_are_exact_tenths_of_a_percent_not_whole_percents():
    # 100 ms of 300: 33.33%, kept to one decimal (not floored to 33, not rounded to 33.33)
    assert judge(0.300, 0.100, 0.0).share == 33.3
    assert judge(0.300, 0.010, 0.029).share == 9.7  # fine: GC's 9.67% is the largest
    assert judge(0.300, 0.010, 0.0, 0.0590).share == 19.7  # fine: other host work's 19.67%
    assert judge(0.300, 0.0, 0.0316).share == 10.5  # GC-bound at 10.53%
    assert judge(0.300, 0.0, 0.0, 0.0616).share == 20.5  # loop-bound at 20.53%


def test_every_share_is_capped_at_the_whole_window():
    assert judge(0.010, 0.0, 0.020) == Verdict("gc-bound", 100.0, "100% of step in garbage collection")
    assert judge(0.010, 0.0, 0.0, 0.020).share == 100.0
    assert judge(0.010, 0.0, 0.0, 0.020).reason.startswith("100% of step in the loop's own host work")


def test_judge_defaults_no_other_host_time_and_one_iteration():
    assert judge(1.0, 0.0, 0.0) == Verdict("fine", 0.0, "data wait 0%, GC 0% of step")
    # 0.6 ms of a 2 ms window: material for the one iteration it holds by default
    assert judge(0.002, 0.0006, 0.0).kind == "input-bound"


def test_material_amount_is_half_a_millisecond_exactly():
    assert judge(0.001, 0.0005, 0.0).kind == "input-bound"
    assert judge(0.001, 0.0004996, 0.0).kind == "fine"
    assert judge_device(0.001, 0.0005, 0.0005, etl_s=0.0005, gc_s=0.0).kind == "input-bound"
    assert judge_device(0.001, 0.0004996, 0.0004996, etl_s=0.0005, gc_s=0.0).kind == "fine"
    assert judge_device(0.001, 0.0006, 0.0006, etl_s=0.0006, gc_s=0.0, iterations=0).kind == "input-bound"


def test_verdict_parts_are_frozen():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        CpuLoad(100.0, 50.0, cores=2).cores = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Thresholds().input_bound = 5.0  # type: ignore[misc]


def test_needed_cpu_counts_at_least_one_core():
    assert CpuLoad(100.0, 50.0, cores=0, step_threads=4, compute_pct=50.0).needed_pct == 50.0
    assert CpuLoad(100.0, 50.0, cores=0).load_pct == 150.0
    assert CpuLoad(100.0, 50.0, cores=3, step_threads=4, compute_pct=50.0).needed_pct == 150.0


def test_device_shares_are_exact_tenths_of_a_percent():
    # 300 ms of device time, 100 ms idle: 70 ms of it waiting for data (23.33%)
    v = judge_device(0.300, 0.100, 0.070, etl_s=0.070, gc_s=0.020, other_s=0.005)
    assert v == Verdict("input-bound", 23.3,
                        "23% of the time the GPU waited for data: free data would make this run 1.30x faster")
    # GC takes 29 ms of the idle time (9.67%): fine, and GC's share is the window's largest
    assert judge_device(0.300, 0.050, 0.010, etl_s=0.010, gc_s=0.029).share == 9.7
    # the loop's own work takes 59 ms of it (19.67%)
    assert judge_device(0.300, 0.070, 0.0, etl_s=0.0, gc_s=0.0, other_s=0.059).share == 19.7
    assert judge_device(0.300, 0.040, 0.0, etl_s=0.0, gc_s=0.0316).share == 10.5  # GC-bound at 10.53%
    assert judge_device(0.300, 0.070, 0.0, etl_s=0.0, gc_s=0.0, other_s=0.0616).share == 20.5  # loop-bound


def test_device_shares_are_capped_at_the_whole_window():
    assert judge_device(0.010, 0.020, 0.020, etl_s=0.020, gc_s=0.0).share == 100.0
    assert judge_device(0.010, 0.020, 0.0, etl_s=0.0, gc_s=0.020).share == 100.0
    assert judge_device(0.010, 0.020, 0.0, etl_s=0.0, gc_s=0.0, other_s=0.020).share == 100.0
    starved = judge_device(0.010, 0.020, 0.0, etl_s=0.0, gc_s=0.0, utilization=40.0)
    assert starved == Verdict("host-bound", 60.0, "60% of the time the GPU ran no kernel, yet it waited between "
                              "steps only 100% of the time: the host cannot launch work fast enough")


def test_device_ties_go_to_data_then_gc():
    # 25% waiting for data and 25% for GC: data first
    assert judge_device(1.0, 0.5, 0.25, etl_s=0.25, gc_s=0.25).kind == "input-bound"
    # 12.5% for GC and 12.5% for the loop: GC first (both over their lines)
    assert judge_device(1.0, 0.25, 0.0, etl_s=0.0, gc_s=0.125, other_s=0.125).kind == "gc-bound"


def test_device_lines_are_reached_at_equality():
    assert judge_device(1.25, 0.125, 0.0, etl_s=0.0, gc_s=0.125).kind == "gc-bound"  # exactly 10%
    assert judge_device(1.25, 0.25, 0.0, etl_s=0.0, gc_s=0.0, other_s=0.25).kind == "loop-bound"  # exactly 20%
    assert judge_device(1.25, 0.12, 0.0, etl_s=0.0, gc_s=0.12).kind == "fine"
    assert judge_device(1.25, 0.24, 0.0, etl_s=0.0, gc_s=0.0, other_s=0.24).kind == "fine"


def test_device_gc_and_loop_hidden_behind_device_work_make_no_window_bad():
    # all the idle time was waiting for data (5%): 300 ms of GC and loop work ran while the GPU was busy
    v = judge_device(1.0, 0.05, 0.05, etl_s=0.05, gc_s=0.3, other_s=0.3)
    assert v.kind == "fine" and v.share == 5.0


def test_device_negative_window_and_defaults():
    assert judge_device(-1.0, 0.0, 0.0, etl_s=0.0, gc_s=0.0) == Verdict("fine", 0.0, "no time elapsed")
    assert judge_device(1.0, 0.0, 0.0, etl_s=0.0, gc_s=0.0) == Verdict(
        "fine", 0.0, "0% of the time the GPU waited for data; 1000 ms of GPU work per step")
    assert judge_device(0.002, 0.0006, 0.0006, etl_s=0.0006, gc_s=0.0).kind == "input-bound"


def test_device_utilisation_at_or_over_half_is_not_host_bound():
    for utilization in (50.0, 60.0, 100.0):
        assert judge_device(0.100, 0.002, 0.0, etl_s=0.0, gc_s=0.0, utilization=utilization).kind == "fine"
    assert judge_device(0.100, 0.002, 0.0, etl_s=0.0, gc_s=0.0, utilization=49.9).share == 50.1


def test_zero_iterations_count_as_one_for_the_material_amount():
    assert judge(0.001, 0.0004, 0.0, iterations=0).kind == "fine"  # 0.4 ms is not material for one iteration
    assert judge_device(0.001, 0.0004, 0.0004, etl_s=0.0004, gc_s=0.0, iterations=0).kind == "fine"
    fine = judge_device(0.010, 0.0, 0.0, etl_s=0.0, gc_s=0.0, iterations=0)
    assert fine.reason == "0% of the time the GPU waited for data; 10 ms of GPU work per step"


def test_device_data_below_another_share_is_not_input_bound():
    # 25% waiting for data, 30% for GC: GC names it
    assert judge_device(1.0, 0.55, 0.25, etl_s=0.25, gc_s=0.30).kind == "gc-bound"


def test_device_gc_and_loop_need_half_a_millisecond_of_idle_time_per_iteration():
    assert judge_device(0.001, 0.0005, 0.0, etl_s=0.0, gc_s=0.0005).kind == "gc-bound"  # exactly material
    assert judge_device(0.001, 0.0003, 0.0, etl_s=0.0, gc_s=0.0, other_s=0.0003).kind == "fine"  # 30% but 0.3 ms
    assert judge_device(0.001, 0.0005, 0.0, etl_s=0.0, gc_s=0.0, other_s=0.0005).kind == "loop-bound"


def test_device_words_round_their_percents_and_milliseconds():
    def idle_words(idle_s: float) -> str:
        return judge_device(0.100, idle_s, 0.0, etl_s=0.0, gc_s=0.0, utilization=40.0).reason

    assert "waited between steps only 2% of the time" in idle_words(0.00249)
    assert "waited between steps only 3% of the time" in idle_words(0.00251)
    assert judge_device(0.100, 0.002, 0.0, etl_s=0.0, gc_s=0.0, utilization=40.37).share == 59.6

    def hidden_words(etl_s: float) -> str:  # ten iterations
        return judge_device(0.100, 0.0, 0.0, etl_s=etl_s, gc_s=0.0, iterations=10).reason

    assert hidden_words(0.024985).endswith("data: 2 ms per batch, hidden behind 10 ms of GPU work")
    assert hidden_words(0.025015).endswith("data: 3 ms per batch, hidden behind 10 ms of GPU work")
    assert hidden_words(0.0251).endswith("data: 3 ms per batch, hidden behind 10 ms of GPU work")


def test_device_words_give_milliseconds_per_step_rounded():
    six = judge_device(0.100, 0.0, 0.0, etl_s=0.0, gc_s=0.0, iterations=6)  # 16.7 ms each
    assert six.reason == "0% of the time the GPU waited for data; 17 ms of GPU work per step"


@pytest.mark.parametrize("part", ["etl", "gc", "other"])
def test_each_share_counts_from_exactly_the_material_amount_per_iteration(part):
    material_s = MATERIAL_MS / 1000.0 * 4  # four iterations
    seconds = {"etl": 0.0, "gc": 0.0, "other": 0.0}
    seconds[part] = material_s
    kind = {"etl": "input-bound", "gc": "gc-bound", "other": "loop-bound"}[part]
    at = judge(0.004, seconds["etl"], seconds["gc"], seconds["other"], iterations=4)  # 50% of the window
    assert at.kind == kind
    seconds[part] = material_s * (1 - 1e-9)
    below = judge(0.004, seconds["etl"], seconds["gc"], seconds["other"], iterations=4)
    assert below.kind == "fine"
