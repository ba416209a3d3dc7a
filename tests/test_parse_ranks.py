"""A log that holds several ranks' lines, interleaved as ``torchrun`` writes them: one run per rank
(and per restart within a rank), and plots that draw the ranks apart."""

from __future__ import annotations

import random
import subprocess
import sys
import warnings

import pytest

import trainperf
from _pictures import named_lines, panel

pd = pytest.importorskip("pandas")

LINE = ("[rank{rank}]:2026-01-01 00:00:00,000 INFO trainperf - ETL: 0.50 ms; iteration {it}; iteration time: "
        "{ms:.2f} ms; samples/sec: {rate:.1f}; batches/sec: 10.0; epoch: {epoch}; rank: {rank}; "
        "verdict: fine (data wait 5%, GC 0% of step);")


def interleaved(ranks: dict[int, list[int]], seed: int = 0) -> list[str]:
    """Each rank's lines in its own order, the ranks mixed at random, as their processes wrote them."""
    rng = random.Random(seed)
    queues = {r: [LINE.format(rank=r, it=i, ms=10.0 * (r + 1), rate=800.0 / (r + 1), epoch=i // 50)
                  for i in its] for r, its in ranks.items()}
    out = []
    while any(queues.values()):
        rank = rng.choice([r for r, q in queues.items() if q])
        out.append(queues[rank].pop(0))
    return out


def test_two_ranks_interleaved_read_as_two_runs_each_in_order():
    lines = interleaved({0: list(range(5, 101, 5)), 1: list(range(5, 101, 5))})
    frame = trainperf.parse_log(lines).to_pandas()
    assert len(frame) == 40
    assert sorted(frame["run"].unique()) == [0, 1]
    for _, part in frame.groupby("rank"):
        assert part["run"].nunique() == 1
        assert part["iteration"].tolist() == list(range(5, 101, 5))
    assert frame["run"].iloc[0] == 0  # numbered in the order the runs first appear


def test_a_rank_restarted_is_a_run_of_its_own_and_the_other_rank_stays_one_run():
    lines = interleaved({0: [5, 10, 15, 5, 10], 1: [5, 10, 15, 20, 25]}, seed=3)
    frame = trainperf.parse_log(lines).to_pandas()
    assert frame["run"].nunique() == 3
    runs = frame.groupby("run").agg(rank=("rank", "first"), iterations=("iteration", list))
    assert sorted(zip(runs["rank"], runs["iterations"], strict=True)) == [
        (0, [5, 10]), (0, [5, 10, 15]), (1, [5, 10, 15, 20, 25])]


def test_lines_without_a_rank_are_one_rank_of_their_own():
    plain = LINE.replace(" rank: {rank};", "").replace("[rank{rank}]:", "")
    lines = [plain.format(rank=0, it=i, ms=5.0, rate=1.0, epoch=0) for i in (1, 2)]
    lines += interleaved({1: [1, 2, 3]})
    frame = trainperf.parse_log(lines).to_pandas()
    assert frame["run"].tolist() == [0, 0, 1, 1, 1]


def test_a_one_rank_log_still_counts_a_run_at_each_restart():
    lines = interleaved({0: [10, 20, 30, 10, 20, 20, 5]})
    assert trainperf.parse_log(lines).to_pandas()["run"].tolist() == [0, 0, 0, 1, 1, 2, 3]


def test_the_plot_draws_each_rank_apart_without_a_warning():
    pytest.importorskip("matplotlib")
    log = trainperf.parse_log(interleaved({0: list(range(5, 101, 5)), 1: list(range(5, 101, 5))}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = trainperf.plot(log)
    drawn = named_lines(panel(fig, "iteration time"))  # the epochs' dashed lines are unnamed
    assert sorted(drawn) == ["mean, rank 0", "mean, rank 1"]
    assert drawn["mean, rank 0"] == [10.0] * 20 and drawn["mean, rank 1"] == [20.0] * 20


def test_the_plot_of_one_rank_and_a_rank_that_is_not_there():
    pytest.importorskip("matplotlib")
    log = trainperf.parse_log(interleaved({0: [5, 10, 15], 1: [5, 10, 15], 2: [5, 10]}))
    fig = trainperf.plot(log, rank=2)
    time_panel = panel(fig, "iteration time")
    assert [list(line.get_xdata()) for line in time_panel.get_lines() if line.get_label() == "mean"] == [[5, 10]]
    with pytest.raises(ValueError, match="rank 7 has no lines to plot: the ranks in the data are 0, 1, 2"):
        trainperf.plot(log, rank=7)
    with pytest.raises(TypeError, match="rank must be an int or None, got '1'"):
        trainperf.plot(log, rank="1")  # type: ignore[arg-type]


def test_a_restarted_ranks_second_run_is_drawn_in_the_second_runs_column_in_its_own_shade():
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_rgb

    log = trainperf.parse_log(interleaved({0: [5, 10, 5, 10], 1: [5, 10, 15]}, seed=1))
    fig = trainperf.plot(log)
    first, second = panel(fig, "iteration time", 1), panel(fig, "iteration time", 2)
    assert named_lines(first) == {"mean, rank 0": [10.0, 10.0], "mean, rank 1": [20.0, 20.0, 20.0]}
    assert named_lines(second) == {"mean, rank 0": [10.0, 10.0]}
    assert [panel(fig, "where", run).get_title() for run in (1, 2)] == ["run 1", "run 2"]
    colour = {(run, line.get_label()): to_rgb(line.get_color()) for run, ax in ((1, first), (2, second))
              for line in ax.get_lines()}
    assert colour[(1, "mean, rank 0")] == colour[(2, "mean, rank 0")] != colour[(1, "mean, rank 1")]


def test_the_cli_plots_one_rank(tmp_path):
    pytest.importorskip("matplotlib")
    log = tmp_path / "train.log"
    log.write_text("\n".join(interleaved({0: [5, 10], 1: [5, 10]})) + "\n")
    ok = subprocess.run([sys.executable, "-m", "trainperf", "plot", str(log), "-o", str(tmp_path / "r.png"),
                         "--rank", "1"], capture_output=True, text=True)
    assert ok.returncode == 0 and (tmp_path / "r.png").stat().st_size > 0
    missing = subprocess.run([sys.executable, "-m", "trainperf", "plot", str(log), "-o", str(tmp_path / "x.png"),
                              "--rank", "4"], capture_output=True, text=True)
    assert missing.returncode == 2 and "rank 4 has no lines to plot: the ranks in the data are 0, 1" in missing.stderr
    assert "Traceback" not in missing.stderr


@pytest.mark.parametrize("iterations, ranks", [
    ([10, 20, 10, 20, 20, 5], None),
    ([10.0, 20.0, 10.0, float("inf"), 3.0, 3.0], [1.0] * 6),  # one rank given: counted as without one
    ([10, 10, 20, 20, 10], [0.0, 1.0, 0.0, 1.0, 1.0]),
    ([10, 10, 20, 5], [float("nan"), 1.0, float("nan"), 1.0]),
    ([10, 5, 5], [float("nan")] * 3),
    ([], None),
    ([7], [2.0]),
])
def test_a_frames_run_column_is_run_numbers_of_its_iterations_and_ranks(iterations, ranks):
    from trainperf.logs import run_numbers
    from trainperf.logs._parse import number_runs

    columns = {"iteration": iterations} if ranks is None else {"iteration": iterations, "rank": ranks}
    frame = pd.DataFrame(columns, dtype="float64", index=pd.RangeIndex(10, 10 + len(iterations)))
    runs = number_runs(frame)
    assert runs.dtype == "int64" and list(runs.index) == list(frame.index)
    assert runs.tolist() == run_numbers(iterations, ranks)
