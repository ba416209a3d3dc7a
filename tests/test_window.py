"""The window math with plain numbers: no clock, no listener."""

from __future__ import annotations

import pytest

from trainperf._window import percentile, safe_rate, window_figures


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
