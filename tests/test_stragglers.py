"""find_stragglers: the rank the others wait for, and the phase that makes it late.

Figures are built as DDP makes them: every rank has the same iteration time; the ranks that arrive
early at the collective wait there for the late one, by as much as it is late."""

import random

import pytest

from trainperf.ranks._stragglers import CAUSES, RankFigures, cluster_line, find_stragglers, rank_figures

BASE = {"etl_ms": 2.0, "forward_ms": 5.0, "backward_ms": 8.0, "step_ms": 3.0, "other_ms": 1.0, "gc_ms": 0.0,
        "comm_ms": 0.1}
ALLREDUCE_MS = 2.0  # the collective's own time, on every rank


def ddp_ranks(world: int, slow: int | None = None, phase: str = "etl_ms", extra_ms: float = 25.0,
              gap: bool = False, timed: bool = True) -> list[RankFigures]:
    """``world`` ranks under DDP; rank ``slow`` spends ``extra_ms`` more in ``phase``."""
    own = []
    for r in range(world):
        parts = dict(BASE)
        if r == slow:
            parts[phase] += extra_ms
            if phase == "gc_ms":  # a pause inside the forward pass lengthens it as well
                parts["forward_ms"] += extra_ms
        own.append(parts)
    totals = [sum(v for k, v in p.items() if k != "gc_ms") for p in own]
    latest = max(totals)
    out = []
    for r, parts in enumerate(own):
        wait = ALLREDUCE_MS + latest - totals[r]
        compute = parts["forward_ms"] + parts["backward_ms"] + parts["comm_ms"] + wait + parts["step_ms"]
        iteration = parts["etl_ms"] + compute + parts["other_ms"]
        out.append(RankFigures(
            r, 10, parts["etl_ms"], parts["forward_ms"], compute - parts["gc_ms"], parts["other_ms"], iteration,
            backward_ms=parts["backward_ms"], step_ms=parts["step_ms"], comm_ms=parts["comm_ms"],
            wait_ms=wait if timed else None, gc_ms=parts["gc_ms"], gap=gap,
        ))
    return out


@pytest.mark.parametrize("world", [2, 3, 8])
@pytest.mark.parametrize(("phase", "cause"), [
    ("etl_ms", "data"), ("forward_ms", "forward"), ("backward_ms", "backward"), ("step_ms", "optimizer"),
    ("other_ms", "host"), ("gc_ms", "gc"), ("comm_ms", "communication"),
])
def test_the_rank_that_waits_least_is_named_with_the_phase_that_makes_it_late(world, phase, cause):
    for slow in range(world):
        found = find_stragglers(ddp_ranks(world, slow, phase))
        assert [(s.rank, s.cause) for s in found] == [(slow, cause)]
        assert found[0].excess_ms == pytest.approx(25.0)
        assert f"rank {slow}:" in found[0].evidence and "25.0 ms longer in the collective" in found[0].evidence


def test_host_work_on_rank_zero_is_not_blamed_on_the_ranks_that_wait_for_it():
    """Rank 0 logs after its step: the others' backward (their wait) is long, theirs is not the fault."""
    found = find_stragglers(ddp_ranks(3, 0, "other_ms"))
    assert [(s.rank, s.cause) for s in found] == [(0, "host")]


def test_the_evidence_gives_the_phase_against_the_others_median():
    found = find_stragglers(ddp_ranks(4, 3, "step_ms", extra_ms=30.0))
    assert found[0].evidence == (
        "rank 3: optimizer step 33.0 ms vs 3.0 ms median of the others; "
        "the others wait 30.0 ms longer in the collective"
    )


def test_a_gap_before_the_forward_pass_is_host_time_not_data():
    found = find_stragglers(ddp_ranks(3, 1, "etl_ms", gap=True))
    assert [(s.rank, s.cause) for s in found] == [(1, "host")]
    assert "untimed iterable" in found[0].evidence


