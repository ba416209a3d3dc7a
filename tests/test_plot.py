from __future__ import annotations

import pytest

import trainperf
from trainperf import GCStat, MemorySink, PerformanceListener, PerformanceRecord, Verdict, format_line
from trainperf.logs import _plot


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
    assert labels(fig) == ["where the time went (%)", "iteration time (ms)", "data wait, ETL (ms)", "samples/sec",
                           "GC pause per iteration (ms)", "score (loss)"]
    time_panel = fig.axes[1]
    assert [line.get_label() for line in time_panel.get_lines()] == ["mean", "p95"]
    assert list(time_panel.get_lines()[0].get_ydata()) == [20.0 + i % 5 for i in range(1, 41)]
    assert len(time_panel.patches) == 1  # the grey warm-up span


def test_a_long_run_is_drawn_as_bucket_means_with_a_band():
    fig = trainperf.plot(trainperf.parse_log(lines(3 * _plot.MAX_POINTS + 7)))
    mean = fig.axes[1].get_lines()[0]
    assert len(mean.get_xdata()) <= _plot.MAX_POINTS
    assert min(mean.get_ydata()) >= 20.0 and max(mean.get_ydata()) <= 24.0  # means of 20..24
    assert len(fig.axes[1].collections) == 1  # the min-max band
    assert "mean of 4 report windows" in fig._suptitle.get_text()


def test_several_runs_in_one_log_get_one_line_each():
    fig = trainperf.plot(trainperf.parse_log(lines(20) + lines(15)))
    assert [line.get_label() for line in fig.axes[3].get_lines()] == ["samples/sec, run 1", "samples/sec, run 2"]


def test_plot_of_a_listener_and_of_nothing(clock):
    sink = MemorySink()
    listener = PerformanceListener(2, sinks=[sink], clock=clock)
    for _ in range(8):
        clock.advance(0.01)
        listener.record_iteration(samples=4)
    assert "samples/sec" in labels(trainperf.plot(listener))
    with pytest.raises(ValueError, match="no listener records"):
        trainperf.plot(trainperf.parse_log([]))


def test_the_time_split_adds_up_and_bad_windows_and_epochs_are_marked(clock):
    records = []
    for i in range(1, 13):
        bound = i > 6
        records.append(PerformanceRecord(
            iteration=10 * i, window_iterations=10, window_s=0.2, warmup=i == 1, timestamp=0.0, epoch=(i - 1) // 6,
            etl_ms=12.0 if bound else 2.0, iteration_ms=20.0, other_ms=2.0, gc=(GCStat("gen0", 2, 10.0),),
            verdict=Verdict("input-bound" if bound else "fine", 60.0 if bound else 10.0, ""),
        ))
    fig = trainperf.plot(records, title="my run")
    shares = fig.axes[0]
    assert shares.get_ylabel() == "where the time went (%)"
    tops = [layer.get_paths()[0].vertices[:, 1].max() for layer in shares.collections]
    assert max(tops) == pytest.approx(100.0)  # compute + data wait + GC + other stack to 100%
    gc_panel = next(ax for ax in fig.axes if ax.get_ylabel() == "GC pause per iteration (ms)")
    assert list(gc_panel.get_lines()[0].get_ydata()) == [1.0] * 12  # 10 ms per window of 10 iterations
    assert "grey: warm-up window" in fig._suptitle.get_text() and "my run" in fig._suptitle.get_text()
    epoch_lines = [line for line in fig.axes[1].get_lines() if line.get_linestyle() == "--"]
    assert [line.get_xdata()[0] for line in epoch_lines] == [60]  # epoch 1 starts after iteration 60
    assert len(fig.axes[1].patches) == 1 + 6  # the warm-up span and six input-bound windows
