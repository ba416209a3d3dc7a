"""Per-generation garbage-collection counts and pause times from ``gc.callbacks``."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = ["GCMonitor", "fetch_wait", "gc_within"]

_GENERATIONS = 3
#: Pauses kept between two reports; a window with more (a pathological allocation loop) places
#: only its newest ones in time.
MAX_PAUSES = 100_000


def gc_within(pauses: list[tuple[float, float, int]], started: float, ended: float) -> float:
    """Seconds of the newest ``pauses`` that fall within ``[started, ended]``: a loader fetch's own
    collections, which its adapter takes out of the data wait (they count as GC, once). Looks only
    at the pauses that ended after ``started``, newest first: usually none."""
    total = 0.0
    for i in range(len(pauses) - 1, -1, -1):
        begin, seconds, _ = pauses[i]
        if begin + seconds <= started:
            break
        total += max(0.0, min(ended, begin + seconds) - max(started, begin))
    return total


def fetch_wait(pauses: list[tuple[float, float, int]] | None, started: float, ended: float) -> float:
    """The data wait of a loader fetch from ``started`` to ``ended``: its own collections (among
    ``pauses``, ``None`` without GC reporting) left out, since they count as GC, once."""
    spent = ended - started
    return spent - gc_within(pauses, started, ended) if pauses else spent


class GCMonitor:
    """Counts Python's collections and measures each pause between its start and stop callbacks.

    The totals are cumulative; callers take deltas between two :meth:`snapshot` calls.
    One monitor installs exactly one entry in ``gc.callbacks`` and removes it on :meth:`uninstall`.

    Args:
        clock: monotonic clock in seconds (injectable for tests).
        skip: asked when a collection starts; when it says so, the collection is not counted (one
            that trainperf's own report set off is its own time, not the user's).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter, skip: Callable[[], bool] | None = None) -> None:
        self._clock = clock
        self._skip = skip
        self._skipping = False
        self.counts = [0] * _GENERATIONS
        self.seconds = [0.0] * _GENERATIONS
        self._started = 0.0
        self._installed = False
        #: ``(start, seconds, generation)`` of each pause since :meth:`take_pauses`, on the clock: where
        #: in a window a collection fell decides which share it is taken out of. Bounded: at most
        #: ``MAX_PAUSES`` kept (the oldest dropped), the per-generation totals stay exact. The list
        #: object stays the same for the monitor's life (adapters keep it to look at a fetch's pauses).
        self.pauses: list[tuple[float, float, int]] = []

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._skipping = self._skip is not None and self._skip()
            self._started = self._clock()
            return
        generation = info.get("generation", 0)
        if self._skipping:
            self._skipping = False
            return
        if 0 <= generation < _GENERATIONS:
            seconds = self._clock() - self._started
            self.counts[generation] += 1
            self.seconds[generation] += seconds
            pauses = self.pauses
            if len(pauses) >= MAX_PAUSES:
                del pauses[: MAX_PAUSES // 2]
            pauses.append((self._started, seconds, generation))

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

    def take_pauses(self) -> list[tuple[float, float, int]]:
        """The pauses since the previous call, oldest first, and forget them."""
        pauses = list(self.pauses)
        self.pauses.clear()
        return pauses

    def forget_since(self, since: float) -> None:
        """Leave out every collection that started at or after ``since`` (time the user left out):
        from the pauses and from the per-generation totals."""
        pauses = self.pauses
        while pauses and pauses[-1][0] >= since:
            _, seconds, generation = pauses.pop()
            self.counts[generation] -= 1
            self.seconds[generation] -= seconds

    def snapshot(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Cumulative (counts, seconds) per generation."""
        return tuple(self.counts), tuple(self.seconds)
