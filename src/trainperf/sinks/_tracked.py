"""What the experiment-tracker sinks (Weights & Biases, MLflow) share: which records a rank logs and
under which prefix, a record's figures as finite metrics (the verdict among them), the verdict's text
when it changes, and the cluster's world figures and straggler line (rank 0's link hands them over)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..base import check_bool, check_str
from ..records import PerformanceRecord
from ._metrics import scalar_metrics

__all__ = ["Tracked", "check_start", "cluster_metrics", "record_metrics"]

#: The longest verdict text handed to a tracker (MLflow keeps tags of up to 8,000 characters).
TEXT_LIMIT = 5000


def check_start(start: object, init: object, run: object, starts: str) -> bool:
    """The checks of a tracker sink's ``start``, ``init`` and ``run`` arguments (``starts`` names the call
    that starts a run, for the message); ``start`` as a bool."""
    started = check_bool("start", start)
    if init is not None and not isinstance(init, Mapping):
        raise TypeError(f"init must be a mapping of {starts}'s arguments or None, got {init!r}")
    if init is not None and not started:
        raise ValueError("init is for the run the sink starts: give start=True with it")
    if run is not None and started:
        raise ValueError("give run or start=True, not both")
    return started


def record_metrics(record: PerformanceRecord, prefix: str) -> dict[str, float]:
    """The record's figures as ``{prefix + name: value}``, finite ones only, with the verdict as
    ``verdict_pct`` (its share) and ``verdict/<kind>_pct`` (the same share under the verdict's own
    name, so each verdict is a line of its own on a chart: present in the windows it held)."""
    metrics = {name: value for name, value in scalar_metrics(record, prefix).items() if math.isfinite(value)}
    verdict = record.verdict
    if verdict is not None and math.isfinite(verdict.share):
        metrics[f"{prefix}verdict/{verdict.kind}_pct"] = verdict.share
    return metrics


def verdict_text(record: PerformanceRecord) -> str | None:
    """``"<kind> (<share>%): <reason>"``, or ``None`` for a record without a verdict."""
    verdict = record.verdict
    if verdict is None:
        return None
    text = f"{verdict.kind} ({verdict.share:.0f}%): {verdict.reason}" if verdict.reason else verdict.kind
    return text[:TEXT_LIMIT]


def cluster_metrics(event: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """Rank 0's cluster event (``kind`` ``"cluster"``, see :mod:`trainperf.torch`'s link) as metrics
    under ``prefix + "world/"``: the ranks compared, the fastest and slowest rank's iteration time and
    the spread, the slowest data wait, the stragglers found, and the first one's rank and lateness (also
    as ``straggler/<cause>_ms``, so each cause is a line of its own). Other events give none."""
    if event.get("kind") != "cluster":
        return {}
    world = prefix + "world/"
    out: dict[str, float] = {}
    for name in ("ranks", "iteration_ms_min", "iteration_ms_max", "spread_pct", "etl_ms_max"):
        value = event.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[world + name] = float(value)
    stragglers = event.get("stragglers") or []
    out[world + "stragglers"] = float(len(stragglers))
    if stragglers:
        first = stragglers[0]
        out[world + "straggler_rank"] = float(first["rank"])
        out[world + "straggler_excess_ms"] = float(first["excess_ms"])
        out[f"{world}straggler/{first['cause']}_ms"] = float(first["excess_ms"])  # a line per cause
    return out


class Tracked:
    """Per sink: which records this process logs, each record's metric prefix, the verdict's and the
    cluster line's text when they change.

    Args:
        prefix: the metrics' prefix (default ``trainperf/``).
        all_ranks: in a multi-rank run, every rank logs its own figures under ``<prefix>rank<r>/``;
            else (the default) only rank 0 logs, under ``prefix``, beside the world figures.
    """

    def __init__(self, prefix: str, all_ranks: bool) -> None:
        self.prefix = check_str("prefix", prefix)
        self.all_ranks = check_bool("all_ranks", all_ranks)
        self._verdict: dict[str, str] = {}  # prefix -> the last verdict's kind logged

    def prefix_for(self, record: PerformanceRecord) -> str | None:
        """The prefix ``record``'s metrics go under, or ``None`` when this process does not log it."""
        rank = record.rank
        if self.all_ranks:
            return self.prefix if rank is None else f"{self.prefix}rank{rank}/"
        return self.prefix if rank in (None, 0) else None

    def new_verdict(self, record: PerformanceRecord, prefix: str) -> str | None:
        """The record's verdict text when its kind differs from the last one logged under ``prefix``
        (the first verdict included); ``None`` while the verdict stays what it was."""
        verdict = record.verdict
        if verdict is None or self._verdict.get(prefix) == verdict.kind:
            return None
        self._verdict[prefix] = verdict.kind
        return verdict_text(record)
