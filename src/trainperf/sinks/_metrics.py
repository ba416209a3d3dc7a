"""A record's figures as a flat ``{name: float}``: what metric loggers take."""

from __future__ import annotations

from ..records import PerformanceRecord, metric_fields

__all__ = ["scalar_metrics"]

_SCALARS = metric_fields()


def scalar_metrics(record: PerformanceRecord, prefix: str = "trainperf/") -> dict[str, float]:
    """The record's numeric figures as ``{prefix + name: value}``, leaving out the missing ones."""
    if not isinstance(record, PerformanceRecord):
        raise TypeError(f"record must be a PerformanceRecord, got {record!r}")
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
