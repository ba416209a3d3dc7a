"""The one-line text form of a record, in Deeplearning4j's field names and order."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._record import PerformanceRecord

__all__ = ["format_line"]


@dataclass(frozen=True)
class LineField:
    """One ``label value unit;`` field of the line; the parser's patterns are built from the same table.

    Args:
        name: the record field, and the column :func:`trainperf.parse_log` reads it into.
        label: the text before the value, with its trailing space.
        unit: the text after the value (`` ms`` or nothing).
        integer: the value is a whole number, written as it is.
    """

    name: str
    label: str
    unit: str = ""
    integer: bool = False
    hide_zero: bool = False

    def render(self, value: float) -> str:
        return f"{self.label}{int(value) if self.integer else format_number(value)}{self.unit}"


#: Deeplearning4j's fields, in its order; the ``GC:`` field follows them.
DL4J_FIELDS = (
    LineField("etl_ms", "ETL: ", " ms"),
    LineField("iteration", "iteration ", integer=True),
    LineField("iteration_ms", "iteration time: ", " ms"),
    LineField("samples_per_sec", "samples/sec: "),
    LineField("batches_per_sec", "batches/sec: "),
    LineField("score", "score: "),
)
#: trainperf's own fields after ``GC:``; ``warm-up`` and ``verdict: kind (reason)`` close the line.
TRAINPERF_FIELDS = (
    LineField("iteration_p50_ms", "iteration p50: ", " ms"),
    LineField("iteration_p95_ms", "p95: ", " ms"),
    LineField("iteration_max_ms", "max: ", " ms"),
    LineField("etl_max_ms", "ETL max: ", " ms"),
    LineField("other_ms", "other: ", " ms", hide_zero=True),
    LineField("skipped_steps", "skipped steps: ", integer=True, hide_zero=True),
    LineField("epoch", "epoch: ", integer=True),
    LineField("rank", "rank: ", integer=True),
)


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
    parts = [f.render(value) for f in DL4J_FIELDS if (value := getattr(record, f.name)) is not None]
    if record.gc:
        stats = ", ".join(
            f"[{s.name}: {s.count} ({format_number(s.ms)}ms)]" if s.ms is not None else f"[{s.name}: {s.count}]"
            for s in record.gc
        )
        parts.append(f"GC: {stats}")
    parts += [
        f.render(value)
        for f in TRAINPERF_FIELDS
        if (value := getattr(record, f.name)) is not None and not (f.hide_zero and value == 0)
    ]
    if record.warmup:
        parts.append("warm-up")
    if record.verdict is not None:
        parts.append(f"verdict: {record.verdict.kind} ({record.verdict.reason})")
    return "; ".join(parts) + ";"
