"""Which rank holds the others back, and why: a pure function of per-rank figures.

With data-parallel training (DDP, FSDP) every rank waits for the slowest one in the collectives,
so all ranks show the same iteration time. What differs is how the time splits: the rank that
reaches the collective last waits least inside it, and the others' extra wait is its lateness.
Its own time since the previous collective, split into phases, says why it is late.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..records import counted

__all__ = ["RankFigures", "Straggler", "find_stragglers", "cluster_line", "CAUSES", "rank_figures", "merge_figures",
           "costly_ranks", "lateness"]

#: The causes a straggler can have; ``compute`` only when the step is not split into its phases.
CAUSES = ("data", "forward", "backward", "optimizer", "host", "gc", "communication", "compute")

#: A rank is late when it arrives this share of the median iteration time after the others...
LATE_SHARE = 0.10
#: ...and at least this many milliseconds after them: below that, a busy host's jitter (a process
#: descheduled for a moment) makes a different rank late in every other window.
LATE_MIN_MS = 3.0
#: GC is the cause when its extra pauses make up at least this share of the lateness (a pause
#: inside the forward pass lengthens that phase too).
GC_SHARE = 0.5

#: Each cause's figure (a :class:`RankFigures` field) and how the evidence names it.
_PHASES: tuple[tuple[str, str, str], ...] = (
    ("data", "etl_ms", "data wait"),
    ("forward", "forward_ms", "forward pass"),
    ("backward", "backward_ms", "loss and backward up to its last gradient"),
    ("optimizer", "step_ms", "optimizer step"),
    ("host", "other_ms", "host time after the step (logging, evaluation, checkpoints)"),
    ("gc", "gc_ms", "garbage collection"),
    ("communication", "comm_ms", "comm hook launching the all-reduce"),
)


@dataclass(frozen=True, slots=True)
class RankFigures:
    """One rank's mean figures per iteration over the same iterations as the other ranks.

    Args:
        rank: the rank.
        iterations: iterations the figures cover.
        etl_ms: mean data wait.
        forward_ms: mean training forward pass (host time; device time on CUDA), ``None`` when not measured.
        compute_ms: mean time in the step (forward, backward with the collectives, optimizer step).
        other_ms: mean host time that is neither data wait nor the step.
        iteration_ms: mean iteration time.
        backward_ms: mean time from the forward pass's end to the backward pass's last gradient.
        step_ms: mean time from the backward pass's end to the optimizer step's end.
        comm_ms: mean time in comm hooks launching the collectives.
        wait_ms: mean time blocked in collectives; ``None`` when they are not timed.
        gc_ms: mean garbage-collection pause.
        gap: the data wait is the gap before the forward pass (no loader seen), so it holds the
            loop's host work too.
        wait_p50_ms: the median iteration's wait in collectives, which one slow iteration does not move.
    """

    rank: int
    iterations: int
    etl_ms: float
    forward_ms: float | None
    compute_ms: float
    other_ms: float
    iteration_ms: float
    backward_ms: float | None = None
    step_ms: float | None = None
    comm_ms: float | None = None
    wait_ms: float | None = None
    gc_ms: float = 0.0
    gap: bool = False
    wait_p50_ms: float | None = None


@dataclass(frozen=True, slots=True)
class Straggler:
    """A rank that holds the others back.

    Args:
        rank: the rank.
        cause: one of :data:`CAUSES`.
        excess_ms: how much later than the others it reaches the collective, per iteration.
        evidence: the comparison in plain words.
    """

    rank: int
    cause: str
    excess_ms: float
    evidence: str


def rank_figures(rank: int, values: Mapping[str, object]) -> RankFigures | None:
    """:class:`RankFigures` from a record's (or a window line's) fields: ``window_iterations``,
    ``etl_ms``, ``compute_ms``, ``other_ms``, ``iteration_ms``, ``gc_total_ms``, ``etl_source`` and
    the timed parts ``forward_ms``, ``backward_ms``, ``step_ms``, ``comm_ms``, ``wait_ms`` and
    ``wait_p50_ms`` (at the top level or in ``extra``); ``None`` when a needed figure is missing. Time in
    Ray Train's report (``report_ms``, a barrier outside the step) is left out of the other host time and
    the iteration."""
    extra = values.get("extra")
    extra = extra if isinstance(extra, Mapping) else {}

    def num(key: str) -> float | None:
        v = values.get(key, extra.get(key))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        return float(v)

    n, etl, compute, it = num("window_iterations"), num("etl_ms"), num("compute_ms"), num("iteration_ms")
    if n is None or n < 1 or etl is None or compute is None or it is None:
        return None
    gc_total = num("gc_total_ms")
    # time in Ray Train's report (a barrier every rank waits at, outside the step: trainperf.ray's span)
    # is no rank's lateness, and a margin that held it would hide a straggler
    barrier = min(num("report_ms") or 0.0, num("other_ms") or 0.0)
    return RankFigures(
        rank, int(n), etl, num("forward_ms"), compute, (num("other_ms") or 0.0) - barrier, it - barrier,
        backward_ms=num("backward_ms"), step_ms=num("step_ms"), comm_ms=num("comm_ms"), wait_ms=num("wait_ms"),
        gc_ms=gc_total / n if gc_total is not None else 0.0, gap=values.get("etl_source") == "gap",
        wait_p50_ms=num("wait_p50_ms"),
    )


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


def merge_figures(figures: Sequence[RankFigures]) -> RankFigures:
    """One rank's figures over several spans of iterations, weighted by their iterations (the run's
    figures from its windows, or a window of another rank's length from shorter ones). A part timed
    in only some of them is unknown; the median iteration's wait is the weighted median of theirs.

    Args:
        figures: the same rank's figures, at least one.
    """
    if not figures:
        raise ValueError("figures must hold at least one entry, got none")
    n = sum(f.iterations for f in figures)

    def mean(field: str) -> float:
        return sum(float(getattr(f, field)) * f.iterations for f in figures) / n

    def known(field: str) -> float | None:
        return None if any(getattr(f, field) is None for f in figures) else mean(field)

    p50s = [(f.wait_p50_ms, f.iterations) for f in figures]
    p50: float | None = None
    if all(v is not None for v, _ in p50s):
        ordered = sorted((float(v), w) for v, w in p50s if v is not None)
        half, seen = n / 2.0, 0
        for v, w in ordered:
            seen += w
            if seen >= half:
                p50 = v
                break
    first = figures[0]
    return RankFigures(first.rank, n, mean("etl_ms"), known("forward_ms"), mean("compute_ms"), mean("other_ms"),
                       mean("iteration_ms"), backward_ms=known("backward_ms"), step_ms=known("step_ms"),
                       comm_ms=known("comm_ms"), wait_ms=known("wait_ms"), gc_ms=mean("gc_ms"),
                       gap=all(f.gap for f in figures), wait_p50_ms=p50)


def costly_ranks(run: Sequence[RankFigures]) -> set[int]:
    """The ranks that cost the others time over the run (its figures, no median-iteration check)."""
    return {s.rank for s in find_stragglers(run, typical=False)}


def lateness(figures: Sequence[RankFigures], typical: bool = True) -> list[float]:
    """Each rank's lateness at the collective against the median of the others (see :func:`find_stragglers`)."""
    return _lateness(figures, typical)[0]


