from __future__ import annotations

import re

import pytest

import trainperf
from _pictures import assert_drawn, named_lines, panel
from trainperf import GCStat, MemorySink, PerformanceListener, PerformanceRecord, Verdict, format_line
from trainperf.logs import _plot

to_rgb = pytest.importorskip("matplotlib.colors").to_rgb


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


def two_runs() -> list[str]:
    """A log of a run restarted: 8 input-bound windows with a long data wait, then 6 fine ones with a short one."""
    lines = []
    for run, (windows, etl, kind) in enumerate([(8, 15.0, "input-bound"), (6, 0.5, "fine")]):
        for i in range(1, windows + 1):
            lines.append(format_line(PerformanceRecord(
                iteration=20 * i, window_iterations=20, window_s=0.4, warmup=i == 1, timestamp=0.0,
                etl_ms=etl + i / 10, etl_max_ms=2 * etl, iteration_ms=20.0, samples_per_sec=1000.0 * (run + 1) + i,
                batches_per_sec=50.0, score=2.0 - i / 100, gc=(GCStat("gen0", 1, 2.0),),
                verdict=Verdict(kind, 75.0 if run == 0 else 3.0, "waiting for data"),
            )))
    return lines


def test_each_run_of_a_restarted_log_is_drawn_in_a_column_of_its_own():
    fig = trainperf.plot(trainperf.parse_log(two_runs()))
    assert {(ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start) for ax in fig.axes} == {
        (row, column) for row in range(6) for column in range(2)}
    assert [panel(fig, "where the time went", run).get_title() for run in (1, 2)] == ["run 1", "run 2"]
    first, second = panel(fig, "data wait", 1), panel(fig, "data wait", 2)
    assert named_lines(first)["mean"] == pytest.approx([15.0 + i / 10 for i in range(1, 9)])
    assert named_lines(second)["mean"] == pytest.approx([0.5 + i / 10 for i in range(1, 7)])
    assert list(second.get_lines()[0].get_xdata()) == [20 * i for i in range(1, 7)]
    assert named_lines(panel(fig, "samples/sec", 2))["samples/sec"] == [2000.0 + i for i in range(1, 7)]
    # the rows share their scale: the second run's lines are inside the limits, from 0
    assert panel(fig, "samples/sec", 1).get_ylim() == panel(fig, "samples/sec", 2).get_ylim()
    assert panel(fig, "samples/sec", 2).get_ylim()[1] > 2006 and panel(fig, "samples/sec", 2).get_ylim()[0] == 0
    # each window's shares: the first run spends about 75% of its time waiting for data, the second 2.5% to 5%
    waits = [next(c for c in panel(fig, "where the time went", run).collections if c.get_label() == "data wait")
             for run in (1, 2)]
    assert [max(path.vertices[:, 1].max() - path.vertices[:, 1].min() for path in w.get_paths()) for w in waits] \
        == pytest.approx([100 * 15.8 / 20, 100 * 1.1 / 20], abs=0.01)


def test_each_part_keeps_its_colour_in_every_panel_and_every_run():
    """Data wait has one colour: its share, its lines and the shading of input-bound windows, in every
    run's column; so has GC; and no other line takes a part's colour."""
    fig = trainperf.plot(trainperf.parse_log(two_runs()))
    colours = {c.get_label(): to_rgb(c.get_facecolor()[0]) for c in panel(fig, "where", 1).collections}
    assert sorted(colours) == ["GC", "compute", "data wait", "other host work"] and len(set(colours.values())) == 4
    wait, gc = colours["data wait"], colours["GC"]
    for run in (1, 2):
        assert {c.get_label(): to_rgb(c.get_facecolor()[0]) for c in panel(fig, "where", run).collections} == colours
        assert {to_rgb(line.get_color()) for line in panel(fig, "data wait", run).get_lines()} == {wait}
        assert {to_rgb(line.get_color()) for line in panel(fig, "GC pause", run).get_lines()} == {gc}
        for label in ("iteration time", "samples/sec", "score"):
            assert not {to_rgb(line.get_color()) for line in panel(fig, label, run).get_lines()} & set(colours.values())
    # a window bound by its data wait is shaded in the data wait's colour
    assert {to_rgb(p.get_facecolor()) for p in panel(fig, "iteration time", 1).patches} == {wait, to_rgb("grey")}


def test_a_runs_verdict_shading_stays_in_its_own_column():
    fig = trainperf.plot(trainperf.parse_log(two_runs()))
    for label in ("iteration time", "data wait", "samples/sec", "score"):
        first, second = panel(fig, label, 1), panel(fig, label, 2)
        assert len(first.patches) == 1 + 8  # the warm-up window and the 8 input-bound windows
        assert [p.get_x() for p in second.patches] == [0.0]  # the warm-up window alone
        assert max(p.get_x() + p.get_width() for p in first.patches) == 160
    assert "shading: the window's verdict" in fig._suptitle.get_text()


def test_plot_run_draws_that_run_alone_and_a_run_not_there_is_named():
    log = trainperf.parse_log(two_runs())
    fig = trainperf.plot(log, run=2)
    assert len(fig.axes) == 6 and fig.axes[0].get_title() == "run 2 of 2"
    assert named_lines(panel(fig, "data wait"))["mean"] == pytest.approx([0.5 + i / 10 for i in range(1, 7)])
    assert "shading" not in fig._suptitle.get_text()  # the second run has no window to shade
    with pytest.raises(ValueError, match="run 3 has no lines to plot: the data holds runs 1 to 2"):
        trainperf.plot(log, run=3)
    for bad in (0, -1):
        with pytest.raises(ValueError, match=re.escape(f"run must be 1 or more (run 1 is the first), got {bad}")):
            trainperf.plot(log, run=bad)
    for bad in (True, 1.0, "1"):
        with pytest.raises(TypeError, match=re.escape(f"run must be an int or None, got {bad!r}")):
            trainperf.plot(log, run=bad)


def test_the_cli_draws_one_run_and_names_a_run_that_is_not_there(tmp_path, capsys):
    from trainperf.cli import _main as _cli

    log = tmp_path / "train.log"
    log.write_text("\n".join(two_runs()) + "\n")
    assert _cli.main(["plot", str(log), "-o", str(tmp_path / "run2.png"), "--run", "2"]) == 0
    assert_drawn(tmp_path / "run2.png")
    assert _cli.main(["plot", str(log), "-o", str(tmp_path / "x.png"), "--run", "3"]) == 2
    assert "run 3 has no lines to plot: the data holds runs 1 to 2" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


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
