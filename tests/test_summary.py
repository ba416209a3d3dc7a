"""The end-of-run summary with plain numbers: shares that add up, and which bottlenecks it lists."""

from __future__ import annotations

import pytest

from trainperf.records._summary import FIXES_PER_BOTTLENECK, build_summary
from trainperf.records._verdict import Thresholds


def fixes(kind):
    return [f"{kind} fix {i}" for i in range(5)]


def summary(**kw):
    base = dict(wall_s=10.0, etl_s=0.0, gc_s=0.0, other_s=0.0, iterations=1000, samples=8000,
                verdict_counts={}, fixes=fixes)
    return build_summary(**{**base, **kw})


def test_the_four_shares_add_up_to_the_run():
    s = summary(etl_s=2.0, gc_s=1.0, other_s=3.0)
    assert s.compute_s == pytest.approx(4.0)
    assert (s.etl_pct, s.gc_pct, s.other_pct, s.compute_pct) == pytest.approx((20.0, 10.0, 30.0, 40.0))
    assert s.samples_per_sec == pytest.approx(800.0)
    text = str(s)
    assert "data wait    2.000 s   20.0%" in text and "compute      4.000 s   40.0%" in text
    assert "other        3.000 s   30.0%" in text and "GC           1.000 s   10.0%" in text
    assert "1000 iterations, in 10.00 s (800.0 samples/sec)" in text


def test_a_bottleneck_of_the_run_needs_half_its_line_and_half_a_millisecond_per_iteration():
    at = summary(etl_s=1.0)  # 10% of the run, 1 ms per iteration: half the 20% line
    assert [b.kind for b in at.bottlenecks] == ["input-bound"]
    assert at.bottlenecks[0].share == pytest.approx(10.0)
    assert summary(etl_s=0.999).bottlenecks == ()
    tiny = summary(wall_s=0.004, etl_s=0.002, iterations=10)  # 50% of the run but 0.2 ms per iteration
    assert tiny.bottlenecks == ()
    assert [b.kind for b in summary(wall_s=0.01, etl_s=0.005, iterations=10).bottlenecks] == ["input-bound"]
    assert [b.kind for b in summary(gc_s=0.5).bottlenecks] == ["gc-bound"]
    assert summary(gc_s=0.49).bottlenecks == ()
    assert [b.kind for b in summary(other_s=1.0).bottlenecks] == ["loop-bound"]


def test_a_verdict_that_persisted_is_a_bottleneck_of_the_run_a_one_off_is_not():
    persisted = summary(verdict_counts={"fine": 7, "input-bound": 3})
    assert [b.kind for b in persisted.bottlenecks] == ["input-bound"]
    assert persisted.bottlenecks[0].windows == 3
    assert summary(verdict_counts={"fine": 8, "input-bound": 2}).bottlenecks == ()  # two windows only
    assert summary(verdict_counts={"fine": 8, "input-bound": 3}).bottlenecks == ()  # 27% of the windows
    contention = summary(verdict_counts={"fine": 2, "cpu-contention": 6})
    assert [(b.kind, b.share) for b in contention.bottlenecks] == [("cpu-contention", 75.0)]
    assert [b.kind for b in summary(verdict_counts={"host-bound": 4}).bottlenecks] == ["host-bound"]


def test_bottlenecks_come_largest_first_with_their_fixes_once():
    s = summary(etl_s=1.5, gc_s=3.0, other_s=2.5)
    assert [b.kind for b in s.bottlenecks] == ["gc-bound", "loop-bound", "input-bound"]
    assert all(len(b.fixes) == FIXES_PER_BOTTLENECK for b in s.bottlenecks)
    assert s.recommendations[:3] == ("gc-bound fix 0", "gc-bound fix 1", "gc-bound fix 2")
    assert len(s.recommendations) == len(set(s.recommendations)) == 9
    assert ("gc-bound over the run: 30% of the time in garbage collection, above the 5% line for a whole run "
            "(half the 10% that makes a window gc-bound); fixes:") in str(s)  # no window judged: none to count


def test_a_bottleneck_of_the_run_says_why_it_is_one_in_words():
    """Listed from the run's share although every window was fine: the text says so, not "0 window(s)"."""
    quiet = str(summary(etl_s=1.5, verdict_counts={"fine": 11}))
    assert ("input-bound over the run: 15% of the time waiting for data, above the 10% line for a whole run "
            "(half the 20% that makes a window input-bound), though no single window passed it; fixes:") in quiet
    assert "window(s)" not in quiet
    some = str(summary(etl_s=1.5, verdict_counts={"fine": 9, "input-bound": 2}))
    assert "though only 2 of 11 windows passed it; fixes:" in some
    persisted = str(summary(verdict_counts={"fine": 7, "input-bound": 3}))
    assert "input-bound: judged so in 3 of 10 windows (0% of the time waiting for data); fixes:" in persisted
    contention = str(summary(verdict_counts={"fine": 2, "cpu-contention": 6}))
    assert "cpu-contention: judged so in 6 of 8 windows; fixes:" in contention


