"""The window math with plain numbers: no clock, no listener."""

from __future__ import annotations

import pytest

from trainperf.records._window import percentile, safe_rate, window_figures


def test_host_timed_window_adds_up():
    # start at 10.0; three iterations ending 0.1 s apart, 0.02 s of data wait each, 8 samples each
    entries = [
        (10.1, 0.02, None, 8, 1, 0.0, 1, 0), (10.2, 0.02, None, 8, 1, 0.0, 1, 0), (10.35, 0.05, None, 8, 2, 0.0, 1, 0)
    ]
    fig = window_figures(10.0, entries)
    assert fig.iterations == 3
    assert fig.window_s == pytest.approx(0.35)
    assert fig.etl_s == pytest.approx(0.09)
    assert fig.etl_max_s == pytest.approx(0.05)
    assert fig.durations == pytest.approx((0.1, 0.1, 0.15))
    assert fig.mean_s == pytest.approx(0.35 / 3)
    assert fig.max_s == pytest.approx(0.15)
    assert fig.samples == 24 and fig.batches == 4
    assert fig.samples_per_sec == pytest.approx(24 / 0.35)
    assert fig.batches_per_sec == pytest.approx(4 / 0.35)


def test_started_time_gives_the_gap_since_the_previous_end_as_data_wait():
    entries = [(1.5, 99.0, 1.2, 4, 1, 0.0, 1, 0), (2.0, 0.0, 1.9, 4, 1, 0.0, 1, 0)]
    fig = window_figures(1.0, entries)
    assert fig.etl_s == pytest.approx(0.2 + 0.4)  # etl argument ignored when started is given
    assert fig.etl_max_s == pytest.approx(0.4)


def test_unknown_samples_make_the_window_samples_unknown():
    fig = window_figures(0.0, [(1.0, 0.0, None, 4, 1, 0.0, 1, 0), (2.0, 0.0, None, None, 1, 0.0, 1, 0)])
    assert fig.samples is None and fig.samples_per_sec is None
    assert fig.batches_per_sec == pytest.approx(1.0)


def test_device_durations_replace_host_ones_and_take_the_newest():
    entries = [(1.0, 0.0, None, 1, 1, 0.0, 1, 0), (2.0, 0.0, None, 1, 1, 0.0, 1, 0)]
    fig = window_figures(0.0, entries, durations=[9.0, 0.5, 0.25])
    assert fig.durations == (0.25, 0.5)
    assert fig.window_s == 2.0  # the wall time stays the host's


def test_empty_window_is_an_error_and_zero_time_gives_no_rate():
    with pytest.raises(ValueError, match="at least one iteration"):
        window_figures(0.0, [])
    assert window_figures(1.0, [(1.0, 0.0, None, 5, 1, 0.0, 1, 0)]).samples_per_sec is None
    assert safe_rate(3, 0.0) is None


@pytest.mark.parametrize("q, expected", [(0, 1.0), (50, 2.5), (95, 3.85), (100, 4.0)])
def test_percentile_interpolates_like_numpy(q, expected):
    assert percentile([1.0, 2.0, 3.0, 4.0], q) == pytest.approx(expected)


def test_percentile_of_two_values_interpolates_between_them():
    assert percentile([1.0, 3.0], 50) == 2.0
    assert percentile([1.0, 3.0], 0) == 1.0 and percentile([1.0, 3.0], 100) == 3.0
    assert percentile([5.0], 95) == 5.0


# GC pauses: (start, seconds, generation), each counted once, out of the share it fell in
def entry(end, etl=0.0, started=None, other=0.0):
    return (end, etl, started, 1, 1, other, 1, 0)


def test_a_pause_in_part_of_the_gap_comes_out_of_that_gap_only():
    """10 ms gap before the step holds a 3 ms pause: data wait 7, GC 3, compute 5."""
    fig = window_figures(0.0, [entry(0.015, started=0.010)], pauses=[(0.002, 0.003, 0)])
    assert (fig.etl_s, fig.gc_s, fig.compute_s, fig.other_s) == pytest.approx((0.007, 0.003, 0.005, 0.0))


def test_a_pause_in_other_time_comes_out_of_it_before_the_gap():
    """4 ms of other time then a gap: a 6 ms pause from the start takes the 4 ms of other and 2 of the gap."""
    fig = window_figures(0.0, [entry(0.020, started=0.014, other=0.004)], pauses=[(0.0, 0.006, 0)])
    assert (fig.other_s, fig.etl_s, fig.gc_s) == pytest.approx((0.0, 0.012, 0.006))
    assert fig.compute_s == pytest.approx(0.002)


def test_a_pause_inside_the_step_comes_out_of_compute():
    fig = window_figures(0.0, [entry(0.010, etl=0.002)], pauses=[(0.005, 0.001, 1)])
    assert (fig.etl_s, fig.gc_s, fig.compute_s) == pytest.approx((0.002, 0.001, 0.007))


