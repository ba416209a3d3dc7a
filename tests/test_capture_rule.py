"""The capture rule on plain numbers: when a window triggers a capture, and the caps."""

from __future__ import annotations

import math

import pytest

from trainperf import CaptureRule
from trainperf.profile._rule import Trigger


def feed(trigger: Trigger, p95s, *, p50s=None, kinds=None, t0=0.0, dt=1.0):
    """Each window's reason (or None), windows ``dt`` seconds apart."""
    out = []
    for k, p95 in enumerate(p95s):
        p50 = p50s[k] if p50s is not None else p95
        kind = kinds[k] if kinds is not None else "fine"
        firing = trigger.see(p50, p95, kind, t0 + k * dt)
        out.append(None if firing is None else firing.reason)
    return out


def at_once(**kwargs) -> CaptureRule:
    """A rule without a baseline capture that takes an anomaly at its first window (the thresholds'
    tests)."""
    return CaptureRule(**{"min_interval_s": 0.0, "baseline": False, "confirm": 1, **kwargs})


def test_a_window_whose_p95_passes_k_times_the_running_median_triggers_once_the_history_is_known():
    trigger = Trigger(at_once(min_history=3))
    reasons = feed(trigger, [10.0, 10.0, 10.0, 31.0])
    assert reasons[:3] == [None, None, None]
    assert reasons[3] == "p95 31.00 ms > 3 x the run's median 10.00 ms"


def test_before_the_history_is_known_a_slow_window_does_not_trigger():
    trigger = Trigger(at_once(min_history=3, on_verdict=False))
    assert feed(trigger, [10.0, 10.0, 100.0]) == [None, None, None]


def test_exactly_k_times_the_median_does_not_trigger_and_just_above_does():
    trigger = Trigger(at_once(slowdown=2.0, min_history=1))
    assert feed(trigger, [10.0, 20.0]) == [None, None]  # median 10 then; 20 is not above 2 x 10
    trigger = Trigger(at_once(slowdown=2.0, min_history=1))
    assert feed(trigger, [10.0, 20.001])[1] is not None


def test_a_slowdown_of_less_than_min_excess_ms_does_not_trigger():
    trigger = Trigger(at_once(min_history=1, on_verdict=False))
    assert feed(trigger, [0.001, 0.9])[1] is None  # 900x, but 0.899 ms: jitter of a very short step
    trigger = Trigger(at_once(min_history=1, on_verdict=False))
    assert feed(trigger, [0.25, 1.25])[1] is not None  # exactly 1 ms above triggers
    trigger = Trigger(at_once(min_history=1, min_excess_ms=0.0, on_verdict=False))
    assert feed(trigger, [0.001, 0.004])[1] is not None


def test_the_median_is_of_the_windows_medians_not_their_p95():
    trigger = Trigger(at_once(min_history=3))
    # p95 40 each time, but medians of 10: the fourth window's p95 of 35 is above 3 x 10
    reasons = feed(trigger, [40.0, 40.0, 40.0, 35.0], p50s=[10.0, 10.0, 10.0, 10.0])
    assert reasons[3] is not None and "median 10.00 ms" in reasons[3]


def test_the_running_median_of_an_even_count_is_the_mean_of_the_two_middle_values():
    trigger = Trigger(CaptureRule(min_interval_s=0.0))
    feed(trigger, [1.0, 3.0, 2.0, 10.0])
    assert trigger.median_ms == 2.5
    trigger.see(5.0, 5.0, "fine", 10.0)
    assert trigger.median_ms == 3.0
    assert Trigger(CaptureRule()).median_ms is None


def test_a_verdict_turning_bad_after_the_baseline_triggers_and_one_that_stays_bad_does_not_again():
    trigger = Trigger(at_once(min_history=1, max_captures=10))
    kinds = ["fine", "input-bound", "input-bound", "fine", "input-bound", "gc-bound", "gc-bound"]
    reasons = feed(trigger, [10.0] * 7, kinds=kinds)
    assert reasons == [None, "verdict turned input-bound (from the baseline's fine)", None, None,
                       "verdict turned input-bound (from the baseline's fine)",
                       "verdict turned gc-bound (from the baseline's fine)", None]


