"""TensorBoard scalars."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..base import check_str
from ..records import PerformanceRecord
from ._metrics import scalar_metrics

__all__ = ["TensorBoardSink"]


class TensorBoardSink:
    """Writes every figure as a TensorBoard scalar, at the record's iteration.

    Args:
        log_dir: the run's folder (``SummaryWriter``'s ``log_dir``), or an existing ``writer``.
        writer: a ``torch.utils.tensorboard.SummaryWriter`` to use instead; it is then not closed.
        prefix: tag prefix (default ``trainperf/``).

    Raises:
        ImportError: at construction, with the install command, when ``tensorboard`` is missing.
    """

    def __init__(
        self, log_dir: str | os.PathLike[str] | None = None, *, writer: Any = None, prefix: str = "trainperf/"
    ) -> None:
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a str, an os.PathLike or None, got {log_dir!r}")
        if writer is not None and log_dir is not None:
            raise ValueError("give log_dir or writer, not both")
        if writer is not None and not all(callable(getattr(writer, m, None)) for m in ("add_scalar", "flush")):
            raise TypeError(f"writer must be a SummaryWriter (with add_scalar and flush), got {writer!r}")
        self.prefix = check_str("prefix", prefix)
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

    def __call__(self, record: PerformanceRecord) -> None:
        self.write_many((record,))

    def write_many(self, records: Sequence[PerformanceRecord]) -> None:
        """Add the scalars of ``records`` and flush once (the writer thread hands over what it holds)."""
        add_scalar = self.writer.add_scalar
        for record in records:
            for tag, value in scalar_metrics(record, self.prefix).items():
                add_scalar(tag, value, global_step=record.iteration, walltime=record.timestamp)
        self.writer.flush()

    def close(self) -> None:
        if self._owned:
            self.writer.close()

    def __enter__(self) -> TensorBoardSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