def _lateness(figures: Sequence[RankFigures], typical: bool) -> tuple[list[float], bool]:
    """How late each rank reaches the collective, against the median of the others; whether the
    collectives' waits were timed. ``typical``: also late in the median iteration (when known)."""
    waits = [f.wait_ms for f in figures]
    timed = all(w is not None for w in waits)
    if timed:
        own = [-w for w in waits if w is not None]  # waiting least = arriving last
        lateness = [o - m for o, m in zip(own, _medians_of_others(own), strict=True)]
        medians = [f.wait_p50_ms for f in figures]
        if typical and all(m is not None for m in medians):
            # late in most of the window's iterations, not through one slow one (a preempted process)
            usual = [-m for m in medians if m is not None]
            lateness = [min(a, t - m) for a, t, m in zip(lateness, usual, _medians_of_others(usual), strict=True)]
        return lateness, True
    # Outside the step (data wait, host time, GC) a rank's time is its own even in lock-step: the
    # others absorb its excess in their step. With the forward pass, that is all before the
    # collective; without it, the whole step counts too, which tells ranks apart out of lock-step.
    forward_known = all(f.forward_ms is not None for f in figures)
    before = [f.etl_ms + f.other_ms + f.gc_ms + (f.forward_ms or 0.0 if forward_known else 0.0) for f in figures]
    lateness = [b - m for b, m in zip(before, _medians_of_others(before), strict=True)]
    if not forward_known:
        whole = [b + f.compute_ms for b, f in zip(before, figures, strict=True)]
        lateness = [max(a, w - m) for a, w, m in zip(lateness, whole, _medians_of_others(whole), strict=True)]
    return lateness, False


