"""When a window is bad enough to profile what follows it: the rule (:class:`CaptureRule`) and its
state over a run (:class:`Trigger`). Pure: plain numbers in, a :class:`Firing` or ``None`` out."""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

__all__ = ["CaptureRule"]

#: How many of the latest windows the running median is taken over (memory and time stay bounded
#: over a long run with frequent reports).
MEDIAN_WINDOWS = 1000

#: What a slowdown candidate is called while it waits for the next window to confirm it (a verdict
#: candidate is called by its kind).
SLOW = "slow"


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _seconds(name: str, value: object, *, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not minimum <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


def _bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")


@dataclass(frozen=True, slots=True)
class CaptureRule:
    """When a listener with a ``profile_dir`` profiles the iterations after a window, and how much.

    The first ``min_history`` windows after the warm-up are the run's baseline: its running median
    starts there, and the verdict most of them share is the run's nature, not an anomaly. With
    ``baseline``, one capture of the iterations after them is taken (its reason starts with
    ``baseline:``); it counts neither against ``max_captures`` nor for ``min_interval_s``.

    After the baseline, an anomaly is a window whose p95 iteration time is above ``slowdown`` times
    the run's running median (the median of the last 1,000 windows' median iteration times) and at
    least ``min_excess_ms`` above it, or, with ``on_verdict``, whose verdict is bad and differs from
    the baseline's (and from the turn last taken, while that still holds). An anomaly is captured once
    it holds in ``confirm`` windows in a row: a window of one spike is not enough. Its severity is the
    confirming window's p95 over the running median (at least 1), for a slowdown and a verdict alike.
    Captures are at least ``min_interval_s`` apart, except that an anomaly at least ``severity_step``
    times as severe as the largest one traced may be captured sooner; at most ``max_captures`` per run.
    Windows that overlap a capture neither count nor enter the median.

    Args:
        iterations: how many iterations a capture traces (after one untraced warm-up iteration).
        slowdown: the ``k`` of "p95 above k times the running median" (above 1).
        min_excess_ms: how far above the median the p95 must also be, so that microseconds of jitter
            in a very short step never trigger.
        on_verdict: also capture when the verdict turns bad after the baseline.
        min_history: the baseline's windows after the warm-up; the slowdown rule applies after them.
        min_interval_s: at least this many seconds between two anomaly captures' starts, unless the
            later one is ``severity_step`` times as severe.
        max_captures: at most this many anomaly captures per run.
        max_mb: the largest trace file a capture writes (compressed); a bigger trace loses its
            shortest host events first, and the trace says how many.
        baseline: take one capture of the baseline, outside the budget for anomalies.
        confirm: how many windows in a row an anomaly must hold before it is captured.
        severity_step: how many times as severe as the largest anomaly traced a new one must be to be
            captured inside ``min_interval_s`` (above 1; ``math.inf``: never).
    """

    iterations: int = 3
    slowdown: float = 3.0
    min_excess_ms: float = 1.0
    on_verdict: bool = True
    min_history: int = 3
    min_interval_s: float = 600.0
    max_captures: int = 3
    max_mb: float = 50.0
    baseline: bool = True
    confirm: int = 2
    severity_step: float = 2.0

    def __post_init__(self) -> None:
        _positive_int("iterations", self.iterations)
        _positive_int("min_history", self.min_history)
        _positive_int("max_captures", self.max_captures)
        _positive_int("confirm", self.confirm)
        slowdown = self.slowdown
        if isinstance(slowdown, bool) or not isinstance(slowdown, (int, float)) or not 1.0 < slowdown < math.inf:
            raise ValueError(f"slowdown must be a finite number above 1, got {slowdown!r}")
        step = self.severity_step
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not 1.0 < step:
            raise ValueError(f"severity_step must be a number above 1 (math.inf: never), got {step!r}")
        _bool("on_verdict", self.on_verdict)
        _bool("baseline", self.baseline)
        object.__setattr__(self, "slowdown", float(slowdown))
        object.__setattr__(self, "severity_step", float(step))
        object.__setattr__(self, "min_excess_ms", _seconds("min_excess_ms", self.min_excess_ms, minimum=0.0))
        object.__setattr__(self, "min_interval_s", _seconds("min_interval_s", self.min_interval_s, minimum=0.0))
        max_mb = _seconds("max_mb", self.max_mb, minimum=0.0)
        if max_mb <= 0.0:
            raise ValueError(f"max_mb must be a finite number above 0, got {self.max_mb!r}")
        object.__setattr__(self, "max_mb", max_mb)

    @property
    def max_bytes(self) -> int:
        return int(self.max_mb * 1e6)


@dataclass(frozen=True, slots=True)
class Firing:
    """A window that takes a capture: why, in words; whether it is the baseline's; and the anomaly's
    severity (the confirming window's p95 over the running median; ``None`` for the baseline)."""

    reason: str
    baseline: bool = False
    severity: float | None = None


def _bad(kind: str | None) -> bool:
    return kind is not None and kind != "fine"


def _most_common(kinds: list[str | None]) -> str | None:
    """The kind most windows had; on a tie, the one seen last."""
    counts: dict[str | None, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    best = max(counts.values())
    return next(kind for kind in reversed(kinds) if counts[kind] == best)


class Trigger:
    """A run's capture rule and what it has seen: the baseline, the windows' medians, the anomaly
    waiting for confirmation, the captures taken, when, and how severe.

    Args:
        rule: the rule.
    """

    __slots__ = ("rule", "taken", "capped", "baseline_kind", "baseline_taken", "_seen", "_kinds", "_medians",
                 "_order", "_pending", "_streak", "_held", "_largest", "_last_at")

    def __init__(self, rule: CaptureRule) -> None:
        self.rule = rule
        self.taken = 0  #: anomaly captures taken (the baseline's is not one)
        self.capped = 0  #: confirmed anomalies the caps turned down
        self.baseline_kind: str | None = None  #: the verdict most baseline windows had, once known
        self.baseline_taken = False
        self._seen = 0  # windows seen
        self._kinds: list[str | None] = []  # the baseline windows' verdicts
        self._medians: list[float] = []  # sorted
        self._order: deque[float] = deque()  # the same values, oldest first
        self._pending: str | None = None  # the anomaly the latest windows showed: SLOW or a verdict's kind
        self._streak = 0  # how many windows in a row showed it
        self._held: str | None = None  # the verdict whose turn was taken (or capped) while it holds
        self._largest = 0.0  # the most severe anomaly traced
        self._last_at: float | None = None

    def _remember(self, p50_ms: float | None) -> None:
        if p50_ms is None or not math.isfinite(p50_ms):
            return
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

    def see(self, p50_ms: float | None, p95_ms: float | None, kind: str | None, now: float) -> Firing | None:
        """A window after the warm-up that overlaps no capture: the capture it takes now, or ``None``
        (no anomaly, one not confirmed yet, or one the caps turn down: counted in :attr:`capped`).

        Args:
            p50_ms: its median iteration time (``None`` when not known); ``p95_ms`` its 95th percentile.
            kind: its verdict's kind (``None`` without a verdict).
            now: the time on a monotonic clock, for the interval between captures.
        """
        rule = self.rule
        self._seen += 1
        if self._seen <= rule.min_history:
            return self._see_baseline(p50_ms, kind)
        median = self.median_ms
        if kind != self._held:
            self._held = None  # the verdict taken before no longer holds: it may turn again
        candidate: str | None = None
        said = ""
        if (p95_ms is not None and median is not None and len(self._medians) >= rule.min_history
                and p95_ms > rule.slowdown * median and p95_ms - median >= rule.min_excess_ms):
            candidate = SLOW
            said = f"p95 {p95_ms:.2f} ms > {rule.slowdown:g} x the run's median {median:.2f} ms"
        elif rule.on_verdict and _bad(kind) and kind != self.baseline_kind and kind != self._held:
            candidate = kind
            since = f"the baseline's {self.baseline_kind}" if self.baseline_kind is not None else "no verdict"
            said = f"verdict turned {kind} (from {since})"
        self._remember(p50_ms)
        if candidate is None:
            self._pending, self._streak = None, 0
            return None
        if candidate == self._pending:
            self._streak += 1
        else:
            self._pending, self._streak = candidate, 1
        if self._streak < rule.confirm:
            return None
        self._pending, self._streak = None, 0
        if candidate != SLOW:
            self._held = candidate  # not again while it holds, taken or capped
        reason = said + (f", {rule.confirm} windows in a row" if rule.confirm > 1 else "")
        # the confirming window's level: a spike before it is not the anomaly, and a slowdown that
        # began inside the first window shows its full size in the second
        ratio = p95_ms / median if p95_ms is not None and median is not None and median > 0.0 else 1.0
        severity = max(1.0, ratio)
        return self._budget(reason, severity, now)

    def _see_baseline(self, p50_ms: float | None, kind: str | None) -> Firing | None:
        """One of the first ``min_history`` windows: it sets the run's nature."""
        self._kinds.append(kind)
        self._remember(p50_ms)
        if self._seen < self.rule.min_history:
            return None
        self.baseline_kind = _most_common(self._kinds)
        if not self.rule.baseline:
            return None
        self.baseline_taken = True
        nature = self.baseline_kind if self.baseline_kind is not None else "no verdict"
        return Firing(f"baseline: the run's first settled windows, {nature}", baseline=True)

    def _budget(self, reason: str, severity: float, now: float) -> Firing | None:
        """A confirmed anomaly: captured unless the caps turn it down."""
        rule = self.rule
        soon = self._last_at is not None and now - self._last_at < rule.min_interval_s
        if self.taken >= rule.max_captures or (soon and severity < rule.severity_step * self._largest):
            self.capped += 1
            return None
        if soon:
            reason += (f"; {severity:.1f} x the median, at least {rule.severity_step:g} x the largest traced "
                       f"({self._largest:.1f} x)")
        self.taken += 1
        self._last_at = now
        self._largest = max(self._largest, severity)
        return Firing(reason, severity=severity)