def test_gc_is_named_when_its_pauses_make_most_of_the_lateness():
    found = find_stragglers(ddp_ranks(3, 2, "gc_ms", extra_ms=20.0))
    assert found[0].cause == "gc"
    # a small GC difference beside a large data wait is not the cause
    ranks = ddp_ranks(3, 2, "etl_ms", extra_ms=30.0)
    ranks[2] = RankFigures(**{**{f: getattr(ranks[2], f) for f in RankFigures.__slots__}, "gc_ms": 3.0})
    assert find_stragglers(ranks)[0].cause == "data"


@pytest.mark.parametrize("world", [2, 3, 5])
def test_no_straggler_below_the_margin_or_when_all_ranks_are_alike(world):
    assert find_stragglers(ddp_ranks(world)) == []
    # extra host time on a 21 ms iteration must pass max(10%, 3 ms)
    assert find_stragglers(ddp_ranks(world, 0, "other_ms", extra_ms=0.5)) == []
    assert find_stragglers(ddp_ranks(world, 0, "other_ms", extra_ms=2.9)) == []
    assert find_stragglers(ddp_ranks(world, 0, "other_ms", extra_ms=3.1))[0].rank == 0
    # on a 100 ms iteration, 10% is the margin
    slow = ddp_ranks(world, 0, "other_ms", extra_ms=9.0)
    assert find_stragglers([RankFigures(**{**{f: getattr(r, f) for f in RankFigures.__slots__},
                                           "iteration_ms": 100.0}) for r in slow]) == []


def test_one_slow_iteration_in_a_window_names_no_one_when_the_median_wait_is_known():
    """A rank preempted once in a window is late in the window's mean, not in its median iteration."""
    ranks = ddp_ranks(3, 1, "backward_ms", extra_ms=6.0)
    with_medians = [RankFigures(**{**{f: getattr(r, f) for f in RankFigures.__slots__}, "wait_p50_ms": ALLREDUCE_MS})
                    for r in ranks]
    assert find_stragglers(ranks)[0].rank == 1
    assert find_stragglers(with_medians) == []
    # late in every iteration: the median moves too
    every = [RankFigures(**{**{f: getattr(r, f) for f in RankFigures.__slots__}, "wait_p50_ms": r.wait_ms})
             for r in ranks]
    assert [(s.rank, s.cause) for s in find_stragglers(every)] == [(1, "backward")]


def test_noise_on_healthy_ranks_names_no_one():
    rng = random.Random(1)
    for _ in range(2000):
        ranks = ddp_ranks(rng.choice([2, 3, 4]))
        noisy = [RankFigures(**{**{f: getattr(r, f) for f in RankFigures.__slots__},
                                "wait_ms": r.wait_ms + rng.uniform(-1.45, 1.45)}) for r in ranks]
        assert find_stragglers(noisy) == []


@pytest.mark.parametrize(("phase", "cause"), [("etl_ms", "data"), ("forward_ms", "forward"), ("other_ms", "host")])
def test_without_timed_collectives_arrival_is_what_precedes_them(phase, cause):
    found = find_stragglers(ddp_ranks(3, 1, phase, timed=False))
    assert [(s.rank, s.cause) for s in found] == [(1, cause)]
    assert found[0].evidence.endswith("the others wait for it in the collective")


def test_without_timed_collectives_a_late_backward_is_not_blamed_on_anyone():
    """The others' wait lands in their step as the late rank's backward does in its own: nothing tells
    them apart, and naming a rank would be a guess."""
    assert find_stragglers(ddp_ranks(3, 1, "backward_ms", timed=False)) == []


def test_without_forward_times_a_slower_step_outside_lock_step_is_compute():
    ranks = [RankFigures(r, 10, 2.0, None, 50.0 if r == 1 else 20.0, 0.0, 52.0 if r == 1 else 22.0) for r in range(3)]
    assert [(s.rank, s.cause) for s in find_stragglers(ranks)] == [(1, "compute")]


def test_one_rank_or_none_has_no_straggler():
    assert find_stragglers([]) == []
    assert find_stragglers(ddp_ranks(1)) == []
    assert set(CAUSES) >= {"data", "forward", "backward", "optimizer", "host", "gc", "communication"}


