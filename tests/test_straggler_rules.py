"""The straggler rules beyond one window: two slow ranks both named, lateness that moves from rank to
rank (a busy host) names nobody, a rank slow for a stretch of the run is named there, work done
every n-th iteration is named over the run with its pattern, and ranks at other frequencies are
compared over the same iterations."""

from __future__ import annotations

import random

import pytest

from _simulate import simulate
from trainperf import build_report
from trainperf.ranks._pattern import recurrence
from trainperf.ranks._stragglers import RankFigures, find_stragglers, merge_figures
from trainperf.ranks._windows import common_windows, judge_windows


def timed(rank: int, wait: float, *, etl: float = 1.0, forward: float = 5.0, backward: float = 10.0,
          iteration: float = 60.0, wait_p50: float | None = None, n: int = 5) -> RankFigures:
    return RankFigures(rank, n, etl, forward, iteration - etl, 0.0, iteration, backward_ms=backward, step_ms=2.0,
                       wait_ms=wait, wait_p50_ms=wait if wait_p50 is None else wait_p50)


def test_two_slow_ranks_are_both_named_each_against_the_ranks_not_late():
    # rank 3's data +40 ms, rank 1's forward +25 ms: rank 0 and 2 wait 40 ms, rank 1 waits 15 ms, rank 3 none
    ranks = [timed(0, 41.0), timed(1, 16.0, forward=30.0), timed(2, 41.0), timed(3, 1.0, etl=41.0)]
    found = find_stragglers(ranks)
    assert [(s.rank, s.cause) for s in found] == [(3, "data"), (1, "forward")]
    assert [round(s.excess_ms) for s in found] == [40, 25]  # what each costs the ranks that are not late
    # on three ranks too, where the median of the others of the second held the first
    found = find_stragglers([timed(0, 41.0), timed(1, 16.0, forward=30.0), timed(2, 1.0, etl=41.0)])
    assert [(s.rank, s.cause, round(s.excess_ms)) for s in found] == [(2, "data", 40), (1, "forward", 25)]


def rotating(windows: int, world: int, late_ms: float, seed: int = 3) -> list[list[RankFigures]]:
    """Each window one rank, at random, is late by up to ``late_ms`` (the others wait for it)."""
    rng = random.Random(seed)
    out = []
    for _ in range(windows):
        who, late = rng.randrange(world), rng.uniform(0.0, late_ms)
        out.append([timed(r, 5.0 + (0.0 if r == who else late)) for r in range(world)])
    return out


@pytest.mark.parametrize("world", [2, 3, 4])
def test_lateness_that_moves_from_rank_to_rank_names_nobody(world):
    windows = rotating(400, world, 30.0)
    # one window at a time, it names someone in most windows; judged against the run, in none
    assert sum(bool(find_stragglers(w)) for w in windows) > 200
    judged, _ = judge_windows(windows)
    assert sum(bool(s) for s in judged) == 0


def test_a_rank_late_for_a_stretch_of_a_busy_run_is_named_there_and_a_steady_straggler_everywhere():
    windows = rotating(200, 3, 10.0)
    for w in windows[100:110]:  # rank 2 late by 40 ms for ten windows: beyond the healthy spread
        w[0], w[1] = timed(0, w[0].wait_ms + 40.0), timed(1, w[1].wait_ms + 40.0)  # type: ignore[operator]
        w[2] = timed(2, w[2].wait_ms, backward=50.0)  # type: ignore[arg-type]
    judged, _ = judge_windows(windows)
    assert [k for k, s in enumerate(judged) if s] == list(range(100, 110))
    assert all([(s.rank, s.cause) for s in judged[k]] == [(2, "backward")] for k in range(100, 110))
    # a steady straggler (its lateness within the spread of noise, but every window) is named throughout
    steady = [[timed(0, 12.0 + d), timed(1, 12.0), timed(2, 0.0, backward=22.0)]
              for d in (0.0, 3.0) * 50]
    judged, run = judge_windows(steady)
    assert all([s.rank for s in w] == [2] for w in judged)
    assert [f.iterations for f in run] == [500, 500, 500]


def test_merged_figures_are_weighted_by_iterations_and_keep_only_parts_known_everywhere():
    a = timed(0, 10.0, n=5, iteration=50.0, wait_p50=9.0)
    b = RankFigures(0, 15, 3.0, None, 27.0, 0.0, 30.0, wait_ms=2.0, wait_p50_ms=1.0)
    m = merge_figures([a, b])
    assert m.iterations == 20 and m.iteration_ms == pytest.approx((50.0 * 5 + 30.0 * 15) / 20)
    assert m.wait_ms == pytest.approx((10.0 * 5 + 2.0 * 15) / 20) and m.forward_ms is None
    assert m.wait_p50_ms == 1.0  # the weighted median of the windows' medians
    with pytest.raises(ValueError, match="figures"):
        merge_figures([])


def test_ranks_at_other_frequencies_are_compared_over_the_same_iterations():
    def f(rank, n, etl=1.0):
        return RankFigures(rank, n, etl, None, 9.0, 0.0, 10.0 + etl)

    every5 = [(i, f(0, 5)) for i in range(5, 41, 5)]
    every10 = [(i, f(1, 10, etl=20.0)) for i in range(10, 41, 10)]
    got = common_windows({0: every5, 1: every10})
    assert [last for last, _ in got] == [10, 20, 30, 40]
    assert all([g.iterations for g in figures] == [10, 10] for _, figures in got)
    # a window left out on one rank (warm-up) leaves its stretch out
    got = common_windows({0: every5[2:], 1: every10})
    assert [last for last, _ in got] == [20, 30, 40]