def test_a_run_bad_from_its_first_windows_takes_one_baseline_capture_named_as_such_and_no_anomaly():
    trigger = Trigger(CaptureRule(min_interval_s=0.0, max_captures=10))
    reasons = feed(trigger, [10.0] * 20, kinds=["input-bound"] * 20)
    assert reasons == [None, None, "baseline: the run's first settled windows, input-bound"] + [None] * 17
    assert trigger.baseline_kind == "input-bound" and trigger.baseline_taken
    assert trigger.taken == 0 and trigger.capped == 0  # not an anomaly: nothing spent, nothing turned down


def test_the_baseline_capture_is_outside_the_anomaly_budget_and_starts_no_interval():
    trigger = Trigger(CaptureRule(max_captures=1, min_interval_s=600.0))
    assert feed(trigger, [10.0] * 3, kinds=["input-bound"] * 3)[2] is not None  # the baseline, at t=2
    firing = [trigger.see(10.0, 50.0, "fine", t) for t in (3.0, 4.0)][1]  # 5x slower, 2 windows in a row
    assert firing is not None and not firing.baseline and firing.severity == pytest.approx(5.0)
    assert firing.reason == "p95 50.00 ms > 3 x the run's median 10.00 ms, 2 windows in a row"
    assert trigger.taken == 1


def test_without_a_baseline_capture_the_baseline_still_sets_the_runs_nature():
    trigger = Trigger(CaptureRule(min_interval_s=0.0, baseline=False))
    assert feed(trigger, [10.0] * 10, kinds=["loop-bound"] * 10) == [None] * 10
    assert trigger.baseline_kind == "loop-bound" and not trigger.baseline_taken


@pytest.mark.parametrize(("kinds", "nature"), [
    (["fine", "input-bound", "input-bound"], "input-bound"),
    (["input-bound", "fine", "fine"], "fine"),
    (["fine", "input-bound", None], None),  # a tie: the latest of the most common
    ([None, None, None], None),
])
def test_the_baseline_verdict_is_the_one_most_of_its_windows_had(kinds, nature):
    trigger = Trigger(CaptureRule())
    reasons = feed(trigger, [10.0] * 3, kinds=kinds)
    assert trigger.baseline_kind == nature
    assert reasons[2] == f"baseline: the run's first settled windows, {nature or 'no verdict'}"


def test_a_spike_of_one_window_takes_no_capture_and_two_slow_windows_in_a_row_do():
    trigger = Trigger(CaptureRule(min_interval_s=0.0, baseline=False, max_captures=10))
    p95s = [10.0] * 3 + [80.0, 10.0] * 5 + [10.0, 40.0, 10.0, 40.0, 40.0]
    reasons = feed(trigger, p95s, p50s=[10.0] * len(p95s))
    assert [k for k, r in enumerate(reasons) if r is not None] == [len(p95s) - 1]
    assert reasons[-1] == "p95 40.00 ms > 3 x the run's median 10.00 ms, 2 windows in a row"
    assert trigger.capped == 0


def test_a_verdict_of_one_window_takes_no_capture():
    trigger = Trigger(CaptureRule(min_interval_s=0.0, baseline=False, max_captures=10))
    kinds = ["fine"] * 3 + ["cpu-contention", "fine"] * 4 + ["cpu-contention", "cpu-contention"]
    reasons = feed(trigger, [10.0] * len(kinds), kinds=kinds)
    assert [r for r in reasons if r is not None] == [
        "verdict turned cpu-contention (from the baseline's fine), 2 windows in a row"]
    assert reasons[-1] is not None


def test_a_slow_window_and_a_turned_verdict_do_not_confirm_each_other():
    trigger = Trigger(CaptureRule(min_interval_s=0.0, baseline=False))
    reasons = feed(trigger, [10.0] * 3 + [50.0, 10.0], p50s=[10.0] * 5, kinds=["fine"] * 4 + ["gc-bound"])
    assert reasons == [None] * 5