def test_rank_figures_reads_a_window_line_and_refuses_one_without_the_needed_figures():
    line = {"window_iterations": 5, "etl_ms": 1.0, "compute_ms": 9.0, "other_ms": 0.5, "iteration_ms": 11.0,
            "gc_total_ms": 2.5, "etl_source": "gap",
            "extra": {"forward_ms": 3.0, "backward_ms": 4.0, "step_ms": 1.0, "comm_ms": 0.2, "wait_ms": 0.7}}
    f = rank_figures(4, line)
    assert f == RankFigures(4, 5, 1.0, 3.0, 9.0, 0.5, 11.0, backward_ms=4.0, step_ms=1.0, comm_ms=0.2,
                            wait_ms=0.7, gc_ms=0.5, gap=True)
    assert rank_figures(0, {**line, "etl_ms": None}) is None
    assert rank_figures(0, {**line, "window_iterations": 0}) is None
    assert rank_figures(0, {**line, "iteration_ms": float("nan")}) is None
    assert rank_figures(0, {**line, "extra": {"wait_ms": True}}).wait_ms is None
    assert rank_figures(0, {**line, "other_ms": None}).other_ms == 0.0


def test_cluster_line_names_the_straggler_spread_and_cause():
    line = cluster_line(ddp_ranks(3, 2, "step_ms"))
    assert line.startswith("cluster: 3 ranks; iteration ")
    assert "slowest rank 2; straggler rank 2 (optimizer, +25.0 ms)" in line


def test_cluster_line_without_straggler():
    assert cluster_line(ddp_ranks(2)).endswith("slowest rank 0; no straggler")
    with pytest.raises(ValueError, match="figures"):
        cluster_line([])


def test_medians_of_the_others_match_a_plain_median_for_any_count():
    from statistics import median

    from trainperf.ranks._stragglers import _medians_of_others

    rng = random.Random(3)
    for n in range(2, 9):
        for _ in range(50):
            values = [rng.choice([1.0, 2.0, 3.0, rng.uniform(0, 10)]) for _ in range(n)]
            expected = [median(values[:k] + values[k + 1:]) for k in range(n)]
            assert _medians_of_others(values) == pytest.approx(expected)
    assert _medians_of_others([4.0]) == [4.0]


def test_gc_wins_from_half_of_the_lateness_on():
    # a 15 ms pause inside a forward pass that is 25 ms slower: GC makes 60% of the lateness
    ranks = ddp_ranks(3, 1, "forward_ms", extra_ms=25.0)
    ranks[1] = RankFigures(**{**{f: getattr(ranks[1], f) for f in RankFigures.__slots__}, "gc_ms": 15.0})
    assert find_stragglers(ranks)[0].cause == "gc"
    ranks[1] = RankFigures(**{**{f: getattr(ranks[1], f) for f in RankFigures.__slots__}, "gc_ms": 12.5})
    assert find_stragglers(ranks)[0].cause == "gc"  # exactly half
    ranks[1] = RankFigures(**{**{f: getattr(ranks[1], f) for f in RankFigures.__slots__}, "gc_ms": 12.0})
    assert find_stragglers(ranks)[0].cause == "forward"


def test_lateness_equal_to_the_margin_is_not_late():
    ranks = ddp_ranks(3, 2, "etl_ms", extra_ms=3.0)  # iteration ~21 ms: the margin is 3 ms
    assert find_stragglers(ranks) == []
    assert find_stragglers(ddp_ranks(3, 2, "etl_ms", extra_ms=3.01))[0].rank == 2


def test_without_timed_collectives_or_forward_times_healthy_ranks_name_no_one():
    ranks = [RankFigures(r, 10, 2.0, None, 20.0 + 0.1 * r, 1.0, 23.0 + 0.1 * r) for r in range(4)]
    assert find_stragglers(ranks) == []
    # host time and GC count before the collective
    late = [RankFigures(r, 10, 2.0, 5.0, 20.0, 1.0, 23.0, gc_ms=6.0 if r == 3 else 0.0) for r in range(4)]
    assert [(s.rank, s.cause) for s in find_stragglers(late)] == [(3, "gc")]


