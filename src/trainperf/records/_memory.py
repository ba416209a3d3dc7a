"""Memory over a run's windows, from plain numbers: whether a floor grows (a leak), at what rate and when
the headroom runs out, and whether reserved memory grows while allocated memory does not (fragmentation).
Nothing here reads a device or a clock.

A floor is what stays allocated between two steps (on CUDA, the caching allocator's allocated memory at
the report; on the CPU, the process's resident memory): the parameters, gradients and optimizer state,
and whatever the loop keeps from one step to the next. Activations come and go within a step and set
the peak, never the floor. A floor that rises over several windows is memory kept by the loop: a
leak, and the run ends out of memory once it has used the headroom. Reserved memory that grows while
the floor does not is the caching allocator keeping blocks for new shapes: harmless until it fragments.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from ._record import Verdict

__all__: list[str] = []

#: Readings after the warm-up that a judgment of growth needs: six rising readings are a trend that a
#: one-off rise (a new largest batch, a cache filled once) is not, and that readings which wander at
#: random make in about one run of 700 (of 100 windows).
MIN_READINGS = 6
#: The newest readings the trend is fitted on: a leak that stops ends the verdict within this many.
KEEP_READINGS = 10
#: Of the steps between two readings, at least this share must rise.
RISING_SHARE = 0.8
#: A line through the readings must explain at least this share of their variance (R squared).
MIN_FIT = 0.9
#: Growth below this many MB over the fitted readings is not judged (page-sized noise of a resident set).
MIN_RISE_MB = 4.0
#: A step between two readings rises when it adds more than this many MB.
RISE_MB = 0.01
#: Memory held beside the floor (the resident memory, allocator's free memory included) that rises this
#: much faster than the floor is said, and sets the forecast.
HELD_FASTER = 1.1

#: Reserved memory grown by at least this many MB (and :data:`FRAGMENT_RISE_SHARE` of where it was)...
FRAGMENT_RISE_MB = 256.0
FRAGMENT_RISE_SHARE = 0.10
#: ...while the allocated peak grew by less than this share of that is fragmentation, not a leak.
FRAGMENT_ALLOCATED_SHARE = 1.0 / 3.0
#: What fixes fragmentation of the caching allocator.
FRAGMENT_FIX = ("set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (recent torch also reads it as "
                "PYTORCH_ALLOC_CONF): segments then grow in place instead of being cached per size; or pad "
                "inputs to a few fixed shapes")


@dataclass(frozen=True, slots=True)
class Growth:
    """A floor judged growing.

    Args:
        what: the floor, in words (``allocated floor``, ``resident memory``).
        where: what fills up (``the device``, ``the machine``).
        mb_per_100: its rise in MB per 100 iterations (the slope of a line through its readings).
        full_in: iterations until the headroom is used up at that rate, or at the rate of the memory held
            beside it (``held_per_100``) when that is faster; ``None`` when unknown.
        share: the floor's share of the memory it can grow into (floor plus headroom), in percent;
            ``None`` when the headroom is unknown.
    """

    what: str
    where: str
    mb_per_100: float
    full_in: float | None
    share: float | None
    held_per_100: float | None = None

    def words(self) -> str:
        """``allocated floor +38 MB per 100 iterations; the device is full in about 2,400 iterations``."""
        text = f"{self.what} +{_mb(self.mb_per_100)} MB per 100 iterations"
        if self.held_per_100 is not None and self.held_per_100 > HELD_FASTER * self.mb_per_100:
            text += (f" (resident memory +{_mb(self.held_per_100)} MB: the allocator cannot give back the gaps "
                     "between what is kept)")
        if self.full_in is not None:
            text += f"; {self.where} is full in about {_about(self.full_in)} iterations"
        return text


def _mb(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def _about(iterations: float) -> str:
    """Two significant figures: a forecast is no more precise than that."""
    if iterations < 100:
        return f"{max(0.0, iterations):.0f}"
    digits = 10 ** (int(math.log10(iterations)) - 1)
    return f"{round(iterations / digits) * digits:,.0f}"


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares slope of ``(x, y)`` points and its R squared (1 when every y is the same line,
    0 for flat or a single x)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    syy = sum((y - mean_y) ** 2 for _, y in points)
    if sxx <= 0.0 or syy <= 0.0:
        return 0.0, 0.0
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return sxy / sxx, sxy * sxy / (sxx * syy)


class FloorTrend:
    """Whether a floor grows, from its readings window after window.

    A reading equal to the one before adds nothing (a probe read less often than reports repeats its last
    figures: the first of equal readings is the one taken, at its iteration). Growth is judged over the
    newest :data:`KEEP_READINGS` readings after the warm-up, from :data:`MIN_READINGS` on, when most steps
    between them rise, a line fits them and it rises by :data:`MIN_RISE_MB` at least.

    Args:
        what: the floor, in words.
        where: what fills up, in words.
    """

    __slots__ = ("what", "where", "_readings", "_last", "_growth", "_highest", "_held")

    def __init__(self, what: str, where: str) -> None:
        self.what, self.where = what, where
        self._readings: deque[tuple[float, float]] = deque(maxlen=KEEP_READINGS)
        self._last: float | None = None
        self._growth: Growth | None = None
        self._highest = -math.inf  # the highest reading after the warm-up
        self._held: deque[tuple[float, float]] = deque(maxlen=KEEP_READINGS)

    def add(self, iteration: int, floor_mb: float | None, headroom_mb: float | None, *,
            warmup: bool = False, held_mb: float | None = None) -> Growth | None:
        """The judgment after a window whose floor reads ``floor_mb`` at ``iteration`` (``None``: not
        read), with ``headroom_mb`` left to grow into; ``held_mb``, the memory held that the floor is part
        of (the resident memory, with what the allocator keeps free), read at the same time."""
        if floor_mb is None or not math.isfinite(floor_mb):
            return self._growth
        if floor_mb == self._last:
            return self._growth  # the same reading again: nothing new
        self._last = floor_mb
        if warmup:
            return None
        readings = self._readings
        readings.append((float(iteration), floor_mb))
        if held_mb is not None and math.isfinite(held_mb):
            self._held.append((float(iteration), held_mb))
        else:
            self._held.clear()
        highest, self._highest = self._highest, max(self._highest, floor_mb)
        # a floor that grows is higher than ever before; one back below an earlier high is not growing now
        self._growth = self._judge(headroom_mb) if floor_mb > highest else None
        return self._growth

    def _judge(self, headroom_mb: float | None) -> Growth | None:
        points = list(self._readings)
        if len(points) < MIN_READINGS:
            return None
        steps = len(points) - 1
        rising = sum(1 for (_, a), (_, b) in zip(points, points[1:], strict=False) if b - a > RISE_MB)
        if rising < RISING_SHARE * steps:
            return None
        slope, fit = fit_line(points)
        if slope <= 0.0 or fit < MIN_FIT or slope * (points[-1][0] - points[0][0]) < MIN_RISE_MB:
            return None
        held = fit_line(list(self._held))[0] if len(self._held) == len(points) else None
        fills = max(slope, held) if held is not None else slope
        headroom = headroom_mb if headroom_mb is not None and math.isfinite(headroom_mb) else None
        full_in = max(0.0, headroom) / fills if headroom is not None else None
        floor = points[-1][1]
        share = 100.0 * floor / (floor + max(0.0, headroom)) if headroom is not None and floor > 0 else None
        return Growth(self.what, self.where, 100.0 * slope, full_in, share,
                      100.0 * held if held is not None else None)


def growth_verdict(growth: Growth, time: Verdict | None) -> Verdict:
    """The window's verdict when memory grows: ``memory-growth`` (the run will end out of memory, which
    outweighs what limits its speed), with the time verdict it replaces said after it. Its share is the
    floor's share of the memory it can grow into."""
    reason = growth.words()
    if time is not None and time.kind != "fine":
        reason += f"; the window is also {time.kind} ({time.reason})"
    return Verdict("memory-growth", round(growth.share, 1) if growth.share is not None else 0.0, reason)


