"""What ranks tell each other, as plain arithmetic: a peer's clock offset from ping-pong round
trips, and the mean figures per iteration a rank posts for a gather."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..records import PerformanceRecord

__all__: list[str] = []

#: The figures a rank posts per gather (means per iteration).
TIMES = ("etl_ms", "forward_ms", "backward_ms", "comm_ms", "wait_ms", "wait_p50_ms", "step_ms", "compute_ms",
         "other_ms", "iteration_ms")


def clock_offset(trips: Sequence[tuple[float, float, float]]) -> tuple[float, float] | None:
    """A peer's clock offset from round trips ``(sent, theirs, back)``: sent and back on this clock,
    ``theirs`` the peer's reading in between. The shortest trip bounds it best: ``(offset, half)``,
    where this clock reads ``offset`` seconds ahead of the peer's, give or take ``half`` (half that
    trip). ``None`` without a trip.

    Example:
        >>> clock_offset([(10.0, 7.0, 10.5), (11.0, 8.0625, 11.125)])
        (3.0, 0.0625)
    """
    best: tuple[float, float] | None = None
    for sent, theirs, back in trips:
        half = (back - sent) / 2.0
        if best is None or half < best[1]:
            best = ((sent + back) / 2.0 - theirs, half)
    return best


def mean_figures(reports: Sequence[PerformanceRecord]) -> dict[str, Any]:
    """This rank's mean figures per iteration over ``reports`` (what a gather posts)."""
    n = sum(r.window_iterations for r in reports)
    out: dict[str, Any] = {"window_iterations": n, "last": reports[-1].iteration if reports else 0,
                           "first": reports[0].iteration - reports[0].window_iterations + 1 if reports else 0}
    for name in TIMES:
        total = 0.0
        for r in reports:
            value = getattr(r, name, None) if name in ("etl_ms", "compute_ms", "other_ms", "iteration_ms") \
                else r.extra.get(name)
            if value is None or (isinstance(value, float) and not math.isfinite(value)):
                total = math.nan
                break
            total += float(value) * r.window_iterations
        if n and math.isfinite(total):
            out[name] = total / n
    gc = [r.gc_total_ms for r in reports]
    if all(g is not None for g in gc):
        out["gc_total_ms"] = sum(g for g in gc if g is not None)
    sources = {r.etl_source for r in reports}
    if sources == {"gap"}:
        out["etl_source"] = "gap"
    return out