def test_a_pause_longer_than_the_compute_comes_out_of_a_given_data_wait_too():
    """A 12 ms window whose given 8 ms data wait held a 6 ms collection: GC 6, data wait 6, compute 0
    (never negative), and the parts add up."""
    fig = window_figures(0.0, [entry(0.012, etl=0.008)], pauses=[(0.001, 0.006, 0)])
    assert fig.gc_s == pytest.approx(0.006)
    assert fig.etl_s == pytest.approx(0.006)
    assert fig.compute_s == pytest.approx(0.0)
    assert fig.etl_s + fig.compute_s + fig.other_s + fig.gc_s == pytest.approx(fig.window_s)


def test_pauses_outside_the_window_and_across_its_start_count_only_inside():
    fig = window_figures(1.0, [entry(1.010, etl=0.001), entry(1.020, etl=0.001)],
                         pauses=[(0.5, 0.1, 0), (0.998, 0.004, 0), (1.012, 0.001, 2)])
    assert fig.gc_s == pytest.approx(0.002 + 0.001)
    assert fig.etl_s + fig.compute_s + fig.other_s + fig.gc_s == pytest.approx(fig.window_s)


def test_a_pause_longer_than_the_compute_with_other_time_beside_it():
    """14 ms: 2 ms other, a given 8 ms data wait, a 6 ms collection after the other time: other 2,
    GC 6, data wait 6, compute 0."""
    fig = window_figures(0.0, [entry(0.014, etl=0.008, other=0.002)], pauses=[(0.004, 0.006, 0)])
    assert (fig.other_s, fig.gc_s, fig.etl_s, fig.compute_s) == pytest.approx((0.002, 0.006, 0.006, 0.0))


def test_each_iterations_gap_loses_its_own_pause():
    """Three 10 ms iterations whose 4 ms gaps each hold a 1 ms pause: data wait 3, GC 1 in each."""
    entries = [entry(0.010 * k, started=0.010 * (k - 1) + 0.004) for k in (1, 2, 3)]
    pauses = [(0.010 * (k - 1) + 0.001, 0.001, 0) for k in (1, 2, 3)]
    fig = window_figures(0.0, entries, pauses=pauses)
    assert fig.etls == pytest.approx((0.003, 0.003, 0.003))
    assert (fig.etl_s, fig.gc_s, fig.compute_s) == pytest.approx((0.009, 0.003, 0.018))


def test_figures_are_frozen_slotted_values_with_empty_defaults():
    import dataclasses

    from trainperf.records._window import WindowFigures

    fig = WindowFigures(iterations=1, window_s=0.5, etl_s=0.1, etl_max_s=0.1, durations=(0.5,), samples=None,
                        batches=1)
    assert (fig.other_s, fig.steps, fig.skipped, fig.etl_from_gap, fig.etls, fig.gc_s) == (0.0, 0, 0, 0, (), 0.0)
    assert fig.compute_s == 0.4
    with pytest.raises(dataclasses.FrozenInstanceError):
        fig.etl_s = 0.2  # type: ignore[misc]
    assert not hasattr(fig, "__dict__")


def test_compute_is_never_negative_when_the_parts_exceed_the_window():
    from trainperf.records._window import WindowFigures

    fig = WindowFigures(iterations=1, window_s=0.5, etl_s=0.4, etl_max_s=0.4, durations=(0.5,), samples=1,
                        batches=1, other_s=0.3)
    assert fig.compute_s == 0.0


def test_a_step_started_before_the_previous_end_has_no_data_wait_and_counts_as_a_gap():
    fig = window_figures(1.0, [entry(1.5, started=0.9), entry(2.0, started=1.75)])
    assert fig.etls == (0.0, 0.25) and fig.etl_from_gap == 2
    assert window_figures(1.0, [entry(1.5, started=1.25), entry(2.0, etl=0.1)]).etl_from_gap == 1


def test_a_pause_that_ended_before_later_iterations_is_counted_once():
    # the pause is in the first iteration's gap; the next two iterations begin after it ended
    entries = [entry(0.5, started=0.25), entry(1.0, started=0.75), entry(1.5, started=1.25)]
    fig = window_figures(0.0, entries, pauses=[(0.0625, 0.125, 0)])
    assert fig.etls == (0.125, 0.25, 0.25) and fig.gc_s == 0.125


def test_a_short_pause_in_other_time_comes_out_of_it():
    fig = window_figures(0.0, [entry(0.5, etl=0.125, other=0.25)], pauses=[(0.0625, 0.125, 0)])
    assert (fig.other_s, fig.etl_s, fig.gc_s, fig.compute_s) == (0.125, 0.125, 0.125, 0.125)


def test_a_collection_longer_than_a_short_step_takes_a_given_data_wait_down_to_what_is_left():
    # 0.5 s: a given 0.3 s data wait, a 0.4 s pause inside the step: data wait 0.1, compute 0
    fig = window_figures(0.0, [entry(0.5, etl=0.3)], pauses=[(0.0625, 0.4, 0)])
    assert fig.etl_s == pytest.approx(0.1, abs=1e-12) and fig.compute_s == pytest.approx(0.0, abs=1e-12)


def test_percentile_of_nothing_is_a_value_error():
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)


def test_a_rate_over_no_time_or_negative_time_is_none():
    assert safe_rate(10, 0.0) is None and safe_rate(10, -1.0) is None and safe_rate(10, 0.5) == 20.0