class ReservedTrend:
    """Whether the caching allocator's reserved memory grows while its allocated memory does not:
    fragmentation, said once, with what it holds and the fix.

    The peaks after the warm-up are compared with the first ones after it: reserved grown by
    :data:`FRAGMENT_RISE_MB` and :data:`FRAGMENT_RISE_SHARE` while the allocated peak grew by less than
    :data:`FRAGMENT_ALLOCATED_SHARE` of that.
    """

    __slots__ = ("_first", "_said")

    def __init__(self) -> None:
        self._first: tuple[int, float, float] | None = None  # iteration, reserved peak, allocated peak
        self._said = False

    def add(self, iteration: int, reserved_max_mb: float | None, allocated_max_mb: float | None,
            fragmentation_mb: float | None = None, inactive_split_pct: float | None = None, *,
            warmup: bool = False) -> str | None:
        """The fragmentation notice, the first time the window's peaks show it; else ``None``."""
        if self._said or warmup or reserved_max_mb is None or allocated_max_mb is None:
            return None
        if self._first is None:
            self._first = (iteration, reserved_max_mb, allocated_max_mb)
            return None
        since, reserved0, allocated0 = self._first
        grown = reserved_max_mb - reserved0
        if grown < FRAGMENT_RISE_MB or grown < FRAGMENT_RISE_SHARE * reserved0:
            return None
        if allocated_max_mb - allocated0 >= FRAGMENT_ALLOCATED_SHARE * grown:
            return None
        self._said = True
        held = ""
        if fragmentation_mb is not None:
            held = f" ({fragmentation_mb:,.0f} MB reserved but not allocated"
            if inactive_split_pct is not None:
                held += f", {inactive_split_pct:.0f}% of the reserved memory in inactive split blocks"
            held += ")"
        return (f"reserved CUDA memory grew by {grown:,.0f} MB over {iteration - since:,} iterations while the "
                f"allocated peak grew by {max(0.0, allocated_max_mb - allocated0):,.0f} MB: the caching allocator "
                f"keeps blocks for new shapes that it cannot reuse, which is fragmentation, not a leak{held}; "
                + FRAGMENT_FIX)