def find_stragglers(figures: Sequence[RankFigures], *, run: Sequence[RankFigures] | None = None,
                    spread: Mapping[int, float] | None = None, typical: bool = True) -> list[Straggler]:
    """The ranks that hold the others back, latest first, each with its cause; empty when none does.

    When every rank's collectives are timed (``wait_ms``), a rank's lateness is how much less it
    waits in them than the median of the others; otherwise it is what precedes the collective: data
    wait, host time after the previous step, GC and the forward pass (the whole step when the forward
    pass is not measured). The latest rank is a straggler when its lateness exceeds
    ``max(10% of the median iteration, 3 ms)``, in the mean and, with ``typical``, in the median
    iteration of the window too (``wait_p50_ms``, when known), so that one preempted iteration names
    no one. It is then left out and the others compared again, so that every rank whose lateness
    passes the margin is named, each against the ranks not named.

    With ``run`` (every rank's figures over the whole run, see :func:`merge_figures`), a rank is
    named when it also costs the others time over the run, or when it is later than ``spread`` and
    the margin (per rank: the most the other, healthy ranks were ever late; see
    :func:`~trainperf.ranks._windows.judge_windows`): lateness that moves from rank to rank window by
    window (a busy host descheduling one rank, then another) evens out over the run and stays within
    that spread, and names nobody.

    The cause is the straggler's phase that exceeds the median of the other ranks' most: ``data``,
    ``forward``, ``backward``, ``optimizer``, ``host``, ``communication``; ``gc`` first when its
    extra pauses make up half of the lateness. A data wait that is only the gap before the forward
    pass (no loader seen) also holds the loop's host work, so it is named ``host``.

    Args:
        figures: one entry per rank, over the same iterations; fewer than two ranks give no straggler.
        run: the same ranks' figures over the run (``typical`` is not asked of them).
        spread: per rank, the lateness beyond which a rank that costs nothing over the run is named.
        typical: ask that the straggler be late in the median iteration too.

    Example:
        >>> ranks = [RankFigures(r, 100, 2.0, 5.0, 40.0, 0.0, 42.0, wait_ms=30.0) for r in range(3)]
        >>> ranks.append(RankFigures(3, 100, 31.0, 5.0, 11.0, 0.0, 42.0, wait_ms=1.0))
        >>> find_stragglers(ranks)[0].cause
        'data'
    """
    if len(figures) < 2:
        return []
    margin = _margin(figures)
    costly = None if run is None else costly_ranks(run)
    left = list(figures)
    named: list[RankFigures] = []
    order, _ = _lateness(left, typical)
    first = dict(zip((f.rank for f in left), order, strict=True))

    def counts(rank: int) -> bool:
        """Whether the rank costs the others over the run or is late beyond the healthy spread."""
        return (costly is None or rank in costly
                or (spread is not None and first[rank] > spread.get(rank, math.inf) + margin))

    while len(left) >= 2:
        # the latest rank past the margin that counts; a rank within the spread stays among the
        # others it is compared with
        ranked = sorted(range(len(left)), key=lambda k: -order[k])
        chosen = next((k for k in ranked if order[k] > margin and counts(left[k].rank)), None)
        if chosen is None:
            break
        named.append(left.pop(chosen))
        order, _ = _lateness(left, typical)
    # each straggler against the ranks not named: what it costs those who wait for it
    unnamed = [f for f in figures if f not in named]
    found = []
    for straggler in named:
        group = [*unnamed, straggler]
        behind, timed = _lateness(group, typical)
        late = max(behind[-1], margin)
        cause, evidence = _cause(group, len(group) - 1, late, timed)
        found.append(Straggler(straggler.rank, cause, late, evidence))
    return found


def _cause(figures: Sequence[RankFigures], i: int, late: float, timed: bool) -> tuple[str, str]:
    """The straggler's phase that exceeds the other ranks' most, and the evidence in words."""
    excess: dict[str, tuple[float, float, float]] = {}  # cause -> (excess, its value, others' median)
    phases = list(_PHASES)
    if not timed and figures[i].forward_ms is None:
        phases.append(("compute", "compute_ms", "step"))
    for cause, field, _ in phases:
        values: list[float | None] = [getattr(f, field) for f in figures]
        if any(v is None for v in values):
            continue
        known = [float(v) for v in values if v is not None]
        median = _medians_of_others(known)[i]
        excess[cause] = (known[i] - median, known[i], median)
    f = figures[i]
    tail = (f"the others wait {late:.1f} ms longer in the collective" if timed
            else "the others wait for it in the collective")
    if "gc" in excess and excess["gc"][0] >= GC_SHARE * late:
        cause = "gc"
    else:
        cause = max((c for c in excess if c != "gc"), key=lambda c: excess[c][0], default="compute")
    if cause not in excess:
        return cause, f"rank {f.rank} reaches the collective {late:.1f} ms late; {tail}"
    _, value, median = excess[cause]
    words = next((w for c, _, w in _PHASES if c == cause), "step")
    if cause == "data" and f.gap:
        cause = "host"
        words = "time before the forward pass (data from an untimed iterable, or host work)"
    return cause, f"rank {f.rank}: {words} {value:.1f} ms vs {median:.1f} ms median of the others; {tail}"


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
    return (f"cluster: {counted(len(figures), 'rank')}; iteration {low:.1f}-{high:.1f} ms (spread {spread:.1f} ms, "
            f"{share:.0f}%); slowest rank {slowest_rank}; {why or 'no straggler'}")
