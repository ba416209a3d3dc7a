"""A record's figures as a flat ``{name: float}``: what metric loggers take."""

from __future__ import annotations

from .._record import PerformanceRecord

__all__ = ["scalar_metrics"]

_SCALARS = (
    "etl_ms", "etl_max_ms", "iteration_ms", "iteration_p50_ms", "iteration_p95_ms", "iteration_max_ms",
    "samples_per_sec", "batches_per_sec", "score", "gc_total_ms",
)


def scalar_metrics(record: PerformanceRecord, prefix: str = "trainperf/") -> dict[str, float]:
    """The record's numeric figures as ``{prefix + name: value}``, leaving out the missing ones."""
    out: dict[str, float] = {}
    for name in _SCALARS:
        value = getattr(record, name)
        if value is not None:
            out[prefix + name] = float(value)
    for stat in record.gc:
        out[f"{prefix}gc/{stat.name}/count"] = float(stat.count)
        if stat.ms is not None:
            out[f"{prefix}gc/{stat.name}/ms"] = stat.ms
    if record.verdict is not None:
        out[prefix + "verdict_pct"] = record.verdict.share
    return out
