from __future__ import annotations

import pytest

import trainperf
from trainperf import GCStat, MemorySink, PerformanceListener, PerformanceRecord, Verdict, format_line
from trainperf._logs import _plot


def lines(n: int, start: int = 1) -> list[str]:
    out = []
    for i in range(start, start + n):
        rec = PerformanceRecord(
            iteration=10 * i, window_iterations=10, window_s=0.1, warmup=i == start, timestamp=0.0,
            etl_ms=float(i % 7), etl_max_ms=9.0, iteration_ms=20.0 + i % 5, iteration_p95_ms=30.0,
            samples_per_sec=640.0, batches_per_sec=20.0, score=1.0 / i, gc=(GCStat("gen0", 1, 0.5),),
            verdict=Verdict("fine", 3.0, "data wait 3%, GC 0% of step"),
        )
        out.append(format_line(rec))
    return out


def labels(fig) -> list[str]:
    return [ax.get_ylabel() for ax in fig.axes]


def test_one_panel_per_figure_the_log_holds():
    fig = trainperf.plot(trainperf.parse_log(lines(40)))
    assert labels(fig) == ["iteration time (ms)", "data wait, ETL (ms)", "samples/sec",
                           "GC pause per window (ms)", "score (loss)"]
    time_panel = fig.axes[0]
    assert [line.get_label() for line in time_panel.get_lines()] == ["mean", "p95"]
    assert list(time_panel.get_lines()[0].get_ydata()) == [20.0 + i % 5 for i in range(1, 41)]
    assert len(time_panel.patches) == 1  # the grey warm-up span


def test_a_long_run_is_drawn_as_bucket_means_with_a_band():
    fig = trainperf.plot(trainperf.parse_log(lines(3 * _plot.MAX_POINTS + 7)))
    mean = fig.axes[0].get_lines()[0]
    assert len(mean.get_xdata()) <= _plot.MAX_POINTS
    assert min(mean.get_ydata()) >= 20.0 and max(mean.get_ydata()) <= 24.0  # means of 20..24
    assert len(fig.axes[0].collections) == 1  # the min-max band
    assert "mean of 4 report windows" in fig._suptitle.get_text()


def test_several_runs_in_one_log_get_one_line_each():
    fig = trainperf.plot(trainperf.parse_log(lines(20) + lines(15)))
    assert [line.get_label() for line in fig.axes[2].get_lines()] == ["samples/sec, run 1", "samples/sec, run 2"]


def test_plot_of_a_listener_and_of_nothing(clock):
    sink = MemorySink()
    listener = PerformanceListener(2, sinks=[sink], clock=clock)
    for _ in range(8):
        clock.advance(0.01)
        listener.record_iteration(samples=4)
    assert "samples/sec" in labels(trainperf.plot(listener))
    with pytest.raises(ValueError, match="no listener records"):
        trainperf.plot(trainperf.parse_log([]))
    with pytest.raises(TypeError, match="data must be"):
        trainperf.plot(42)
