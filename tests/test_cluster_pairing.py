"""Rank 0's cluster lines pair its windows with the other ranks' figures over the same iterations,
however late the others' figures arrive (a loaded machine delays a rank's link thread, not its training)."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from trainperf.torch._cluster_roles import _MAX_DEFERRED, Leader, _same_iterations  # noqa: E402


def window(first: int, last: int, iteration_ms: float, etl_ms: float) -> dict:
    return {"window_iterations": last - first + 1, "first": first, "last": last, "etl_ms": etl_ms,
            "compute_ms": iteration_ms - etl_ms, "other_ms": 0.0, "iteration_ms": iteration_ms}


def leader(world: int = 2) -> Leader:
    link = SimpleNamespace(_store=None, world=world, joined=set(range(1, world)), silent={}, lines=[],
                           _run_dir=None, events=deque(), _wall=lambda: 1000.0)
    return Leader(link)  # type: ignore[arg-type]


def post(lead: Leader, peer: int, figures: dict) -> None:
    lead.latest[peer] = figures
    lead.posted.setdefault(peer, deque(maxlen=8)).append(figures)


def slow_then_fast(first: int) -> tuple[float, float]:
    """(rank 0's, rank 1's) iteration ms: a 600 ms pause in iterations 5-8 on both, rank 1 waiting for data."""
    return (600.0, 600.0) if first == 5 else (2.0, 22.0)


def test_a_window_waits_for_the_other_ranks_figures_over_its_iterations():
    lead = leader()
    for first in (1, 5, 9, 13):
        mine, theirs = slow_then_fast(first)
        lead.deferred.append(window(first, first + 3, mine, 0.5))
        if first <= 5:  # rank 1's link thread is late from iteration 9 on: its figures for 9-16 come at close
            post(lead, 1, window(first, first + 3, theirs, theirs - 1.5))
        lead._lines(final=False)
    assert len(lead.link.lines) == 2 and list(lead.deferred) == [window(9, 12, 2.0, 0.5), window(13, 16, 2.0, 0.5)]
    for first in (9, 13):
        post(lead, 1, window(first, first + 3, 22.0, 20.5))
    lead._lines(final=True)
    lines = lead.link.lines
    assert [line.split(":")[0] for line in lines] == [f"cluster at iteration {k}" for k in (4, 8, 12, 16)]
    assert "iteration 2.0-22.0 ms" in lines[-1] and "straggler rank 1 (data" in lines[-1], lines
    assert "600.0" not in lines[-1]
    # each line also goes to the sinks, with the world's figures
    events = list(lead.link.events)
    assert [e["iteration"] for e in events] == [4, 8, 12, 16] and [e["line"] for e in events] == [
        line.split(": ", 1)[1] for line in lines]
    last = events[-1]
    figures = (last["ranks"], last["iteration_ms_min"], last["iteration_ms_max"], last["etl_ms_max"])
    assert figures == (2, 2.0, 22.0, 20.5)
    assert last["spread_pct"] == pytest.approx(1000.0) and last["time"] == 1000.0
    assert [s["rank"] for s in last["stragglers"]] == [1] and last["stragglers"][0]["cause"] == "data"


def test_a_rank_that_stays_behind_holds_at_most_a_few_windows():
    lead = leader()
    post(lead, 1, window(1, 4, 22.0, 20.5))
    windows = _MAX_DEFERRED + 3
    for first in range(1, 4 * windows, 4):
        lead.deferred.append(window(first, first + 3, 2.0, 0.5))
        lead._lines(final=False)
        assert len(lead.deferred) <= _MAX_DEFERRED
    # the first window paired at once; of the others, all but the last few put in a line as they fell out
    assert len(lead.link.lines) == windows - _MAX_DEFERRED
    lead._lines(final=True)
    assert len(lead.link.lines) == windows and not lead.deferred


@pytest.mark.parametrize(("own", "expected_first"), [((9, 12), 9), ((11, 14), 9), ((16, 20), 13), ((40, 44), 13)])
def test_the_figures_over_the_most_common_iterations_are_chosen(own, expected_first):
    posted = deque(window(f, f + 3, 10.0, 1.0) for f in (1, 5, 9, 13))
    assert _same_iterations(posted, window(*own, 10.0, 1.0))["first"] == expected_first
