"""When a window is bad enough to profile what follows it: the rule (:class:`CaptureRule`) and its
state over a run (:class:`Trigger`). Pure: plain numbers in, a reason or ``None`` out."""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

__all__ = ["CaptureRule"]

#: How many of the latest windows the running median is taken over (memory and time stay bounded
#: over a long run with frequent reports).
MEDIAN_WINDOWS = 1000


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _seconds(name: str, value: object, *, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not minimum <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class CaptureRule:
    """When a listener with a ``profile_dir`` profiles the iterations after a bad window, and how much.

    A window after the warm-up triggers a capture when its p95 iteration time is above ``slowdown``
    times the run's running median (the median of the last 1,000 windows' median iteration times, once
    ``min_history`` windows are known) and at least ``min_excess_ms`` above it, or, with
    ``on_verdict``, when its verdict turns bad (from fine, from none yet, or from another bad kind).
    Windows that overlap a capture neither trigger nor count in the median.

    Args:
        iterations: how many iterations a capture traces (after one untraced warm-up iteration).
        slowdown: the ``k`` of "p95 above k times the running median" (above 1).
        min_excess_ms: how far above the median the p95 must also be, so that microseconds of jitter
            in a very short step never trigger.
        on_verdict: also capture when the verdict turns bad.
        min_history: windows after the warm-up the median needs before the slowdown rule applies.
        min_interval_s: at least this many seconds between two captures' starts.
        max_captures: at most this many captures per run.
        max_mb: the largest trace file a capture writes (compressed); a bigger trace loses its
            shortest host events first, and the trace says how many.
    """

    iterations: int = 3
    slowdown: float = 3.0
    min_excess_ms: float = 1.0
    on_verdict: bool = True
    min_history: int = 3
    min_interval_s: float = 600.0
    max_captures: int = 3
    max_mb: float = 50.0

    def __post_init__(self) -> None:
        _positive_int("iterations", self.iterations)
        _positive_int("min_history", self.min_history)
        _positive_int("max_captures", self.max_captures)
        slowdown = self.slowdown
        if isinstance(slowdown, bool) or not isinstance(slowdown, (int, float)) or not 1.0 < slowdown < math.inf:
            raise ValueError(f"slowdown must be a finite number above 1, got {slowdown!r}")
        if not isinstance(self.on_verdict, bool):
            raise TypeError(f"on_verdict must be a bool, got {self.on_verdict!r}")
        object.__setattr__(self, "slowdown", float(slowdown))
        object.__setattr__(self, "min_excess_ms", _seconds("min_excess_ms", self.min_excess_ms, minimum=0.0))
        object.__setattr__(self, "min_interval_s", _seconds("min_interval_s", self.min_interval_s, minimum=0.0))
        max_mb = _seconds("max_mb", self.max_mb, minimum=0.0)
        if max_mb <= 0.0:
            raise ValueError(f"max_mb must be a finite number above 0, got {self.max_mb!r}")
        object.__setattr__(self, "max_mb", max_mb)

    @property
    def max_bytes(self) -> int:
        return int(self.max_mb * 1e6)


class Trigger:
    """A run's capture rule and what it has seen: the windows' medians, the last verdict, the captures
    taken and when.

    Args:
        rule: the rule.
    """

    __slots__ = ("rule", "taken", "capped", "_medians", "_order", "_previous", "_last_at")

    def __init__(self, rule: CaptureRule) -> None:
        self.rule = rule
        self.taken = 0
        self.capped = 0  #: triggers the caps turned down
        self._medians: list[float] = []  # sorted
        self._order: deque[float] = deque()  # the same values, oldest first
        self._previous: str | None = None
        self._last_at: float | None = None

    def _remember(self, p50_ms: float) -> None:
        medians, order = self._medians, self._order
        bisect.insort(medians, p50_ms)
        order.append(p50_ms)
        if len(order) > MEDIAN_WINDOWS:
            del medians[bisect.bisect_left(medians, order.popleft())]

    @property
    def median_ms(self) -> float | None:
        """The running median: the median of the latest windows' median iteration times (at most
        :data:`MEDIAN_WINDOWS`)."""
        m = self._medians
        n = len(m)
        if n == 0:
            return None
        return m[n // 2] if n % 2 else (m[n // 2 - 1] + m[n // 2]) / 2.0

    def see(self, p50_ms: float | None, p95_ms: float | None, kind: str | None, now: float) -> str | None:
        """A window after the warm-up that overlaps no capture: why it triggers a capture now (a reason
        in words), or ``None`` (no trigger, or the caps turn it down: counted in :attr:`capped`).

        Args:
            p50_ms: its median iteration time (``None`` when not known); ``p95_ms`` its 95th percentile.
            kind: its verdict's kind (``None`` without a verdict).
            now: the time on a monotonic clock, for the interval between captures.
        """
        rule = self.rule
        reason = None
        median = self.median_ms
        if (p95_ms is not None and median is not None and len(self._medians) >= rule.min_history
                and p95_ms > rule.slowdown * median and p95_ms - median >= rule.min_excess_ms):
            reason = f"p95 {p95_ms:.2f} ms > {rule.slowdown:g} x the run's median {median:.2f} ms"
        elif rule.on_verdict and kind is not None and kind != "fine" and kind != self._previous:
            reason = f"verdict turned {kind}"
        self._previous = kind
        if p50_ms is not None and math.isfinite(p50_ms):
            self._remember(p50_ms)
        if reason is None:
            return None
        if self.taken >= rule.max_captures or (self._last_at is not None
                                               and now - self._last_at < rule.min_interval_s):
            self.capped += 1
            return None
        self.taken += 1
        self._last_at = now
        return reason