def test_an_mfu_above_100_percent_is_flagged_in_the_summary():
    over = str(summary(flops=1.105e12, flops_wall_s=1.0, peak_flop_s=1e12))
    assert ("MFU 110.5% (above 100%: the peak FLOP/s is likely wrong (too low for the device) or the FLOP count "
            "per step too high)") in over
    assert "above 100%" not in str(summary(flops=0.5e12, flops_wall_s=1.0, peak_flop_s=1e12))


def test_thresholds_move_the_lines():
    strict = Thresholds(input_bound=5.0, gc_bound=1.0, loop_bound=50.0)
    assert [b.kind for b in summary(etl_s=0.5, thresholds=strict).bottlenecks] == ["input-bound"]
    assert summary(other_s=2.4, thresholds=strict).bottlenecks == ()


def test_device_runs_judge_data_and_gc_by_the_devices_idle_time():
    s = summary(etl_s=3.0, data_free_s=0.0, device_wall_s=10.0, device_idle_s=0.5)
    assert s.bottlenecks == ()
    assert s.speedup_if_data_free == pytest.approx(1.0)
    assert "hidden behind" in s.gain_words()
    waiting = summary(etl_s=3.0, data_free_s=2.0, device_wall_s=10.0, device_idle_s=2.5)
    assert [b.kind for b in waiting.bottlenecks] == ["input-bound"]
    assert waiting.gain_words() == (
        "the GPU waited for data 20% of the time: free data would make this run 1.25x faster"
    )


def test_empty_and_all_data_runs():
    assert str(summary(wall_s=0.0, iterations=0)).startswith("trainperf summary: no iterations")
    assert summary(wall_s=0.0).bottlenecks == ()
    assert summary(etl_s=10.0).gain_words() == "the run did nothing but wait for data"
    assert summary(etl_s=2.5).gain_words() == (
        "data wait took 25% of the time: free data would make this run 1.33x faster"
    )
    assert "no bottleneck found" in str(summary())


def test_the_devices_words_and_lines():
    hidden = summary(etl_s=3.0, data_free_s=0.0, device_wall_s=10.0, device_idle_s=0.5)
    assert hidden.gain_words() == "data: 3 ms per batch, hidden behind 10 ms of GPU work"  # 9.5 s over 1000
    assert summary(device_wall_s=20.0, device_idle_s=0.0).gain_words() == "no data wait; 20 ms of GPU work per step"
    just = summary(etl_s=1.0, data_free_s=0.1, device_wall_s=10.0, device_idle_s=0.1)  # 1.01x: said as a gain
    assert just.gain_words().startswith("the GPU waited for data 1% of the time")
    under = summary(etl_s=1.0, data_free_s=0.09, device_wall_s=10.0, device_idle_s=0.1)
    assert under.gain_words().startswith("data: 1 ms per batch")
    text = str(summary(device_wall_s=8.0, device_idle_s=2.0))
    assert "GPU idle between steps    2.000 s   25.0%" in text
    assert "GPU idle between steps    0.000 s    0.0%" in str(summary(device_wall_s=0.0))
    assert "GPU idle" not in str(summary())


def test_the_texts_lines():
    text = str(summary(gc_s=0.2, verdict_counts={"fine": 5, "gc-bound": 2, "input-bound": 1}, total_iterations=1100))
    assert "1000 of 1100 iterations, warm-up left out, in 10.00 s" in text
    assert "GC-free training would make this run 1.02x faster" in text
    assert "verdicts over 8 windows: fine 5, gc-bound 2, input-bound 1" in text
    assert "GC-free" not in str(summary(gc_s=0.09))  # 1.009x: not said
    assert "  other  " not in str(summary())  # no other time: no line
    assert "(loop's own host work)" in str(summary(other_s=0.1))
    assert "samples/sec" not in str(summary(samples=0))
    assert summary(samples=0).samples_per_sec is None and summary(wall_s=0.0).samples_per_sec is None
    assert "1000 iterations, in" in str(summary(total_iterations=1000))


