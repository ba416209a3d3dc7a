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
        etl_s: total data wait, GC pauses that fell in it left out (those in the gap before a
            step whose data wait is that gap; those in a loader's fetch where the step is too
            short to hold them).
        etl_max_s: the longest data wait of one iteration.
        other_s: total host time that was neither data wait nor the step, GC pauses in it left out.
        gc_s: GC pauses in the window. ``etl_s + compute_s + other_s + gc_s == window_s``: each pause
            is counted once, taken out of the share it fell in.
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
    gc_s: float = 0.0

    @property
    def compute_s(self) -> float:
        """The window's time in the step: what is neither data wait, other host time nor GC."""
        return max(0.0, self.window_s - self.etl_s - self.other_s - self.gc_s)

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
    start: float,
    entries: Sequence[WindowEntry],
    durations: Sequence[float] | None = None,
    pauses: Sequence[tuple[float, float, int]] = (),
) -> WindowFigures:
    """The figures of the window that started at ``start`` and holds ``entries`` (at least one).

    Args:
        start: clock time at which the window started (the previous report, or training's start).
        entries: the window's iterations, oldest first; see :data:`WindowEntry`.
        durations: per-iteration times from another clock (CUDA events, say); when given and not
            empty, its last ``len(entries)`` values replace the host-clock iteration times.
        pauses: GC pauses as ``(start, seconds, generation)`` on the same clock, oldest first. A pause in the
            part of an iteration before its step (its other host time, then a data wait that is
            the gap before the step) is taken out of that part; any other out of the step's
            compute, and out of the data wait where the compute is too short to hold it.
    """
    if not entries:
        raise ValueError("a window needs at least one iteration")
    etls: list[float] = []
    host_durations: list[float] = []
    samples: int | None = 0
    batches = steps = skipped = from_gap = 0
    other_s = 0.0
    first_pause = 0
    n_pauses = len(pauses)
    prev = start
    for end, etl, started, n_samples, n_batches, other, n_steps, n_skipped in entries:
        if started is None:
            etls.append(etl)
            gap = 0.0
        else:
            gap = max(0.0, min(started, end) - prev)
            etls.append(gap)
            from_gap += 1
        if n_pauses:
            before = prev + other + gap
            while first_pause < n_pauses and pauses[first_pause][0] + pauses[first_pause][1] <= prev:
                first_pause += 1
            in_before = _overlap(pauses, first_pause, prev, before)
            if in_before > 0.0:
                from_other = min(other, in_before)
                from_gap_etl = min(gap, in_before - from_other)
                other -= from_other
                etls[-1] -= from_gap_etl
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
    window_s = prev - start
    etl_s = sum(etls)
    gc_s = _overlap(pauses, 0, start, prev) if n_pauses else 0.0
    # Pauses inside the step come out of its compute, and out of the data wait where the compute
    # (a loader fetch that collected, with a short step) cannot hold them.
    short = window_s - etl_s - other_s - gc_s
    if short < 0.0:
        etl_s = max(0.0, etl_s + short)
    return WindowFigures(
        iterations=n,
        window_s=window_s,
        etl_s=etl_s,
        gc_s=gc_s,
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


def _overlap(pauses: Sequence[tuple[float, float, int]], first: int, lo: float, hi: float) -> float:
    """Seconds of ``pauses[first:]`` (``(start, seconds, generation)``, by start) within ``[lo, hi]``."""
    total = 0.0
    for i in range(first, len(pauses)):
        begin, seconds, _ = pauses[i]
        if begin >= hi:
            break
        total += max(0.0, min(hi, begin + seconds) - max(lo, begin))
    return total


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