def test_confirm_asks_for_that_many_windows_in_a_row():
    trigger = Trigger(CaptureRule(min_interval_s=0.0, baseline=False, confirm=3))
    reasons = feed(trigger, [10.0] * 3 + [40.0, 40.0, 10.0, 40.0, 40.0, 40.0], p50s=[10.0] * 9)
    assert [k for k, r in enumerate(reasons) if r is not None] == [8]
    assert reasons[8].endswith(", 3 windows in a row")


@pytest.mark.parametrize(("p95s", "severity"), [
    ((90.0, 35.0), 3.5),  # a spike, then a window a little slow: the spike is not the anomaly's size
    ((35.0, 90.0), 9.0),  # a slowdown that began inside the first window shows its size in the second
])
def test_the_severity_is_the_confirming_windows_p95_over_the_median(p95s, severity):
    trigger = Trigger(CaptureRule(min_interval_s=0.0, baseline=False))
    feed(trigger, [10.0] * 3)
    assert trigger.see(10.0, p95s[0], "fine", 3.0) is None
    firing = trigger.see(10.0, p95s[1], "fine", 4.0)
    assert firing is not None and firing.severity == pytest.approx(severity)


def test_a_turned_verdicts_severity_is_its_p95_over_the_median_and_at_least_one():
    trigger = Trigger(CaptureRule(min_interval_s=0.0, baseline=False))
    feed(trigger, [10.0] * 3)
    firings = [trigger.see(10.0, p95, "input-bound", t) for t, p95 in ((3.0, 15.0), (4.0, 14.0))]
    assert firings[1] is not None and firings[1].severity == pytest.approx(1.4)
    trigger = Trigger(CaptureRule(min_interval_s=0.0, baseline=False))
    feed(trigger, [10.0] * 3)
    firings = [trigger.see(5.0, 5.0, "gc-bound", t) for t in (3.0, 4.0)]
    assert firings[1] is not None and firings[1].severity == 1.0  # faster than usual: the floor


def test_inside_the_interval_only_an_anomaly_severity_step_times_the_largest_traced_is_taken():
    trigger = Trigger(CaptureRule(min_interval_s=600.0, baseline=False, max_captures=3))
    feed(trigger, [10.0] * 3)
    kinds = ["input-bound"] * 2 + ["fine"] * 4 + ["fine"] * 2 + ["fine"] * 2 + ["fine"] * 2
    p95s = [15.0, 15.0] + [10.0] * 4 + [31.0, 31.0] + [10.0, 10.0] + [65.0, 65.0]
    p50s = [10.0] * 2 + [10.0] * 4 + [31.0, 10.0] + [10.0, 10.0] + [65.0, 10.0]
    reasons = feed(trigger, p95s, p50s=p50s, kinds=kinds, t0=3.0)
    taken = [(k, r) for k, r in enumerate(reasons) if r is not None]
    assert [k for k, _ in taken] == [1, 7, 11]
    assert taken[0][1] == "verdict turned input-bound (from the baseline's fine), 2 windows in a row"  # 1.5x
    assert taken[1][1].endswith("; 3.1 x the median, at least 2 x the largest traced (1.5 x)")
    assert "; 6.5 x the median, at least 2 x the largest traced (3.1 x)" in taken[2][1]
    assert trigger.taken == 3 and trigger.capped == 0
    # the cap per run still holds, however severe
    assert feed(trigger, [1000.0, 1000.0], p50s=[10.0, 10.0], t0=20.0) == [None, None]
    assert trigger.capped == 1


def test_inside_the_interval_an_anomaly_not_severe_enough_is_capped():
    trigger = Trigger(CaptureRule(min_interval_s=600.0, baseline=False, max_captures=10))
    reasons = feed(trigger, [10.0] * 3 + [40.0, 40.0, 10.0, 70.0, 70.0, 10.0, 81.0, 81.0], p50s=[10.0] * 11)
    assert [k for k, r in enumerate(reasons) if r is not None] == [4, 10]  # 4x, then 7x (under 8x), then 8.1x
    assert trigger.capped == 1
    assert Trigger(CaptureRule(severity_step=math.inf)).rule.severity_step == math.inf