def test_the_shares_of_an_empty_run_and_the_dict():
    empty = summary(wall_s=0.0, etl_s=0.0)
    assert (empty.etl_pct, empty.compute_pct, empty.gc_pct, empty.other_pct) == (0.0, 0.0, 0.0, 0.0)
    d = summary(etl_s=2.0, gc_s=1.0, other_s=3.0, verdict_counts={"input-bound": 4}).to_dict()
    assert (d["etl_pct"], d["gc_pct"], d["other_pct"], d["compute_pct"]) == pytest.approx((20.0, 10.0, 30.0, 40.0))
    assert d["bottlenecks"][0]["line"] == 10.0  # half the 20% a window needs
    assert d["bottlenecks"][0]["kind"] == "loop-bound" and d["speedup_if_data_free"] == pytest.approx(1.25)
    assert d["speedup_if_gc_free"] == pytest.approx(10.0 / 9.0) and d["samples_per_sec"] == pytest.approx(800.0)
    assert summary(etl_s=11.0).compute_s == 0.0  # never negative


def test_summary_parts_are_frozen_with_empty_defaults():
    import dataclasses

    from trainperf.records._summary import Bottleneck, RunSummary

    s = RunSummary(wall_s=1.0, etl_s=0.0, gc_s=0.0, compute_s=1.0, iterations=1, samples=0)
    assert (s.other_s, s.total_iterations, s.data_free_s, s.gc_free_s, s.device_idle_s) == (0.0, 0, 0.0, 0.0, 0.0)
    assert (s.device_wall_s, s.bottlenecks, s.recommendations, s.verdict_counts) == (None, (), (), {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.wall_s = 2.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Bottleneck("gc-bound", 1.0, 1, ()).share = 2.0  # type: ignore[misc]


def test_shares_are_exact_fractions_of_the_run():
    s = summary(wall_s=3.0, etl_s=1.0, gc_s=0.25, other_s=0.5, samples=10)
    assert s.etl_pct == 100.0 / 3.0 and s.gc_pct == 25.0 / 3.0 and s.other_pct == 50.0 / 3.0
    assert s.compute_pct == pytest.approx(125.0 / 3.0)
    assert s.samples_per_sec == 10.0 / 3.0
    assert (s.bottlenecks[0].kind, s.bottlenecks[0].share) == ("input-bound", 100.0 / 3.0)


def test_build_summary_without_other_time():
    s = build_summary(wall_s=10.0, etl_s=1.0, gc_s=0.0, iterations=10, samples=0, verdict_counts={}, fixes=fixes)
    assert s.other_s == 0.0 and s.compute_s == 9.0 and s.samples_per_sec is None


def test_the_data_words_round_their_share():
    assert summary(etl_s=1.245).gain_words().startswith("data wait took 12% of the time")
    assert summary(etl_s=1.255).gain_words().startswith("data wait took 13% of the time")
    assert summary(etl_s=1.26).gain_words() == (
        "data wait took 13% of the time: free data would make this run 1.14x faster")


def test_the_devices_words_per_batch_and_step():
    def words(**kw):
        return summary(**{"wall_s": 1.0, "device_wall_s": 1.0, "iterations": 10, "data_free_s": 0.0, **kw}).gain_words()

    # 2.4985 ms and 2.5015 ms of data per batch, hidden behind 75 ms of GPU work per step
    assert words(etl_s=0.024985, device_idle_s=0.25) == "data: 2 ms per batch, hidden behind 75 ms of GPU work"
    assert words(etl_s=0.025015, device_idle_s=0.25) == "data: 3 ms per batch, hidden behind 75 ms of GPU work"
    assert words(etl_s=0.0251, device_idle_s=0.25) == "data: 3 ms per batch, hidden behind 75 ms of GPU work"
    assert words(etl_s=0.0, device_idle_s=0.25) == "no data wait; 75 ms of GPU work per step"
    none = summary(wall_s=1.0, device_wall_s=1.0, iterations=0, etl_s=0.0, data_free_s=0.0, device_idle_s=0.25)
    assert none.gain_words() == "no data wait; 750 ms of GPU work per step"  # zero iterations count as one
    # the GPU waited 12.45% / 12.55% of the time for data
    assert words(data_free_s=0.1245, etl_s=0.2).startswith("the GPU waited for data 12% of the time")
    assert words(data_free_s=0.1255, etl_s=0.2).startswith("the GPU waited for data 13% of the time")


def test_a_gain_of_exactly_one_percent_is_said():
    s = summary(wall_s=101.0, etl_s=0.0, gc_s=1.0, iterations=10)
    assert s.speedup_if_gc_free == 1.01
    assert "GC-free training would make this run 1.01x faster" in str(s)
    gpu = summary(wall_s=101.0, device_wall_s=101.0, data_free_s=1.0, etl_s=1.0, iterations=10)
    assert gpu.gain_words().startswith("the GPU waited for data 1% of the time: free data would make this run 1.01x")


def test_the_text_says_the_warm_up_left_out():
    assert "20 of 40 iterations, warm-up left out" in str(summary(iterations=20, total_iterations=40))
    assert "20 of 21 iterations, warm-up left out" in str(summary(iterations=20, total_iterations=21))
    assert "trainperf summary: 20 iterations, in" in str(summary(iterations=20, total_iterations=20))


def test_the_text_gives_the_gpu_idle_share():
    text = str(summary(wall_s=1.0, device_wall_s=3.0, device_idle_s=1.0, iterations=10))
    assert "GPU idle between steps    1.000 s   33.3%" in text


def test_verdict_counts_are_listed_most_frequent_first():
    text = str(summary(verdict_counts={"fine": 2, "input-bound": 5, "gc-bound": 3}))
    assert "verdicts over 10 windows: input-bound 5, gc-bound 3, fine 2" in text


def test_a_run_with_no_time_lists_no_bottleneck_even_with_bad_verdicts():
    assert summary(wall_s=0.0, verdict_counts={"input-bound": 5}).bottlenecks == ()
    short = summary(wall_s=0.5, etl_s=0.25, iterations=10)
    assert [b.kind for b in short.bottlenecks] == ["input-bound"]


def test_contention_and_host_bound_need_their_windows_to_persist():
    # two of four windows: half of them, but two windows do not persist
    assert summary(verdict_counts={"cpu-contention": 2, "fine": 2}).bottlenecks == ()
    assert summary(verdict_counts={"host-bound": 2, "fine": 2}).bottlenecks == ()
    listed = summary(verdict_counts={"host-bound": 3, "fine": 6}).bottlenecks
    assert [(b.kind, b.share, b.windows) for b in listed] == [("host-bound", 100.0 / 3.0, 3)]


def test_half_a_line_is_not_rounded_down():
    # a 25% line: its half is 12.5%, and 12.25% is under it
    assert summary(etl_s=1.225, thresholds=Thresholds(input_bound=25.0)).bottlenecks == ()
    assert summary(etl_s=1.25, thresholds=Thresholds(input_bound=25.0)).bottlenecks[0].kind == "input-bound"


def test_the_material_amount_of_the_run_is_half_a_millisecond_per_iteration():
    assert summary(wall_s=0.01, etl_s=0.0049, iterations=10).bottlenecks == ()
    assert summary(wall_s=0.01, etl_s=0.005, iterations=10).bottlenecks[0].share == 50.0
    assert summary(wall_s=0.01, etl_s=0.0004, iterations=0).bottlenecks == ()  # counted as one iteration
    assert summary(wall_s=0.001, etl_s=0.0005, iterations=1).bottlenecks[0].kind == "input-bound"


def test_runs_shorter_than_a_second_have_their_shares_and_rates():
    s = summary(wall_s=0.5, etl_s=0.25, gc_s=0.0625, other_s=0.125, samples=40, iterations=10,
                device_wall_s=0.5, device_idle_s=0.125)
    assert (s.etl_pct, s.gc_pct, s.other_pct, s.compute_pct) == (50.0, 12.5, 25.0, 12.5)
    assert s.samples_per_sec == 80.0
    assert "GPU idle between steps    0.125 s   25.0%" in str(s)


def test_an_empty_run_has_zero_shares():
    s = summary(wall_s=0.0, iterations=0, samples=0)
    assert (s.etl_pct, s.gc_pct, s.other_pct, s.compute_pct, s.samples_per_sec) == (0.0, 0.0, 0.0, 0.0, None)
    idle = summary(wall_s=1.0, device_wall_s=0.0, device_idle_s=0.0, iterations=10)
    assert "GPU idle between steps    0.000 s    0.0%" in str(idle)


def test_a_device_that_did_nothing_has_no_data_share_whatever_the_line():
    s = summary(wall_s=1.0, device_wall_s=0.0, data_free_s=0.5, etl_s=0.5, iterations=10,
                thresholds=Thresholds(input_bound=1.0, gc_bound=1.0, loop_bound=1.0))
    assert [b.kind for b in s.bottlenecks] == []


def test_the_runs_material_amount_exactly_and_for_zero_iterations():
    assert summary(wall_s=0.001, etl_s=0.0005, iterations=1).bottlenecks[0].kind == "input-bound"
    assert summary(wall_s=0.001, etl_s=0.0004996, iterations=1).bottlenecks == ()
    assert summary(wall_s=0.001, etl_s=0.0004, iterations=0).bottlenecks == ()  # 40%, but 0.4 ms for one
