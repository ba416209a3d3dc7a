"""Per-generation garbage-collection counts and pause times from ``gc.callbacks``."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = ["GCMonitor"]

_GENERATIONS = 3


class GCMonitor:
    """Counts Python's collections and measures each pause between its start and stop callbacks.

    The totals are cumulative; callers take deltas between two :meth:`snapshot` calls.
    One monitor installs exactly one entry in ``gc.callbacks`` and removes it on :meth:`uninstall`.

    Args:
        clock: monotonic clock in seconds (injectable for tests).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.counts = [0] * _GENERATIONS
        self.seconds = [0.0] * _GENERATIONS
        self._started = 0.0
        self._installed = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        generation = info.get("generation", 0)
        if 0 <= generation < _GENERATIONS:
            self.counts[generation] += 1
            self.seconds[generation] += self._clock() - self._started

    def install(self) -> None:
        """Start listening (idempotent)."""
        if not self._installed:
            gc.callbacks.append(self)
            self._installed = True

    def uninstall(self) -> None:
        """Stop listening and remove the ``gc.callbacks`` entry (idempotent)."""
        if self._installed:
            try:
                gc.callbacks.remove(self)
            except ValueError:
                pass
            self._installed = False

    @property
    def installed(self) -> bool:
        return self._installed

    def snapshot(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Cumulative (counts, seconds) per generation."""
        return tuple(self.counts), tuple(self.seconds)
