from __future__ import annotations

import pytest

from trainperf._stragglers import RankFigures, cluster_line, find_stragglers


def ddp(etl, forward, post=20.0, other=0.0, known=True):
    """Figures of ranks in lock-step: each waits in the all-reduce for the latest arrival."""
    arrivals = [e + f for e, f in zip(etl, forward, strict=True)]
    latest = max(arrivals)
    out = []
    for r, (e, f) in enumerate(zip(etl, forward, strict=True)):
        compute = latest - e + post  # own forward + the wait for the others + backward and step
        out.append(RankFigures(r, 100, e, f if known else None, compute, other, e + compute + other))
    return out


def test_slow_loader_on_one_rank_is_a_data_straggler():
    found = find_stragglers(ddp([2, 2, 2, 41, 2, 2], [10] * 6))
    assert [(s.rank, s.cause) for s in found] == [(3, "data")]
    assert found[0].excess_ms == pytest.approx(39.0)
    assert found[0].evidence == "rank 3: data wait 41.0 ms vs 2.0 ms median; the others wait for it in all-reduce"


def test_data_straggler_found_without_forward_times():
    """Without a forward time every rank's etl + step is equal under DDP; the extra data wait still names it."""
    found = find_stragglers(ddp([2, 2, 30, 2], [10] * 4, known=False))
    assert [(s.rank, s.cause) for s in found] == [(2, "data")]
    assert found[0].excess_ms == pytest.approx(28.0)


def test_slow_forward_on_one_rank_is_a_compute_straggler():
    found = find_stragglers(ddp([2] * 4, [10, 10, 10, 35]))
    assert [(s.rank, s.cause) for s in found] == [(3, "compute")]
    assert found[0].excess_ms == pytest.approx(25.0)
    assert "forward 35.0 ms vs 10.0 ms median" in found[0].evidence


def test_slow_compute_without_lock_step_is_a_compute_straggler():
    ranks = [RankFigures(r, 10, 2.0, None, 50.0 if r == 1 else 20.0, 0.0, 52.0 if r == 1 else 22.0)
             for r in range(3)]
    assert [(s.rank, s.cause) for s in find_stragglers(ranks)] == [(1, "compute")]


def test_two_ranks_name_the_late_one_by_the_whole_gap():
    found = find_stragglers(ddp([2, 22], [10, 10]))
    assert [(s.rank, s.cause) for s in found] == [(1, "data")]
    assert found[0].excess_ms == pytest.approx(20.0)


def test_both_data_and_forward_late_takes_the_larger_share():
    assert find_stragglers(ddp([2, 2, 12], [10, 10, 40]))[0].cause == "compute"
    assert find_stragglers(ddp([2, 2, 42], [10, 10, 20]))[0].cause == "data"


def test_small_differences_are_not_stragglers():
    """Within max(10% of the iteration, 1 ms) of the others is noise."""
    assert find_stragglers(ddp([2.0, 2.2, 2.5, 2.1], [10, 10.3, 10, 10.4])) == []
    tiny = [RankFigures(r, 10, 0.1 + 0.5 * (r == 1), 0.2, 1.0, 0.0, 1.2) for r in range(3)]
    assert find_stragglers(tiny) == []  # 0.5 ms late: under the 1 ms floor


def test_slow_collective_on_a_rank_that_arrives_on_time_is_communication():
    ranks = ddp([2] * 4, [10] * 4)
    ranks[1] = RankFigures(1, 100, 2.0, 10.0, 45.0, 0.0, 47.0)
    found = find_stragglers(ranks)
    assert [(s.rank, s.cause) for s in found] == [(1, "communication")]
    assert found[0].excess_ms == pytest.approx(15.0)


def test_one_rank_or_none_has_no_straggler():
    assert find_stragglers([]) == []
    assert find_stragglers(ddp([50], [10])) == []


def test_cluster_line_names_the_straggler_spread_and_cause():
    line = cluster_line(ddp([2, 2, 2, 41], [10] * 4))
    assert line.startswith("cluster: 4 ranks; iteration 71.0-71.0 ms (spread 0.0 ms, 0%); slowest rank 3; ")
    assert "straggler rank 3 (data, +39.0 ms)" in line


def test_cluster_line_without_straggler():
    line = cluster_line([RankFigures(0, 10, 1.0, None, 9.0, 0.0, 10.0), RankFigures(1, 10, 1.0, None, 9.5, 0.0, 10.5)])
    assert line == "cluster: 2 ranks; iteration 10.0-10.5 ms (spread 0.5 ms, 5%); slowest rank 1; no straggler"
    with pytest.raises(ValueError, match="figures"):
        cluster_line([])
