"""A tqdm progress bar's postfix."""

from __future__ import annotations

from typing import Any

from ..records import PerformanceRecord

__all__ = ["TqdmSink"]


class TqdmSink:
    """Shows samples/sec, data wait and the verdict in a tqdm progress bar's postfix.

    Args:
        bar: the ``tqdm`` bar of the training loop.
    """

    def __init__(self, bar: Any) -> None:
        if not hasattr(bar, "set_postfix"):
            raise TypeError(f"bar must be a tqdm progress bar, got {bar!r}")
        self.bar = bar

    def __call__(self, record: PerformanceRecord) -> None:
        postfix: dict[str, str] = {}
        if record.samples_per_sec is not None:
            postfix["samples/s"] = f"{record.samples_per_sec:.1f}"
        if record.etl_ms is not None:
            postfix["ETL"] = f"{record.etl_ms:.3g}ms"
        if record.verdict is not None and record.verdict.kind != "fine":
            postfix["verdict"] = record.verdict.kind
        self.bar.set_postfix(postfix, refresh=False)
