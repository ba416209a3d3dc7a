"""Each profiler capture of a run beside the window that triggered it: the figures of that window,
when the rank's windows read hold it, and the capture's own."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from ._load import Rank
from ._read import rounded as _r

__all__ = ["captures_beside_windows"]

#: The triggering window's figures a capture lists (``None`` where the window has none).
TRIGGER_FIGURES = ("iteration_ms", "iteration_p50_ms", "iteration_p95_ms", "iteration_max_ms", "etl_ms")


def _window_of(rank: Rank, first: int, last: int) -> int | None:
    """The index of the rank's window of iterations ``first`` to ``last``, when it was read."""
    w = rank.windows
    iterations = w["iteration"]
    k = bisect_left(iterations, float(last))  # ascending: the windows of the rank's last run
    if k < len(iterations) and iterations[k] == last and iterations[k] - w["window_iterations"][k] + 1 == first:
        return k
    return None


def _trigger_window(rank: Rank, k: int, start: float) -> dict[str, Any]:
    w = rank.windows
    t1, ws = w["timestamp"][k], w["window_s"][k]
    out: dict[str, Any] = {key: _r(w[key][k]) for key in TRIGGER_FIGURES}
    out["warmup"] = bool(w["warmup"][k])
    out["t0"] = _r(t1 - ws - start, 4)
    out["t1"] = _r(t1 - start, 4)
    return out


def captures_beside_windows(ranks: Sequence[Rank], start: float) -> tuple[list[dict[str, Any]], int]:
    """Every rank's profiler captures beside the window that triggered each (its figures, when the
    rank's windows hold it), by rank and iteration (the first
    :data:`~trainperf.ranks._report._events.MAX_CAPTURES`, which are all that reading keeps), and how
    many there are."""
    out: list[dict[str, Any]] = []
    for rank in ranks:
        for event in rank.captures:
            first, last = event["trigger_first_iteration"], event["trigger_last_iteration"]
            k = _window_of(rank, first, last)
            t = event.get("t")
            out.append({
                "rank": rank.rank,
                "trigger_first_iteration": first,
                "trigger_last_iteration": last,
                "trigger_window": None if k is None else _trigger_window(rank, k, start),
                "reason": event["reason"],
                "first_iteration": event["first_iteration"],
                "last_iteration": event["last_iteration"],
                "iterations": event["iterations"],
                "path": event["path"],
                "bytes": event["bytes"],
                "trimmed_events": event["trimmed_events"],
                "traced_iteration_ms": _r(event["traced_iteration_ms"]),
                "trigger_median_ms": _r(event["trigger_median_ms"]),
                "cost_ms": _r(event["cost_ms"]),
                "export_ms": _r(event["export_ms"]),
                "t": None if t is None else _r(t - start, 4),
            })
    out.sort(key=lambda c: (c["rank"], c["trigger_last_iteration"], c["first_iteration"], c["path"]))
    return out, sum(rank.captures_total for rank in ranks)
