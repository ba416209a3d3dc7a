"""Ranks' windows brought onto the same iterations (ranks that report at different rates are
compared over the same stretch of the run), and judged together: each window's stragglers, kept to
the ranks that cost the others time over the run or are late beyond the healthy ranks' spread."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence

from ._stragglers import RankFigures, Straggler, costly_ranks, find_stragglers, lateness, merge_figures

__all__ = ["common_windows", "judge_windows", "LiveJudge"]


def common_windows(by_rank: Mapping[int, Sequence[tuple[int, RankFigures]]]) -> list[tuple[int, list[RankFigures]]]:
    """Every rank's figures over the same iterations: ``(last iteration, one entry per rank)``, in
    order of iterations.

    A stretch ends at an iteration where every rank's window ends; each rank's windows inside it are
    merged (see :func:`~trainperf.ranks._stragglers.merge_figures`) when they cover it without a gap
    (a window left out, as warm-up is, leaves that stretch out). With the same ``frequency`` on every
    rank, the stretches are the windows themselves.

    Args:
        by_rank: per rank, its windows as ``(last iteration, figures)`` in order of iterations.

    Example:
        >>> def f(rank, n):
        ...     return RankFigures(rank, n, 1.0, None, 9.0, 0.0, 10.0)
        >>> [(last, [g.iterations for g in figures])
        ...  for last, figures in common_windows({0: [(5, f(0, 5)), (10, f(0, 5))], 1: [(10, f(1, 10))]})]
        [(10, [10, 10])]
    """
    ranks = [r for r, windows in by_rank.items() if windows]
    if len(ranks) < 2:
        return [(last, [f]) for r in ranks for last, f in by_rank[r]]
    ends = set.intersection(*({last for last, _ in by_rank[r]} for r in ranks))
    out: list[tuple[int, list[RankFigures]]] = []
    cursor = dict.fromkeys(ranks, 0)
    # the first stretch starts where every rank's first window does
    previous = max(by_rank[r][0][0] - by_rank[r][0][1].iterations for r in ranks)
    for end in sorted(e for e in ends if e > previous):
        figures: list[RankFigures] = []
        for r in ranks:
            windows, k = by_rank[r], cursor[r]
            inside: list[RankFigures] = []
            while k < len(windows) and windows[k][0] <= end:
                if windows[k][0] > previous:
                    inside.append(windows[k][1])
                k += 1
            cursor[r] = k
            if inside:
                figures.append(inside[0] if len(inside) == 1 else merge_figures(inside))
        lengths = {f.iterations for f in figures}
        # every rank there, over the whole stretch
        if len(figures) == len(ranks) and lengths == {end - previous}:
            out.append((end, figures))
        previous = end
    return out


def judge_windows(windows: Sequence[Sequence[RankFigures]]) -> tuple[list[list[Straggler]], list[RankFigures]]:
    """Each window's stragglers, and every rank's figures over the run.

    A rank late beyond the margin in a window is named when it costs the others time over the run
    (its lateness in the run's figures passes the margin), or when it is later, by the margin, than
    any other rank that costs nothing over the run ever was in any window (the healthy spread). Lateness that
    moves from rank to rank (a busy host) stays within that spread and evens out over the run.

    Args:
        windows: the same ranks, in the same order, in every window (see :func:`common_windows`).
    """
    windows = [w for w in windows if len(w) >= 2]
    if not windows:
        return [], []
    ranks = [f.rank for f in windows[0]]
    if any([f.rank for f in w] != ranks for w in windows):
        raise ValueError("windows must hold the same ranks in the same order")
    run = [merge_figures([w[j] for w in windows]) for j in range(len(ranks))]
    costly = costly_ranks(run)
    most = dict.fromkeys(ranks, -math.inf)  # each rank's greatest lateness in a window
    for w in windows:
        for f, late in zip(w, lateness(w), strict=True):
            most[f.rank] = max(most[f.rank], late)
    healthy = [r for r in ranks if r not in costly]
    spread = {r: max((most[o] for o in healthy if o != r), default=math.inf) for r in ranks}
    return [find_stragglers(w, run=run, spread=spread) for w in windows], run


class LiveJudge:
    """:func:`judge_windows` while the run goes: each new window judged against the ones before it
    (at most ``keep``), as the report judges a window against the whole run.

    Args:
        keep: the most windows kept; the oldest are forgotten.
    """

    def __init__(self, keep: int = 200) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        self._seen: deque[list[RankFigures]] = deque(maxlen=keep)

    def see(self, figures: Sequence[RankFigures]) -> list[Straggler]:
        """The stragglers of ``figures`` (one entry per rank), judged with the windows seen before;
        a window of other ranks (one joined or went silent) starts the history again."""
        window = sorted(figures, key=lambda f: f.rank)
        if self._seen and [f.rank for f in self._seen[-1]] != [f.rank for f in window]:
            self._seen.clear()
        self._seen.append(window)
        judged, _ = judge_windows(list(self._seen))
        return judged[-1] if judged else []
