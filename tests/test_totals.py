"""The run's totals with plain numbers: what they add, what they leave out, and the summary."""

from __future__ import annotations

import pytest

from trainperf import PerformanceRecord, Verdict
from trainperf.core._totals import RunTotals
from trainperf.records._verdict import DEFAULT_THRESHOLDS


def record(*, warmup=False, window_s=1.0, n=10, samples=80, kind="fine"):
    return PerformanceRecord(iteration=n, window_iterations=n, window_s=window_s, warmup=warmup, timestamp=0.0,
                             samples=samples, verdict=Verdict(kind, 1.0, "") if kind else None)


def test_totals_add_every_window_after_the_warm_up():
    totals = RunTotals()
    totals.add(record(warmup=True), etl_s=9.0, other_s=9.0, gc_s=9.0, data_free_s=9.0, gc_free_s=9.0)
    totals.add(record(), etl_s=0.25, other_s=0.125, gc_s=0.0625, data_free_s=0.25, gc_free_s=0.0625)
    totals.add(record(window_s=2.0, samples=None, kind="input-bound"), etl_s=1.0, other_s=0.0, gc_s=0.0,
               data_free_s=0.5, gc_free_s=0.0)
    assert (totals.wall_s, totals.etl_s, totals.other_s, totals.gc_s) == (3.0, 1.25, 0.125, 0.0625)
    assert (totals.data_free_s, totals.gc_free_s, totals.samples, totals.iterations) == (0.75, 0.0625, 80, 20)
    assert totals.verdict_counts == {"fine": 1, "input-bound": 1} and totals.device_wall_s is None


def test_device_time_is_added_only_on_a_device():
    totals = RunTotals()
    totals.add(record(), etl_s=0.0, other_s=0.0, gc_s=0.0, data_free_s=0.0, gc_free_s=0.0,
               device_window_s=0.5, device_idle_s=0.125)
    totals.add(record(), etl_s=0.0, other_s=0.0, gc_s=0.0, data_free_s=0.0, gc_free_s=0.0,
               device_window_s=0.25, device_idle_s=0.0625)
    assert (totals.device_wall_s, totals.device_idle_s) == (0.75, 0.1875)


def test_a_verdict_persists_from_three_windows_and_thirty_percent_of_those_judged():
    totals = RunTotals()
    for kind in ("input-bound", "input-bound", "fine", "fine", "fine", "input-bound", "fine"):
        totals.add(record(kind=kind), etl_s=0.0, other_s=0.0, gc_s=0.0, data_free_s=0.0, gc_free_s=0.0)
    assert totals.persists("input-bound")  # 3 of 7
    assert not totals.persists("gc-bound")
    totals.add(record(kind=None), etl_s=0.0, other_s=0.0, gc_s=0.0, data_free_s=0.0, gc_free_s=0.0)
    assert sum(totals.verdict_counts.values()) == 7  # a window without a verdict is not judged


def test_the_summary_of_the_totals():
    totals = RunTotals()
    totals.add(record(window_s=4.0, n=100, samples=800, kind="input-bound"), etl_s=1.0, other_s=0.5, gc_s=0.5,
               data_free_s=1.0, gc_free_s=0.5)
    summary = totals.summary(thresholds=DEFAULT_THRESHOLDS, total_iterations=110, fixes=lambda kind: [f"fix {kind}"])
    assert (summary.wall_s, summary.etl_s, summary.other_s, summary.gc_s, summary.compute_s) == (4.0, 1.0, 0.5, 0.5,
                                                                                                  2.0)
    assert (summary.iterations, summary.total_iterations, summary.samples) == (100, 110, 800)
    assert [b.kind for b in summary.bottlenecks] == ["input-bound", "gc-bound", "loop-bound"]  # 25%, 12.5%, 12.5%
    assert summary.speedup_if_data_free == pytest.approx(4.0 / 3.0)
