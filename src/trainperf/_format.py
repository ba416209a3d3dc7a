"""The one-line text form of a record, in Deeplearning4j's field names and order."""

from __future__ import annotations

import math

from ._record import PerformanceRecord

__all__ = ["format_line", "format_number"]


def format_number(value: float) -> str:
    """At least three significant digits and at most one decimal above 100.

    Sub-millisecond times stay readable (``0.0412``) and large rates stay short (``1285.1``).
    ``NaN`` and infinities are written as Deeplearning4j writes them (``NaN``, ``Infinity``).
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = 1 if magnitude >= 2 else 2 - magnitude
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".") if magnitude < 2 else text
    return text


def format_line(record: PerformanceRecord) -> str:
    """``ETL: …; iteration N; iteration time: …; samples/sec: …; batches/sec: …; score: …; GC: …;``

    followed by trainperf's own fields (window percentiles, ETL max, epoch, warm-up, verdict).
    Fields that are ``None`` are left out, as Deeplearning4j leaves out what it was told not to report.
    """
    parts: list[str] = []
    if record.etl_ms is not None:
        parts.append(f"ETL: {format_number(record.etl_ms)} ms")
    parts.append(f"iteration {record.iteration}")
    if record.iteration_ms is not None:
        parts.append(f"iteration time: {format_number(record.iteration_ms)} ms")
    if record.samples_per_sec is not None:
        parts.append(f"samples/sec: {format_number(record.samples_per_sec)}")
    if record.batches_per_sec is not None:
        parts.append(f"batches/sec: {format_number(record.batches_per_sec)}")
    if record.score is not None:
        parts.append(f"score: {format_number(record.score)}")
    if record.gc:
        stats = ", ".join(
            f"[{s.name}: {s.count} ({format_number(s.ms)}ms)]" if s.ms is not None else f"[{s.name}: {s.count}]"
            for s in record.gc
        )
        parts.append(f"GC: {stats}")
    if record.iteration_p50_ms is not None:
        parts.append(f"iteration p50: {format_number(record.iteration_p50_ms)} ms")
    if record.iteration_p95_ms is not None:
        parts.append(f"p95: {format_number(record.iteration_p95_ms)} ms")
    if record.iteration_max_ms is not None:
        parts.append(f"max: {format_number(record.iteration_max_ms)} ms")
    if record.etl_max_ms is not None:
        parts.append(f"ETL max: {format_number(record.etl_max_ms)} ms")
    if record.epoch is not None:
        parts.append(f"epoch: {record.epoch}")
    if record.rank is not None:
        parts.append(f"rank: {record.rank}")
    if record.warmup:
        parts.append("warm-up")
    if record.verdict is not None:
        parts.append(f"verdict: {record.verdict.kind} ({record.verdict.reason})")
    return "; ".join(parts) + ";"
