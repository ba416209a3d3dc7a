"""Sinks that hand records to other tools: TensorBoard, Lightning loggers, tqdm."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._record import PerformanceRecord

__all__ = ["TensorBoardSink", "LoggerSink", "TqdmSink", "scalar_metrics"]

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


class TensorBoardSink:
    """Writes every figure as a TensorBoard scalar, at the record's iteration.

    Args:
        log_dir: the run's folder (``SummaryWriter``'s ``log_dir``), or an existing ``writer``.
        writer: a ``torch.utils.tensorboard.SummaryWriter`` to use instead; it is then not closed.
        prefix: tag prefix (default ``trainperf/``).

    Raises:
        ImportError: at construction, with the install command, when ``tensorboard`` is missing.
    """

    def __init__(self, log_dir: str | None = None, *, writer: Any = None, prefix: str = "trainperf/") -> None:
        if writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise ImportError(
                    "TensorBoardSink needs tensorboard and torch: pip install 'trainperf[tensorboard,torch]'"
                ) from exc
            writer = SummaryWriter(log_dir=log_dir)
            self._owned = True
        else:
            self._owned = False
        self.writer = writer
        self.prefix = prefix

    def __call__(self, record: PerformanceRecord) -> None:
        for tag, value in scalar_metrics(record, self.prefix).items():
            self.writer.add_scalar(tag, value, global_step=record.iteration, walltime=record.timestamp)
        self.writer.flush()

    def close(self) -> None:
        if self._owned:
            self.writer.close()

    def __enter__(self) -> TensorBoardSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