def test_a_window_of_one_iteration_counts_and_missing_gc_is_none():
    line = {"window_iterations": 1, "etl_ms": 1.0, "compute_ms": 9.0, "iteration_ms": 10.0}
    f = rank_figures(2, line)
    assert f is not None and f.iterations == 1 and f.gc_ms == 0.0 and f.gap is False and f.wait_ms is None


def test_cluster_line_gives_the_spread_and_the_slowest_rank_without_a_straggler():
    ranks = [RankFigures(r, 10, 1.0, None, t - 1.0, 0.0, t) for r, t in enumerate([20.0, 22.0, 21.0])]
    assert cluster_line(ranks) == ("cluster: 3 ranks; iteration 20.0-22.0 ms (spread 2.0 ms, 10%); slowest rank 1; "
                                   "no straggler")
    zero = [RankFigures(r, 10, 0.0, None, 0.0, 0.0, 0.0) for r in range(2)]
    assert "(spread 0.0 ms, 0%)" in cluster_line(zero)


def test_the_cause_is_the_largest_excess_not_the_largest_phase():
    """Every rank spends 40 ms in its backward pass; the late rank's data wait is 12 ms longer."""
    ranks = [RankFigures(**{**{f: getattr(r, f) for f in RankFigures.__slots__},
                            "backward_ms": 40.0}) for r in ddp_ranks(3, 0, "etl_ms", extra_ms=12.0)]
    assert [(s.rank, s.cause) for s in find_stragglers(ranks)] == [(0, "data")]


def test_figures_and_stragglers_are_values():
    import dataclasses

    f = ddp_ranks(2)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.etl_ms = 1.0  # type: ignore[misc]
    assert not hasattr(f, "__dict__")


def test_gc_counts_by_its_excess_over_the_others_not_by_its_size():
    """Every rank collects 10 ms per iteration; the late rank 4 ms more, and its forward pass is 20 ms
    slower: GC makes a fifth of the lateness, so the cause is the forward pass."""
    ranks = ddp_ranks(3, 1, "forward_ms", extra_ms=20.0)
    ranks = [RankFigures(**{**{f: getattr(r, f) for f in RankFigures.__slots__},
                            "gc_ms": 14.0 if r.rank == 1 else 10.0}) for r in ranks]
    assert find_stragglers(ranks)[0].cause == "forward"


def test_only_a_data_wait_from_the_gap_is_renamed_host():
    found = find_stragglers(ddp_ranks(3, 1, "forward_ms", gap=True))
    assert found[0].cause == "forward" and "untimed iterable" not in found[0].evidence
    assert find_stragglers(ddp_ranks(3, 1, "step_ms", gap=True))[0].cause == "optimizer"


def test_a_straggler_is_a_value():
    import dataclasses

    s = find_stragglers(ddp_ranks(2, 1, "etl_ms"))[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rank = 0  # type: ignore[misc]


@pytest.mark.parametrize(("phase", "words"), [
    ("etl_ms", "data wait"), ("forward_ms", "forward pass"),
    ("backward_ms", "loss and backward up to its last gradient"), ("step_ms", "optimizer step"),
    ("other_ms", "host time after the step"), ("comm_ms", "comm hook launching the all-reduce"),
])
def test_the_evidence_names_the_phase_in_words(phase, words):
    assert find_stragglers(ddp_ranks(3, 2, phase))[0].evidence.startswith(f"rank 2: {words}")


def test_a_gap_read_from_a_file_is_a_gap():
    line = {"window_iterations": 5, "etl_ms": 1.0, "compute_ms": 9.0, "iteration_ms": 10.0,
            "etl_source": "".join(["g", "a", "p"])}  # a string built at run time, as json.loads builds it
    assert rank_figures(0, line).gap is True


@pytest.mark.parametrize(("spread", "share"), [(2.75, "14%"), (2.5, "12%"), (3.5, "18%")])
def test_cluster_line_rounds_the_spread_share(spread, share):
    ranks = [RankFigures(r, 10, 1.0, None, t - 1.0, 0.0, t) for r, t in enumerate([20.0, 20.0 + spread])]
    assert f"(spread {spread:.1f} ms, {share})" in cluster_line(ranks)  # 13.75, 12.5 and 17.5 rounded
