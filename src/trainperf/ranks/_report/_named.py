"""The report's stragglers: window by window over the ranks' common windows, kept to the ranks that
cost the others time over the run, and the ranks whose cost over the run comes from a few
iterations (a checkpoint every n-th step), with the pattern their spans show."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any

from .._layout import SPAN_PHASES
from .._pattern import recurrence
from .._stragglers import RankFigures, Straggler, find_stragglers, rank_figures
from .._windows import common_windows, judge_windows
from ._load import Rank
from ._read import rounded as _r

__all__ = ["named_stragglers", "steady"]

#: A rank is listed as a straggler when it is one in at least this many windows and this share of
#: the windows compared; its windows are listed (at most ``MAX_LISTED_WINDOWS``).
MIN_WINDOWS = 2
MIN_SHARE = 0.02
MAX_LISTED_WINDOWS = 1000

#: The span phases that hold each cause's time, and the words for it in a pattern.
_PHASES_OF: dict[str, tuple[tuple[str, ...], str]] = {
    "data": (("data",), "data wait"),
    "host": (("other",), "host time"),
    "forward": (("forward",), "forward pass"),
    "backward": (("backward",), "backward pass"),
    "optimizer": (("step",), "optimizer step"),
}


def steady(rank: Rank) -> list[int]:
    """The rank's windows past warm-up (all of them when every window is warm-up): the one window
    set behind every figure of the report, its headline, tables and stragglers alike."""
    w = rank.windows
    return [k for k in range(rank.n_windows) if not w["warmup"][k]] or list(range(rank.n_windows))


def _figures(rank: Rank, k: int) -> RankFigures | None:
    w = rank.windows
    keys = ("window_iterations", "etl_ms", "compute_ms", "other_ms", "iteration_ms", "gc_total_ms", "forward_ms",
            "backward_ms", "step_ms", "comm_ms", "wait_ms", "wait_p50_ms", "report_ms")
    values: dict[str, object] = {key: w[key][k] for key in keys}
    values["etl_source"] = "gap" if w["gap"][k] else "loader"
    return rank_figures(rank.rank, values)



def named_stragglers(ranks: Sequence[Rank]) -> tuple[list[dict[str, Any]], int]:
    """The run's stragglers (rank, cause, typical excess, evidence, windows, share, iterations, and
    ``pattern`` when the time comes from some iterations only) and the number of windows compared."""
    by_rank: dict[int, list[tuple[int, RankFigures]]] = {}
    for rank in ranks:
        rows = [(int(rank.windows["iteration"][k]), _figures(rank, k)) for k in steady(rank)]
        by_rank[rank.rank] = sorted((last, f) for last, f in rows if f is not None)
    windows = [(last, figures) for last, figures in common_windows(by_rank) if len(figures) >= 2]
    if not windows:
        return [], 0
    judged, run = judge_windows([figures for _, figures in windows])
    found: dict[tuple[int, str], list[tuple[int, Straggler]]] = {}
    for (last, _), stragglers in zip(windows, judged, strict=True):
        for s in stragglers:
            found.setdefault((s.rank, s.cause), []).append((last, s))
    analysed = len(windows)
    needed = max(MIN_WINDOWS, math.ceil(MIN_SHARE * analysed))
    by_number = {r.rank: r for r in ranks}
    over_run = {s.rank: s for s in find_stragglers(run, typical=False)}
    out: list[dict[str, Any]] = []
    for (who, cause), items in found.items():
        if len(items) < needed:
            continue
        ordered = sorted((s for _, s in items), key=lambda s: s.excess_ms)
        typical = ordered[len(ordered) // 2]
        out.append(_entry(typical, items, analysed, _pattern(by_number[who], cause, run)))
    listed = {s["rank"] for s in out}
    # a rank that costs the others time over the run without being late in most iterations of a
    # window: work done in some iterations only (a checkpoint every n-th step)
    for s in over_run.values():
        if s.rank not in listed:
            entry = _entry(s, found.get((s.rank, s.cause), []), analysed, _pattern(by_number[s.rank], s.cause, run))
            out.append({**entry, "evidence": f"{s.evidence}, over the run"})
    for entry in out:
        whole = over_run.get(entry["rank"])
        regular = str(entry["pattern"] or "").startswith("every ")
        if regular and whole is not None and whole.cause == entry["cause"]:
            # time spent in some iterations: what it costs the others is the run's figure
            entry["excess_ms"], entry["evidence"] = _r(whole.excess_ms), f"{whole.evidence}, over the run"
    out.sort(key=lambda s: (-int(s["windows"]), -float(s["excess_ms"] or 0.0)))
    return out, analysed


def _entry(s: Straggler, items: Sequence[tuple[int, Straggler]], analysed: int, pattern: str | None) -> dict[str, Any]:
    return {"rank": s.rank, "cause": s.cause, "excess_ms": _r(s.excess_ms), "evidence": s.evidence,
            "windows": len(items), "share": _r(len(items) / analysed, 3),
            "iterations": [i for i, _ in items[:MAX_LISTED_WINDOWS]], "pattern": pattern}


def _pattern(rank: Rank, cause: str, run: Sequence[RankFigures]) -> str | None:
    """When the rank's time in the cause's phase stands out, iteration by iteration (its spans)."""
    figures = next((f for f in run if f.rank == rank.rank), None)
    if cause not in _PHASES_OF:
        return None  # GC, a comm hook: no span of their own to tell the iterations apart
    phases, words = _PHASES_OF[cause]
    if cause == "host" and figures is not None and figures.gap:
        phases = ("data", "other")  # the gap before the forward pass holds the host work
    wanted = {SPAN_PHASES.index(p) for p in phases}
    # every iteration with spans, in order (the timeline is read so): one without the phase spent none in it
    iterations, spent = array("q"), array("d")
    for i, phase, d in zip(rank.span_iter, rank.span_phase, rank.span_d, strict=True):
        if not iterations or iterations[-1] != i:
            iterations.append(i)
            spent.append(0.0)
        if phase in wanted:
            spent[-1] += 1000.0 * d
    if not iterations:
        return None
    median_iteration = sorted(f.iteration_ms for f in run)[len(run) // 2]
    return recurrence(iterations, spent, max(0.1 * median_iteration, 3.0), words)
