"""The window math: a report window's figures from plain numbers, knowing nothing of clocks or sinks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__: list[str] = []

#: One iteration of a window, as the listener's hot path appends it: ``(end, etl, started, samples,
#: batches, other, steps, skipped)``. ``end`` is the clock time the iteration ended; ``etl`` its
#: measured data wait in seconds; ``started`` the clock time its compute started (then the data wait
#: is the time since the previous iteration ended, and ``etl`` is ignored) or ``None``; ``samples``
#: its samples or ``None`` when unknown; ``batches`` its data batches; ``other`` seconds of host time
#: that were neither data wait nor the step; ``steps`` its optimizer steps, ``skipped`` how many of
#: them were skipped. A plain tuple rather than a ``NamedTuple``: building one costs about 0.7 us, a
#: third of the hot path's budget. It is unpacked by name below.
WindowEntry = tuple[float, float, "float | None", "int | None", int, float, int, int]


@dataclass(frozen=True, slots=True)
class WindowFigures:
    """What one window measured, in seconds and counts.

    Attributes:
        iterations: iterations in the window.
        window_s: wall time from the window's start to its last iteration's end.
        etl_s: total data wait.
        etl_max_s: the longest data wait of one iteration.
        other_s: total host time that was neither data wait nor the step.
        etl_from_gap: iterations whose data wait is the gap before their compute started (the
            fallback when no loader could be timed).
        durations: each iteration's time, ascending.
        samples: samples in the window, ``None`` when some iteration's count was unknown.
        batches: data batches in the window.
        etls: each iteration's data wait, oldest first.
    """

    iterations: int
    window_s: float
    etl_s: float
    etl_max_s: float
    durations: tuple[float, ...]
    samples: int | None
    batches: int
    other_s: float = 0.0
    steps: int = 0
    skipped: int = 0
    etl_from_gap: int = 0
    etls: tuple[float, ...] = ()

    @property
    def compute_s(self) -> float:
        """The window's time in the step: what is neither data wait nor other host time."""
        return max(0.0, self.window_s - self.etl_s - self.other_s)

    @property
    def mean_s(self) -> float:
        return sum(self.durations) / self.iterations

    @property
    def max_s(self) -> float:
        return self.durations[-1]

    def percentile_s(self, q: float) -> float:
        return percentile(self.durations, q)

    @property
    def samples_per_sec(self) -> float | None:
        return None if self.samples is None else safe_rate(self.samples, self.window_s)

    @property
    def batches_per_sec(self) -> float | None:
        return safe_rate(self.batches, self.window_s)


def window_figures(
    start: float, entries: Sequence[WindowEntry], durations: Sequence[float] | None = None
) -> WindowFigures:
    """The figures of the window that started at ``start`` and holds ``entries`` (at least one).

    Args:
        start: clock time at which the window started (the previous report, or training's start).
        entries: the window's iterations, oldest first; see :data:`WindowEntry`.
        durations: per-iteration times from another clock (CUDA events, say); when given and not
            empty, its last ``len(entries)`` values replace the host-clock iteration times.
    """
    if not entries:
        raise ValueError("a window needs at least one iteration")
    etls: list[float] = []
    host_durations: list[float] = []
    samples: int | None = 0
    batches = steps = skipped = from_gap = 0
    other_s = 0.0
    prev = start
    for end, etl, started, n_samples, n_batches, other, n_steps, n_skipped in entries:
        if started is None:
            etls.append(etl)
        else:
            etls.append(max(0.0, started - prev))
            from_gap += 1
        host_durations.append(end - prev)
        prev = end
        samples = None if n_samples is None or samples is None else samples + n_samples
        batches += n_batches
        other_s += other
        steps += n_steps
        skipped += n_skipped
    n = len(entries)
    chosen = list(durations[-n:]) if durations else host_durations
    chosen.sort()
    return WindowFigures(
        iterations=n,
        window_s=prev - start,
        etl_s=sum(etls),
        etl_max_s=max(etls),
        durations=tuple(chosen),
        samples=samples,
        batches=batches,
        other_s=other_s,
        steps=steps,
        skipped=skipped,
        etl_from_gap=from_gap,
        etls=tuple(etls),
    )


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of an ascending sequence.

    Args:
        sorted_values: ascending values, at least one.
        q: percentile in [0, 100].
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of an empty window")
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


def safe_rate(amount: float, seconds: float) -> float | None:
    """``amount / seconds``, or ``None`` when the interval is not positive."""
    if seconds <= 0.0:
        return None
    return amount / seconds