@pytest.mark.parametrize(("every", "ordinal"), [(5, "5th"), (2, "2nd"), (3, "3rd"), (21, "21st"), (12, "12th")])
def test_a_recurring_cost_is_told_with_its_period(every, ordinal):
    n = every * 8
    values = [100.0 if i % every == 0 else 1.0 for i in range(1, n + 1)]
    values[0] = 1.5  # noise below the floor is not a spike
    told = recurrence(list(range(1, n + 1)), values, 3.0, "host time")
    assert told == f"every {ordinal} iteration, 99.0 ms of host time"


def test_an_irregular_cost_is_counted_and_too_few_or_too_small_are_not_a_pattern():
    its = list(range(1, 41))
    irregular = [60.0 if i in (3, 4, 11, 30) else 2.0 for i in its]
    assert recurrence(its, irregular, 3.0, "data wait") == "4 of 40 iterations, 58.0 ms of data wait each"
    assert recurrence(its, [60.0 if i in (3, 30) else 2.0 for i in its], 3.0, "x") is None
    assert recurrence(its, [4.0 if i % 5 == 0 else 2.0 for i in its], 3.0, "x") is None  # below the floor
    with pytest.raises(ValueError, match="iterations and values_ms"):
        recurrence([1, 2], [1.0], 3.0, "x")


def test_work_every_fifth_iteration_is_named_over_the_run_with_its_pattern(tmp_path):
    # rank 0 spends 100 ms after every 5th step; windows of 10 iterations hold two such steps, so the
    # median iteration of a window is on time and no window alone names it
    simulate(tmp_path, ranks=3, iterations=200, frequency=10, forward_ms=lambda r, i: 5.0,
             other_ms=lambda r, i: 100.0 if r == 0 and i % 5 == 0 else 0.0)
    report = build_report(tmp_path)
    (s,) = report["stragglers"]
    assert (s["rank"], s["cause"], s["pattern"]) == (0, "host", "every 5th iteration, 100.0 ms of host time")
    assert s["excess_ms"] == pytest.approx(20.0, abs=1.0)  # what it costs the others per iteration
    assert "straggler rank 0 (host" in report["cluster"] and "every 5th iteration" in report["cluster"]


def test_a_pattern_over_spans_that_cover_some_windows_only():
    # spans kept for iterations 1-10 and 31-40 only: the gap across the hole is a multiple of the period
    its = list(range(1, 11)) + list(range(31, 41))
    values = [80.0 if i % 5 == 0 else 2.0 for i in its]
    assert recurrence(its, values, 3.0, "data wait") == "every 5th iteration, 78.0 ms of data wait"
    # every 5th iteration's slot, but only half of them slow: not "every 5th"
    its = list(range(1, 41))
    half = [80.0 if i % 10 == 0 or i == 5 else 2.0 for i in its]
    assert recurrence(its, half, 3.0, "x") == "5 of 40 iterations, 78.0 ms of x each"
    # slow iterations next to each other are no period
    assert recurrence(its, [80.0 if i in (7, 8, 9, 10) else 2.0 for i in its], 3.0, "x") == (
        "4 of 40 iterations, 78.0 ms of x each")


def test_windows_of_one_rank_alone_or_of_ranks_that_differ_are_told_apart():
    one = [(5, RankFigures(0, 5, 1.0, None, 9.0, 0.0, 10.0))]
    assert common_windows({0: one, 1: []}) == [(5, [one[0][1]])]
    assert judge_windows([[one[0][1]]]) == ([], [])  # one rank: nothing to compare
    a, b = timed(0, 5.0), timed(1, 5.0)
    with pytest.raises(ValueError, match="same ranks"):
        judge_windows([[a, b], [b, a]])


def test_the_healthy_spread_is_the_other_ranks_lateness_not_the_ranks_own():
    # rank 2 is once late by 40 ms; the others never more than 5: its own worst is not its threshold
    windows = [[timed(0, 10.0), timed(1, 10.0 + (5.0 if k % 2 else 0.0)), timed(2, 10.0)] for k in range(40)]
    windows[20] = [timed(0, 50.0), timed(1, 50.0), timed(2, 10.0, backward=50.0)]
    judged, _ = judge_windows(windows)
    assert [k for k, s in enumerate(judged) if s] == [20]


def test_the_live_judge_weighs_each_gather_against_the_ones_before():
    from trainperf.ranks import LiveJudge

    judge = LiveJudge(keep=300)
    windows = rotating(300, 3, 30.0)
    named = [judge.see(w) for w in windows]
    # the first gathers have no history to weigh them against; past them, moving lateness names nobody
    assert sum(bool(s) for s in named[50:]) <= 3
    # a steady straggler is named from its first gather on
    steady = LiveJudge()
    assert all([s.rank for s in steady.see([timed(0, 30.0), timed(1, 30.0), timed(2, 0.0, etl=31.0)])] == [2]
               for _ in range(5))
    # ranks change (one went silent): the history starts again
    assert [s.rank for s in steady.see([timed(0, 30.0), timed(2, 0.0, etl=31.0)])] == [2]
    with pytest.raises(ValueError, match="keep"):
        LiveJudge(keep=0)
