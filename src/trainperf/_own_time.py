"""trainperf's own time, kept out of the user's: the clock listeners measure with stands still
while trainperf works.

Every listener reads a *user clock*: its monotonic clock less the seconds trainperf itself spent so
far (reports, sinks, cross-rank gathers, polls of a device), and less the seconds the user asked it to
leave out (:meth:`~trainperf.PerformanceListener.exclude`). Every listener that measures with the same
clock shares one ledger of trainperf's time, so one listener's report (two listeners on one model, two
models with a listener each) is kept out of the others' windows too, and every adapter, which reads
the listener's clock for its own timestamps (loader fetches, the step's start and end), agrees with
the listener without doing anything of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__: list[str] = []


class Ledger:
    """Seconds added up, read on every clock read: one float attribute, nothing else."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0.0


_ledgers: dict[Callable[[], float], Ledger] = {}
_lock = threading.Lock()


def own_time_of(clock: Callable[[], float]) -> Ledger:
    """The ledger of trainperf's own time for every listener measuring with ``clock``."""
    with _lock:
        ledger = _ledgers.get(clock)
        if ledger is None:
            ledger = _ledgers[clock] = Ledger()
        return ledger


def user_clock(raw: Callable[[], float], own: Ledger, excluded: Ledger) -> Callable[[], float]:
    """``raw`` less trainperf's own time and the time the user left out: a closure over three cells,
    about one Python call per read."""

    def clock() -> float:
        return raw() - own.total - excluded.total

    clock.raw = raw  # type: ignore[attr-defined]
    return clock
