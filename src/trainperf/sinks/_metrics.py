"""A record's figures as a flat ``{name: float}``: what metric loggers take."""

from __future__ import annotations

from ..records import PerformanceRecord, metric_fields

__all__ = ["scalar_metrics"]

_SCALARS = metric_fields()


def scalar_metrics(record: PerformanceRecord, prefix: str = "trainperf/") -> dict[str, float]:
    """The record's numeric figures as ``{prefix + name: value}``, leaving out the missing ones, with
    ``data_wait_pct`` and ``gc_pct`` (data wait and GC pauses as shares of the window's wall time, the
    shares the verdict weighs), each collector's ``gc/<name>/count`` and ``ms``, and ``verdict_pct``."""
    if not isinstance(record, PerformanceRecord):
        raise TypeError(f"record must be a PerformanceRecord, got {record!r}")
    out: dict[str, float] = {}
    for name in _SCALARS:
        value = getattr(record, name)
        if value is not None:
            out[prefix + name] = float(value)
    # the shares of the window's wall time the verdict weighs, charted beside the user's own metrics
    window_ms = record.window_s * 1000.0
    if window_ms > 0 and record.etl_total_ms is not None:
        out[prefix + "data_wait_pct"] = min(100.0, 100.0 * record.etl_total_ms / window_ms)
    if window_ms > 0 and record.gc_total_ms is not None:
        out[prefix + "gc_pct"] = min(100.0, 100.0 * record.gc_total_ms / window_ms)
    for stat in record.gc:
        out[f"{prefix}gc/{stat.name}/count"] = float(stat.count)
        if stat.ms is not None:
            out[f"{prefix}gc/{stat.name}/ms"] = stat.ms
    if record.verdict is not None:
        out[prefix + "verdict_pct"] = record.verdict.share
    return out
