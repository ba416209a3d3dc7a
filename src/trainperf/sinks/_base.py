"""The sink protocol and the fan-out that delivers each record to every sink."""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from .._record import PerformanceRecord

__all__ = ["Sink", "SinkError"]


@runtime_checkable
class Sink(Protocol):
    """Anything that takes a :class:`PerformanceRecord`. A ``close()`` method, if present, is called
    when the listener closes."""

    def __call__(self, record: PerformanceRecord) -> None: ...


class SinkError(RuntimeWarning):
    """Warning category used when a sink raises; training goes on."""


class FanOut:
    """Delivers each record to every sink; a sink that raises is reported once and skipped for
    that record only, so the others never lose a record and training goes on."""

    def __init__(self, sinks: Iterable[Sink], *, strict: bool) -> None:
        self.sinks: list[Sink] = list(sinks)
        self.strict = strict
        self._warned: set[int] = set()

    def __call__(self, record: PerformanceRecord) -> None:
        failures: list[tuple[Sink, BaseException, str]] = []
        for sink in self.sinks:
            try:
                sink(record)
            except Exception as exc:  # noqa: BLE001 - a sink must never stop training
                failures.append((sink, exc, traceback.format_exc()))
        # Said once every sink has had the record: under ``-W error`` the warning raises, and
        # the healthy sinks behind a failing one must not lose the record to it.
        for sink, _, trace in failures:
            if id(sink) not in self._warned:
                self._warned.add(id(sink))
                warnings.warn(
                    f"trainperf sink {sink!r} raised and was skipped for this record "
                    f"(further failures of this sink are silent):\n{trace}",
                    SinkError,
                    stacklevel=2,
                )
        if failures and self.strict:
            raise failures[0][1]

    def close(self) -> None:
        """Close every sink that has a ``close()``, all of them even when one fails."""
        failures: list[tuple[Sink, BaseException]] = []
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is None:
                continue
            try:
                close()
            except Exception as exc:  # noqa: BLE001
                failures.append((sink, exc))
        for failed, error in failures:
            warnings.warn(f"trainperf sink {failed!r} failed to close: {error!r}", SinkError, stacklevel=2)
        if failures and self.strict:
            raise failures[0][1]
