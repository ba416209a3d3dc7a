"""Lightning loggers, or anything with ``log_metrics(metrics, step)``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..base import check_str
from ..records import PerformanceRecord
from ._metrics import scalar_metrics

__all__ = ["LoggerSink"]


class LoggerSink:
    """Sends figures to Lightning loggers (or anything with ``log_metrics(metrics, step)``), so they
    land in the TensorBoard, CSV or MLflow loggers a Trainer already has.

    Given a ``Trainer``, the step is the one Lightning logs its own metrics at (and ``epoch`` is
    added), so the figures share rows with the module's metrics and continue after a resume from a
    checkpoint (it then runs on the training thread, where the trainer's state and loggers are);
    given loggers, the step is the record's iteration.

    Args:
        loggers: one logger or several; a ``Trainer`` works too (its ``loggers`` are used).
        prefix: metric-name prefix (default ``trainperf/``).
    """

    def __init__(self, loggers: Any, *, prefix: str = "trainperf/") -> None:
        self._source = loggers
        # Given a Trainer, its step and epoch are read when the record arrives, and its loggers belong
        # to the thread that trains: this sink runs there, inside the report.
        self.on_training_thread = hasattr(loggers, "loggers") and hasattr(loggers, "global_step")
        self.prefix = check_str("prefix", prefix)
        for logger in self.loggers:  # checks ``loggers`` now rather than at the first record
            if not callable(getattr(logger, "log_metrics", None)):
                raise TypeError(f"loggers must be loggers with log_metrics(metrics, step), got {logger!r}")

    @property
    def loggers(self) -> list[Any]:
        source = self._source
        if hasattr(source, "loggers"):
            return list(source.loggers)
        if hasattr(source, "log_metrics"):
            return [source]
        if isinstance(source, Iterable) and not isinstance(source, (str, bytes)):
            return list(source)
        raise TypeError(f"loggers must be a logger, a list of loggers or a Trainer, got {source!r}")

    def __call__(self, record: PerformanceRecord) -> None:
        metrics = scalar_metrics(record, self.prefix)
        step = record.iteration
        trainer = self._source if hasattr(self._source, "loggers") and hasattr(self._source, "global_step") else None
        if trainer is not None:
            # Lightning's own step for logged metrics (optimizer-stepped batches, restored on resume)
            # and its epoch: the figures land in the same rows as the module's own metrics.
            loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
            stepped = getattr(loop, "_batches_that_stepped", None)
            step = int(stepped) if isinstance(stepped, int) else int(trainer.global_step)
            metrics["epoch"] = int(trainer.current_epoch)
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)
