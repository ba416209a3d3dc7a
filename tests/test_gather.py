"""What ranks tell each other, with plain numbers: the clock offset from round trips and the mean
figures per iteration a rank posts."""

from __future__ import annotations

import math

import pytest

from trainperf import PerformanceRecord
from trainperf.ranks._gather import TIMES, clock_offset, mean_figures


def test_the_clock_offset_comes_from_the_shortest_round_trip():
    # (sent, theirs, back): the peer reads 2 s behind; the second trip is the shortest (0.5 ms)
    trips = [(10.0, 8.004, 10.010), (11.0, 9.00025, 11.0005), (12.0, 10.003, 12.006)]
    offset, half = clock_offset(trips)
    assert offset == pytest.approx(2.0, abs=1e-12) and half == pytest.approx(0.00025, abs=1e-12)


def test_the_first_of_equally_short_round_trips_is_kept():
    assert clock_offset([(0.0, 10.0, 2.0), (5.0, 1.0, 7.0)]) == (-9.0, 1.0)


def test_the_clock_offset_is_the_trips_midpoint_less_the_peers_reading():
    assert clock_offset([(4.0, 1.0, 6.0)]) == (4.0, 1.0)
    assert clock_offset([(4.0, 9.0, 6.0)]) == (-4.0, 1.0)


def test_no_round_trip_no_offset():
    assert clock_offset([]) is None


def record(iteration: int, n: int, etl: float, *, extra: dict | None = None, gc: float | None = None,
           source: str = "gap", other: float = 1.0) -> PerformanceRecord:
    return PerformanceRecord(iteration=iteration, window_iterations=n, window_s=0.1, warmup=False, timestamp=0.0,
                             etl_ms=etl, compute_ms=10.0, other_ms=other, iteration_ms=11.0 + etl,
                             gc_total_ms=gc, etl_source=source, extra=extra or {})


def test_gathered_figures_are_means_weighted_by_iterations():
    out = mean_figures([record(10, 10, 1.0, gc=4.0, extra={"wait_ms": 4.0, "forward_ms": 2.0}),
                        record(40, 30, 5.0, gc=6.0, extra={"wait_ms": 8.0, "forward_ms": 3.0})])
    assert out == {
        "window_iterations": 40, "first": 1, "last": 40,
        "etl_ms": 4.0,  # (10 x 1 + 30 x 5) / 40
        "compute_ms": 10.0, "other_ms": 1.0, "iteration_ms": 15.0,
        "wait_ms": 7.0, "forward_ms": 2.75,
        "gc_total_ms": 10.0,  # GC totals add up
        "etl_source": "gap",
    }


def test_a_figure_one_window_lacks_or_cannot_read_is_left_out():
    with_nan = mean_figures([record(10, 10, 1.0, extra={"backward_ms": 2.0}),
                             record(20, 10, 1.0, extra={"backward_ms": math.nan}, other=math.inf)])
    assert "backward_ms" not in with_nan and "other_ms" not in with_nan
    assert with_nan["etl_ms"] == 1.0
    lacking = mean_figures([record(10, 10, 1.0, extra={"wait_ms": 2.0}), record(20, 10, 1.0)])
    assert "wait_ms" not in lacking


def test_gc_total_only_when_every_window_knows_it():
    assert "gc_total_ms" not in mean_figures([record(10, 10, 1.0, gc=2.0), record(20, 10, 1.0)])
    assert mean_figures([record(10, 10, 1.0, gc=0.0)])["gc_total_ms"] == 0.0


def test_the_data_wait_is_from_gaps_only_when_every_window_says_so():
    assert "etl_source" not in mean_figures([record(10, 10, 1.0), record(20, 10, 1.0, source="loader")])
    assert "etl_source" not in mean_figures([record(10, 10, 1.0, source="loader")])


def test_first_and_last_iterations_span_the_reports():
    out = mean_figures([record(25, 5, 1.0), record(30, 5, 1.0), record(35, 5, 1.0)])
    assert (out["first"], out["last"], out["window_iterations"]) == (21, 35, 15)


def test_no_reports_no_figures():
    assert mean_figures([]) == {"window_iterations": 0, "last": 0, "first": 0, "gc_total_ms": 0}


def test_integers_count_as_figures():
    out = mean_figures([record(10, 2, 1.0, extra={"comm_ms": 3}), record(20, 2, 1.0, extra={"comm_ms": 5})])
    assert out["comm_ms"] == 4.0


def test_the_posted_figures():
    assert TIMES == ("etl_ms", "forward_ms", "backward_ms", "comm_ms", "wait_ms", "wait_p50_ms", "step_ms",
                     "compute_ms", "other_ms", "iteration_ms")


def test_the_first_iteration_of_windows_that_start_on_an_even_iteration():
    out = mean_figures([record(30, 5, 1.0), record(35, 5, 1.0)])
    assert (out["first"], out["last"]) == (26, 35)