def test_after_the_interval_any_confirmed_anomaly_is_taken():
    trigger = Trigger(CaptureRule(min_interval_s=60.0, baseline=False, max_captures=10))
    feed(trigger, [10.0] * 3)
    assert [trigger.see(10.0, 40.0, "fine", t) is not None for t in (3.0, 4.0)] == [False, True]
    assert [trigger.see(10.0, 35.0, "fine", t) is not None for t in (63.9, 64.0)] == [False, True]
    assert [trigger.see(10.0, 35.0, "fine", t) is not None for t in (65.0, 66.0)] == [False, False]
    assert trigger.capped == 1


def test_verdicts_are_not_followed_when_on_verdict_is_off_nor_without_a_verdict():
    trigger = Trigger(at_once(on_verdict=False, min_history=1))
    assert feed(trigger, [10.0] * 3, kinds=["fine"] + ["input-bound"] * 2) == [None, None, None]
    trigger = Trigger(at_once(min_history=1))
    assert feed(trigger, [10.0] * 3, kinds=[None] * 3) == [None, None, None]


def test_at_most_max_captures_per_run_and_the_rest_are_counted():
    trigger = Trigger(at_once(max_captures=2, min_history=1))
    reasons = feed(trigger, [10.0, 100.0, 10.0, 1000.0, 10.0, 10000.0])
    assert sum(r is not None for r in reasons) == 2 and trigger.taken == 2
    assert trigger.capped == 1


def test_at_most_one_capture_per_interval_measured_from_the_last_one_taken():
    trigger = Trigger(at_once(min_interval_s=60.0, min_history=1, max_captures=10))
    assert trigger.see(10.0, 10.0, "fine", 0.0) is None
    assert trigger.see(10.0, 100.0, "fine", 10.0) is not None  # taken at t=10
    assert trigger.see(10.0, 100.0, "fine", 69.9) is None  # 59.9 s later: capped
    assert trigger.capped == 1
    assert trigger.see(10.0, 100.0, "fine", 70.0) is not None  # 60 s later
    assert trigger.taken == 2


def test_a_window_without_a_median_is_judged_but_adds_nothing_to_the_history():
    trigger = Trigger(at_once(min_history=1))
    assert trigger.see(None, None, "fine", 0.0) is None
    assert trigger.median_ms is None
    assert trigger.see(float("nan"), 5.0, "fine", 1.0) is None
    assert trigger.median_ms is None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"iterations": 0}, "iterations must be a positive int, got 0"),
    ({"iterations": True}, "iterations must be a positive int, got True"),
    ({"min_history": 0}, "min_history must be a positive int"),
    ({"max_captures": 0}, "max_captures must be a positive int"),
    ({"slowdown": 1.0}, "slowdown must be a finite number above 1, got 1.0"),
    ({"slowdown": float("inf")}, "slowdown must be a finite number above 1"),
    ({"slowdown": "3"}, "slowdown must be a finite number above 1, got '3'"),
    ({"min_interval_s": -1}, "min_interval_s must be a finite number >= 0, got -1"),
    ({"min_interval_s": float("nan")}, "min_interval_s must be a finite number >= 0"),
    ({"max_mb": 0}, "max_mb must be a finite number above 0, got 0"),
    ({"min_excess_ms": -0.5}, "min_excess_ms must be a finite number >= 0, got -0.5"),
    ({"max_mb": float("inf")}, "max_mb must be a finite number >= 0"),
    ({"confirm": 0}, "confirm must be a positive int, got 0"),
    ({"confirm": 2.0}, "confirm must be a positive int, got 2.0"),
    ({"severity_step": 1.0}, "severity_step must be a number above 1 (math.inf: never), got 1.0"),
    ({"severity_step": float("nan")}, "severity_step must be a number above 1"),
    ({"severity_step": "2"}, "severity_step must be a number above 1 (math.inf: never), got '2'"),
])
def test_a_bad_rule_names_the_argument_and_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        CaptureRule(**kwargs)


