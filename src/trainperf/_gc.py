"""Per-generation garbage-collection counts and pause times from ``gc.callbacks``."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = ["GCMonitor"]

_GENERATIONS = 3
#: Pauses kept between two reports; a window with more (a pathological allocation loop) places
#: only its newest ones in time.
MAX_PAUSES = 100_000


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
        #: ``(start, seconds)`` of each pause since :meth:`take_pauses`, on the clock: where in a
        #: window a collection fell decides which share it is taken out of. Bounded: at most
        #: ``MAX_PAUSES`` kept (the oldest dropped), the per-generation totals stay exact.
        self.pauses: list[tuple[float, float]] = []

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        generation = info.get("generation", 0)
        if 0 <= generation < _GENERATIONS:
            seconds = self._clock() - self._started
            self.counts[generation] += 1
            self.seconds[generation] += seconds
            pauses = self.pauses
            if len(pauses) >= MAX_PAUSES:
                del pauses[: MAX_PAUSES // 2]
            pauses.append((self._started, seconds))

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

    def take_pauses(self) -> list[tuple[float, float]]:
        """The pauses since the previous call, oldest first, and forget them."""
        pauses, self.pauses = self.pauses, []
        return pauses

    def snapshot(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Cumulative (counts, seconds) per generation."""
        return tuple(self.counts), tuple(self.seconds)
