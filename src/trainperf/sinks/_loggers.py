"""Lightning loggers, or anything with ``log_metrics(metrics, step)``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._record import PerformanceRecord
from ._metrics import scalar_metrics

__all__ = ["LoggerSink"]


class LoggerSink:
    """Sends figures to Lightning loggers (or anything with ``log_metrics(metrics, step)``), keyed by
    the iteration (the optimizer step), so they land in the TensorBoard, CSV or MLflow loggers a
    Trainer already has.

    Args:
        loggers: one logger or several; a ``Trainer`` works too (its ``loggers`` are used).
        prefix: metric-name prefix (default ``trainperf/``).
    """

    def __init__(self, loggers: Any, *, prefix: str = "trainperf/") -> None:
        self._source = loggers
        self.prefix = prefix

    @property
    def loggers(self) -> list[Any]:
        source = self._source
        if hasattr(source, "loggers"):
            return list(source.loggers)
        if hasattr(source, "log_metrics"):
            return [source]
        if isinstance(source, Iterable):
            return list(source)
        raise TypeError(f"loggers must be a logger, a list of loggers or a Trainer, got {source!r}")

    def __call__(self, record: PerformanceRecord) -> None:
        metrics = scalar_metrics(record, self.prefix)
        for logger in self.loggers:
            logger.log_metrics(metrics, step=record.iteration)
