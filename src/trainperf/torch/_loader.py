"""Exact data-loading wait: the time blocked in ``next()`` on a loader."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from .._listener import PerformanceListener
from ._advice import loader_advisor
from ._tap import attachments_of, is_listened

__all__ = ["TimedLoader", "timed"]

T = TypeVar("T")


def _listeners_of(targets: tuple[Any, ...]) -> list[PerformanceListener]:
    out: list[PerformanceListener] = []
    for target in targets:
        if isinstance(target, PerformanceListener):
            out.append(target)
            continue
        if not is_listened(target):
            raise TypeError(f"targets must be PerformanceListener objects or listened-to models, got {target!r}")
        out.extend(a.listener for a in attachments_of(target))
    return out


class TimedLoader(Generic[T]):
    """Wraps an iterable; every ``next()`` adds the time it blocked to the listeners' data wait.

    Args:
        iterable: a DataLoader or any iterable of batches.
        *targets: listeners, or models with listeners attached (resolved on each ``iter()``).
    """

    def __init__(self, iterable: Iterable[T], *targets: Any) -> None:
        if not targets:
            raise ValueError("timed() needs at least one listener or listened-to model in targets")
        self.iterable = iterable
        self.targets = targets
        for listener in _listeners_of(targets):
            listener.add_advisor(loader_advisor(iterable))

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[T]:
        listeners = _listeners_of(self.targets)
        clock = listeners[0].clock if listeners else time.perf_counter
        iterator = iter(self.iterable)
        while True:
            started = clock()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            waited = clock() - started
            for listener in listeners:
                listener.add_etl(waited)
            yield batch


def timed(iterable: Iterable[T], *targets: Any) -> TimedLoader[T]:
    """Measure the exact time the loop blocks on ``iterable``; see :class:`TimedLoader`."""
    return TimedLoader(iterable, *targets)
