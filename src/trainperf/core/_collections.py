"""Garbage collections of a window: Python's generations (through :class:`~trainperf.core._gc.GCMonitor`)
and any other collector a listener was given (the JVM's under Spark, say), read as differences
between reports."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..base import check_callable, check_str, is_int
from ..records import GCStat
from ._gc import GCMonitor

__all__: list[str] = []

Collector = Callable[[], tuple[int, float | None]]
Reading = tuple[int, float | None]


def read_collector(name: str, read: Collector) -> Reading:
    """A collector's cumulative ``(count, ms or None)``, checked."""
    value = read()
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not is_int(value[0])
        or not (value[1] is None or (isinstance(value[1], (int, float)) and not isinstance(value[1], bool)))
    ):
        raise TypeError(f"collector {name!r} must return (count: int, milliseconds: float or None), got {value!r}")
    return int(value[0]), None if value[1] is None else float(value[1])


class Collections:
    """The collections of the windows: per report, each generation's and each collector's count and
    time since the previous report.

    Args:
        monitor: Python's GC monitor (installed by the caller), ``None`` when GC is not reported.
    """

    __slots__ = ("monitor", "_previous", "_collectors")

    def __init__(self, monitor: GCMonitor | None) -> None:
        self.monitor = monitor
        self._previous = monitor.snapshot() if monitor is not None else ((), ())
        self._collectors: list[tuple[str, Collector, Reading]] = []

    def add_collector(self, name: str, read: Collector) -> None:
        check_str("name", name, empty=False)
        check_callable("read", read, "a callable returning (count, milliseconds or None)")
        self._collectors.append((name, read, read_collector(name, read)))

    def restart(self) -> None:
        """Count from now (training starts)."""
        if self.monitor is not None:
            self._previous = self.monitor.snapshot()
        self._collectors = [(name, read, read()) for name, read, _ in self._collectors]

    def read(self, say_once: Callable[[str], None]) -> tuple[tuple[GCStat, ...], float]:
        """The collections since the previous read, and the seconds Python's GC paused; a collector
        that fails is left out of this window and said once."""
        stats: list[GCStat] = []
        gc_s = 0.0
        if self.monitor is not None:
            counts, seconds = self.monitor.snapshot()
            prev_counts, prev_seconds = self._previous
            for gen, (c, s, pc, ps) in enumerate(zip(counts, seconds, prev_counts, prev_seconds, strict=True)):
                stats.append(GCStat(f"gen{gen}", c - pc, 1000.0 * (s - ps)))
                gc_s += s - ps
            self._previous = (counts, seconds)
        for i, (name, read, (prev_count, prev_ms)) in enumerate(self._collectors):
            try:
                count, ms = read_collector(name, read)
            except Exception as exc:  # noqa: BLE001 - a collector must never stop training
                say_once(f"collector {name!r} failed and is left out of this window: {exc!r}")
                continue
            delta_ms = ms - prev_ms if ms is not None and prev_ms is not None else None
            stats.append(GCStat(name, count - prev_count, delta_ms))
            self._collectors[i] = (name, read, (count, ms))
        return tuple(stats), gc_s

    def take_pauses(self) -> Sequence[tuple[float, float, int]]:
        """Python's GC pauses since the last take, ``(start, seconds, generation)``."""
        return self.monitor.take_pauses() if self.monitor is not None else ()
