"""Sinks: where records go. A sink is any callable taking a record, with an optional ``close()``."""

from __future__ import annotations

import logging
import sys
import traceback
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Protocol, overload, runtime_checkable

from ._format import format_line
from ._record import PerformanceRecord

__all__ = ["Sink", "MemorySink", "LoggingSink", "SinkError", "LOGGER_NAME"]

LOGGER_NAME = "trainperf"


@runtime_checkable
class Sink(Protocol):
    """Anything that takes a :class:`PerformanceRecord`. A ``close()`` method, if present, is called
    when the listener closes."""

    def __call__(self, record: PerformanceRecord) -> None: ...


class SinkError(RuntimeWarning):
    """Warning category used when a sink raises; training goes on."""


class MemorySink:
    """Keeps records in memory, for tests and notebooks.

    Args:
        maxlen: keep only the newest ``maxlen`` records (``None``: keep all).
    """

    def __init__(self, maxlen: int | None = None) -> None:
        if maxlen is not None and (not isinstance(maxlen, int) or maxlen < 1):
            raise ValueError(f"maxlen must be a positive int or None, got {maxlen!r}")
        self.records: deque[PerformanceRecord] = deque(maxlen=maxlen)

    def __call__(self, record: PerformanceRecord) -> None:
        self.records.append(record)

    def __iter__(self) -> Iterator[PerformanceRecord]:
        return iter(list(self.records))

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> PerformanceRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[PerformanceRecord]: ...

    def __getitem__(self, index: int | slice) -> PerformanceRecord | list[PerformanceRecord]:
        if isinstance(index, slice):
            return list(self.records)[index]
        return self.records[index]

    def __repr__(self) -> str:
        return f"MemorySink({len(self.records)} records)"

    def clear(self) -> None:
        self.records.clear()


class _FallbackHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Prints to stderr only while the application has configured no logging at all,
    so a user who never called ``logging.basicConfig`` still sees the lines, and one who did
    sees them once, through their own handlers."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s - %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        self.stream = sys.stderr  # follow redirection (pytest's capsys, notebooks)
        super().emit(record)


def _ensure_visible(logger: logging.Logger) -> None:
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not any(isinstance(h, _FallbackHandler) for h in logger.handlers):
        logger.addHandler(_FallbackHandler())


class LoggingSink:
    """Writes each record as one Deeplearning4j-style line through :mod:`logging`.

    Args:
        logger: a logger or its name (default ``"trainperf"``).
        level: the level of the lines (default ``INFO``).
    """

    def __init__(self, logger: logging.Logger | str = LOGGER_NAME, level: int = logging.INFO) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        if not isinstance(level, int):
            raise TypeError(f"level must be a logging level int, got {level!r}")
        self.level = level
        _ensure_visible(self.logger)

    def __call__(self, record: PerformanceRecord) -> None:
        if self.logger.isEnabledFor(self.level):
            self.logger.log(self.level, "%s", format_line(record))


class _FanOut:
    """Delivers each record to every sink; a sink that raises is reported once and skipped for
    that record only, so the others never lose a record and training goes on."""

    def __init__(self, sinks: Iterable[Sink], *, strict: bool) -> None:
        self.sinks: list[Sink] = list(sinks)
        self.strict = strict
        self._warned: set[int] = set()

    def __call__(self, record: PerformanceRecord) -> None:
        first_error: BaseException | None = None
        for sink in self.sinks:
            try:
                sink(record)
            except Exception as exc:  # noqa: BLE001 - a sink must never stop training
                if first_error is None:
                    first_error = exc
                if id(sink) not in self._warned:
                    self._warned.add(id(sink))
                    warnings.warn(
                        f"trainperf sink {sink!r} raised and was skipped for this record "
                        f"(further failures of this sink are silent):\n{traceback.format_exc()}",
                        SinkError,
                        stacklevel=2,
                    )
        if first_error is not None and self.strict:
            raise first_error

    def close(self) -> None:
        first_error: BaseException | None = None
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is None:
                continue
            try:
                close()
            except Exception as exc:  # noqa: BLE001
                first_error = first_error or exc
                warnings.warn(f"trainperf sink {sink!r} failed to close: {exc!r}", SinkError, stacklevel=2)
        if first_error is not None and self.strict:
            raise first_error
