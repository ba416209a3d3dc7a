"""The run over time: the cluster's throughput and iteration time, and each rank's shares of its
time, in at most a few hundred stretches of iterations however long the run."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from ._load import Rank
from ._read import rounded as _r

__all__ = ["over_time"]

#: Throughput-over-time points, and per-rank timeline cells, at most.
MAX_POINTS = 300


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def over_time(ranks: Sequence[Rank], start: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Throughput over time for the cluster and each rank's figures, at most :data:`MAX_POINTS` buckets."""
    top = max((max(_finite(r.windows["iteration"]), default=0.0) for r in ranks), default=0.0)
    distinct = max((r.n_windows for r in ranks), default=0)
    n = max(1, min(MAX_POINTS, distinct))
    width = top / n if top > 0 else 1.0
    per_rank: list[dict[str, Any]] = []
    cells: list[dict[int, list[float]]] = []
    for rank in ranks:
        w = rank.windows
        acc: dict[int, list[float]] = {}  # bucket -> [t0, t1, iters, it*n, etl*n, compute*n, other*n, sps*n, n_sps]
        for k in range(rank.n_windows):
            b = min(n - 1, max(0, int((w["iteration"][k] - 1) // width)))
            t1, ws, m = w["timestamp"][k], w["window_s"][k], w["window_iterations"][k]
            if not (math.isfinite(t1) and math.isfinite(ws)):
                continue
            cell = acc.get(b)
            if cell is None:
                cell = acc[b] = [t1 - ws, t1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
            cell[0], cell[1] = min(cell[0], t1 - ws), max(cell[1], t1)
            cell[2] += m
            for slot, key in ((3, "iteration_ms"), (4, "etl_ms"), (5, "compute_ms"), (6, "other_ms")):
                v = w[key][k]
                cell[slot] += (v if math.isfinite(v) else 0.0) * m
            sps = w["samples_per_sec"][k]
            if math.isfinite(sps):
                cell[7] += sps * ws
                cell[8] += ws
        cells.append(acc)
        rows = []
        for b in sorted(acc):
            c = acc[b]
            rows.append([_r(c[0] - start, 4), _r(c[1] - start, 4), _r(c[3] / c[2]), _r(c[4] / c[2]),
                         _r(c[5] / c[2]), _r(c[6] / c[2])])
        per_rank.append({"rank": rank.rank, "rows": rows})
    cluster: list[dict[str, Any]] = []
    for b in range(n):
        here = [acc[b] for acc in cells if b in acc]
        if not here:
            continue
        its = [c[3] / c[2] for c in here]
        etls = [c[4] / c[2] for c in here]
        rates = [c[7] / c[8] for c in here if c[8] > 0]
        cluster.append({
            "iteration": int(min(top, (b + 1) * width)),
            "t": _r(max(c[1] for c in here) - start, 4),
            "ranks": len(here),
            "samples_per_sec": _r(sum(rates), 1) if rates else None,
            "iteration_ms": {"median": _r(statistics.median(its)), "max": _r(max(its))},
            "etl_ms": {"median": _r(statistics.median(etls)), "max": _r(max(etls))},
        })
    return cluster, per_rank