def test_on_verdict_and_baseline_must_be_bools_and_numbers_become_floats():
    with pytest.raises(TypeError, match="on_verdict must be a bool, got 1"):
        CaptureRule(on_verdict=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="baseline must be a bool, got 'yes'"):
        CaptureRule(baseline="yes")  # type: ignore[arg-type]
    assert CaptureRule(severity_step=3).severity_step == 3.0
    rule = CaptureRule(slowdown=2, min_interval_s=5, max_mb=1, min_excess_ms=2)
    assert (rule.slowdown, rule.min_interval_s, rule.max_mb, rule.min_excess_ms) == (2.0, 5.0, 1.0, 2.0)
    assert isinstance(rule.slowdown, float) and rule.max_bytes == 1_000_000


def test_the_defaults():
    rule = CaptureRule()
    assert (rule.iterations, rule.slowdown, rule.min_excess_ms, rule.on_verdict, rule.min_history,
            rule.min_interval_s, rule.max_captures, rule.max_mb) == (3, 3.0, 1.0, True, 3, 600.0, 3, 50.0)
    assert (rule.baseline, rule.confirm, rule.severity_step) == (True, 2, 2.0)


@pytest.mark.parametrize("kind", ["cpu-contention", "host-bound", "gc-bound", "loop-bound", "input-bound"])
def test_every_bad_kind_turns_the_verdict_bad(kind):
    trigger = Trigger(at_once(min_history=1))
    reasons = feed(trigger, [10.0, 10.0], kinds=["fine", kind])
    assert reasons == [None, f"verdict turned {kind} (from the baseline's fine)"]


def test_a_rule_cannot_be_changed_once_made():
    import dataclasses

    rule = CaptureRule()
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.slowdown = 2.0  # type: ignore[misc]


def test_the_running_median_follows_the_latest_thousand_windows():
    from trainperf.profile import _rule

    trigger = Trigger(CaptureRule(min_interval_s=0.0, on_verdict=False, slowdown=1000.0))
    for k in range(_rule.MEDIAN_WINDOWS):
        trigger.see(10.0 + (k % 3), 10.0, "fine", float(k))
    assert trigger.median_ms == 11.0
    for k in range(_rule.MEDIAN_WINDOWS - 1):  # the older windows leave as new ones come
        trigger.see(50.0, 50.0, "fine", 2000.0 + k)
    assert len(trigger._medians) == len(trigger._order) == _rule.MEDIAN_WINDOWS
    assert trigger.median_ms == 50.0
    assert trigger._medians == sorted(trigger._order)


@pytest.mark.parametrize(("p50s", "median"), [
    ([4.0, 2.0], 3.0), ([6.0, 1.0, 5.0, 2.0, 4.0, 3.0], 3.5), ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 4.5),
    ([9.0], 9.0), ([3.0, 1.0, 2.0], 2.0),
])
def test_the_running_median_of_odd_and_even_counts(p50s, median):
    trigger = Trigger(CaptureRule())
    for k, p50 in enumerate(p50s):
        trigger.see(p50, p50, "fine", float(k))
    assert trigger.median_ms == median


def test_a_p95_under_k_times_the_median_does_not_trigger_even_far_above_it_in_ms():
    trigger = Trigger(at_once(min_history=1, on_verdict=False))
    assert feed(trigger, [10.0, 12.0]) == [None, None]  # 2 ms above, but only 1.2x


def test_the_excess_is_the_p95_less_the_median():
    trigger = Trigger(at_once(min_history=1, on_verdict=False))
    assert feed(trigger, [0.3, 1.0]) == [None, None]  # 3.3x, but 0.7 ms above


@pytest.mark.parametrize("slowdown", [0.5, 0.0, -2.0])
def test_a_slowdown_at_or_under_one_is_refused(slowdown):
    with pytest.raises(ValueError, match="slowdown must be a finite number above 1"):
        CaptureRule(slowdown=slowdown)


@pytest.mark.parametrize("name", ["min_interval_s", "min_excess_ms", "max_mb"])
def test_seconds_and_sizes_given_as_text_are_refused_by_name(name):
    with pytest.raises(ValueError, match=f"{name} must be a finite number"):
        CaptureRule(**{name: "5"})
