"""The open window's state, with plain numbers."""

from __future__ import annotations

from trainperf.core._open_window import OpenWindow


def test_reset_opens_the_next_window_after_count_iterations():
    window = OpenWindow()
    window.entries.append((1.0, 0.0, None, 8, 1, 0.0, 1, 0))
    window.score = 0.5
    window.reset(2.5, 10, 4, first=False)
    assert (window.start, window.entries, window.first_iteration, window.end, window.warmup, window.score) == (
        2.5, [], 11, 14, False, None)
    window.reset(3.5, 13, 4, first=False)
    assert (window.first_iteration, window.end) == (14, 17)
    assert OpenWindow().warmup


def test_the_last_end_is_the_start_until_an_iteration_ends():
    window = OpenWindow()
    window.reset(3.0, 0, 2, first=True)
    assert window.last_end == 3.0
    for end in (3.25, 3.5, 3.75):
        window.entries.append((end, 0.0, None, 8, 1, 0.0, 1, 0))
    assert window.last_end == 3.75


def test_named_times_are_means_per_iteration_and_samples_medians_then_forgotten():
    window = OpenWindow()
    window.add_time("backward", 0.004)
    window.add_time("backward", 0.002)
    for seconds in (0.001, 0.003, 0.011):
        window.add_sample("forward", seconds)
    assert window.take_times(2) == {"backward_ms": 3.0, "forward_ms": 7.5, "forward_p50_ms": 3.0}
    assert window.take_times(2) == {}
    window.add_time("backward", 0.004)
    assert window.take_times(4) == {"backward_ms": 1.0}  # no samples left from before


def test_time_left_out_is_given_per_iteration_of_the_closed_window_and_the_rest_kept():
    window = OpenWindow()
    assert window.take_excluded(4, 4) == ()
    window.exclude_before(1, 0.5)
    window.exclude_before(1, 0.25)
    window.exclude_before(3, 0.125)
    window.exclude_before(4, 0.5)  # before the first iteration of the next window
    window.exclude_before(5, 2.0)
    assert window.take_excluded(4, 4) == (0.0, 0.75, 0.0, 0.125)
    assert window.take_excluded(8, 4) == (0.5, 2.0, 0.0, 0.0)
    assert window.take_excluded(12, 4) == ()
