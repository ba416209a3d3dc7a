"""Which rank holds the others back, and why: a pure function of per-rank figures.

With data-parallel training (DDP, FSDP) every rank waits for the slowest one in the gradient
all-reduce, so all ranks show the same iteration time. What differs is how the time splits:
the rank that arrives late at the collective (long data wait, or long forward pass) makes the
others wait, and their wait lands in their own backward pass. This module compares the parts.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RankFigures", "Straggler", "find_stragglers", "cluster_line", "CAUSES"]

#: The causes a straggler can have.
CAUSES = ("data", "compute", "communication")

#: A rank is late when it arrives this share of the median iteration time after the others...
LATE_SHARE = 0.10
#: ...and at least this many milliseconds after them.
LATE_MIN_MS = 1.0


@dataclass(frozen=True, slots=True)
class RankFigures:
    """One rank's mean figures per iteration over the same iterations as the other ranks.

    Args:
        rank: the rank.
        iterations: iterations the figures cover.
        etl_ms: mean data wait.
        forward_ms: mean forward pass (host time), ``None`` when not measured.
        compute_ms: mean time in the step (forward, backward with the all-reduce, optimizer step).
        other_ms: mean host time that is neither data wait nor the step.
        iteration_ms: mean iteration time.
    """

    rank: int
    iterations: int
    etl_ms: float
    forward_ms: float | None
    compute_ms: float
    other_ms: float
    iteration_ms: float


@dataclass(frozen=True, slots=True)
class Straggler:
    """A rank that holds the others back.

    Args:
        rank: the rank.
        cause: ``data``, ``compute`` or ``communication``.
        excess_ms: how much later than the others it arrives at the collective (for
            ``communication``: how much longer its time after the forward pass is), per iteration.
        evidence: the comparison in plain words.
    """

    rank: int
    cause: str
    excess_ms: float
    evidence: str


def _medians_of_others(values: Sequence[float]) -> list[float]:
    """For each value, the median of the others (with two ranks: the other rank's value); one sort in all."""
    ordered = sorted(values)
    m = len(values) - 1
    if m < 1:
        return list(values)

    def kept(j: int, removed: int) -> float:
        return ordered[j] if j < removed else ordered[j + 1]

    out = []
    for v in values:
        p = bisect_left(ordered, v)
        out.append((kept((m - 1) // 2, p) + kept(m // 2, p)) / 2.0)
    return out


def _margin(figures: Sequence[RankFigures]) -> float:
    return max(LATE_SHARE * statistics.median(f.iteration_ms for f in figures), LATE_MIN_MS)


def find_stragglers(figures: Sequence[RankFigures]) -> list[Straggler]:
    """The rank that holds the others back, with its cause; an empty list when none does.

    Arrival at the collective is data wait plus forward pass (plus the whole step when the forward
    pass was not measured). The rank arriving latest by more than ``max(10% of the median iteration,
    1 ms)`` over the median of the other ranks is the straggler: cause ``data`` when its extra data
    wait explains most of the lateness, else ``compute``. Without a measured forward pass a rank
    that waits longer for data still counts as late by its extra data wait, since under DDP the
    others absorb that wait inside their own step. When no rank is late, a rank whose time after
    the forward pass (backward, all-reduce, optimizer step) is the longest by that margin is named
    with cause ``communication``.

    Args:
        figures: one entry per rank, over the same iterations; fewer than two ranks give no straggler.

    Example:
        >>> ranks = [RankFigures(r, 100, 2.0, 5.0, 40.0, 0.0, 42.0) for r in range(3)]
        >>> ranks.append(RankFigures(3, 100, 41.0, 5.0, 1.0, 0.0, 42.0))
        >>> find_stragglers(ranks)[0].cause
        'data'
    """
    if len(figures) < 2:
        return []
    margin = _margin(figures)
    forward_known = all(f.forward_ms is not None for f in figures)
    etls = [f.etl_ms for f in figures]
    works = [(f.forward_ms if forward_known and f.forward_ms is not None else f.compute_ms) for f in figures]
    arrivals = [e + w for e, w in zip(etls, works, strict=True)]
    etl_others, work_others, arrival_others = (_medians_of_others(x) for x in (etls, works, arrivals))

    best: tuple[float, int, float] | None = None  # (lateness, index, data excess)
    for i in range(len(figures)):
        data_excess = etls[i] - etl_others[i]
        lateness = max(arrivals[i] - arrival_others[i], data_excess)
        if lateness > margin and (best is None or lateness > best[0]):
            best = (lateness, i, data_excess)
    if best is not None:
        lateness, i, data_excess = best
        f = figures[i]
        if data_excess >= 0.5 * lateness:
            evidence = (f"rank {f.rank}: data wait {etls[i]:.1f} ms vs {etl_others[i]:.1f} ms median; "
                        "the others wait for it in all-reduce")
            return [Straggler(f.rank, "data", lateness, evidence)]
        part = "forward" if forward_known else "compute"
        evidence = (f"rank {f.rank}: {part} {works[i]:.1f} ms vs {work_others[i]:.1f} ms median; "
                    "the others wait for it in all-reduce")
        return [Straggler(f.rank, "compute", lateness, evidence)]

    if not forward_known:
        return []
    after = [f.compute_ms - (f.forward_ms or 0.0) for f in figures]
    after_others = _medians_of_others(after)
    slowest = max(range(len(figures)), key=lambda k: after[k] - after_others[k])
    excess = after[slowest] - after_others[slowest]
    if excess > margin:
        f = figures[slowest]
        evidence = (f"rank {f.rank}: backward, all-reduce and step {after[slowest]:.1f} ms vs "
                    f"{after_others[slowest]:.1f} ms median while it arrives on time; "
                    "its link or collective is slow")
        return [Straggler(f.rank, "communication", excess, evidence)]
    return []


def cluster_line(figures: Sequence[RankFigures], stragglers: Sequence[Straggler] | None = None) -> str:
    """The one-line cluster summary: the slowest rank, the spread of iteration time, and why.

    Args:
        figures: one entry per rank over the same iterations (at least one).
        stragglers: what :func:`find_stragglers` found for them; computed when ``None``.

    Example:
        >>> cluster_line([RankFigures(0, 10, 1.0, None, 9.0, 0.0, 10.0), RankFigures(1, 10, 1.0, None, 9.5, 0.0, 10.5)])
        'cluster: 2 ranks; iteration 10.0-10.5 ms (spread 0.5 ms, 5%); slowest rank 1; no straggler'
    """
    if not figures:
        raise ValueError("figures must hold at least one rank, got none")
    found = find_stragglers(figures) if stragglers is None else list(stragglers)
    times = [f.iteration_ms for f in figures]
    low, high = min(times), max(times)
    spread = high - low
    share = 100.0 * spread / low if low > 0 else 0.0
    # under DDP every rank shows the same iteration time: the slowest is the one the others wait for
    slowest_rank = found[0].rank if found else max(figures, key=lambda f: f.iteration_ms).rank
    why = "; ".join(f"straggler rank {s.rank} ({s.cause}, +{s.excess_ms:.1f} ms): {s.evidence}" for s in found)
    return (f"cluster: {len(figures)} ranks; iteration {low:.1f}-{high:.1f} ms (spread {spread:.1f} ms, "
            f"{share:.0f}%); slowest rank {slowest_rank}; {why or 'no straggler'}")
