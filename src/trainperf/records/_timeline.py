"""The device timeline: what the device did in a window, from plain per-iteration timestamps.

On an asynchronous device (CUDA) the host's clock says when work was *queued*, not when it ran.
An adapter records two device events per iteration: when its first forward starts and when its
optimizer step ends. From those timestamps alone this module computes how long the device sat
idle between steps (waiting for the host: for data, for the loop's own work, for Python) and what
a window would gain if data loading or garbage collection cost nothing. It knows nothing of CUDA,
clocks or sinks; the listener feeds it numbers.

The protocol a device clock implements is :class:`DeviceTimeline`; ``trainperf.torch`` has the
CUDA one, and tests use a fake whose timestamps they choose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["DeviceTimeline"]


@runtime_checkable
class DeviceTimeline(Protocol):
    """A device clock that never blocks the host while training.

    The adapter calls :meth:`begin` when an iteration's first forward starts; the listener calls
    :meth:`end` when its optimizer step ends. Both only *record* a timestamp on the device's
    stream. When a window closes, the listener keeps its host figures and asks, on later
    iterations, whether the device has got that far (:meth:`ready`, a non-blocking poll); then it
    reads the window's timestamps with :meth:`take`. Only :meth:`wait`, at the end of training,
    may block.
    """

    def start(self) -> None:
        """Training (re)starts now: forget what was recorded and make now the origin of the first window."""

    def begin(self) -> None:
        """The current iteration's first forward starts now."""

    def end(self) -> None:
        """The current iteration's optimizer step ended now."""

    def ready(self, count: int) -> bool:
        """Whether the oldest ``count`` ended iterations not yet taken have completed on the device
        (never blocks)."""

    def take(self, count: int) -> list[tuple[float | None, float]]:
        """The oldest ``count`` ended iterations, completed, as ``(begin, end)`` device times in seconds
        since the end of the iteration taken before them (or since :meth:`start`); ``begin`` is
        ``None`` when :meth:`begin` was not called in that iteration. They are forgotten afterwards."""

    def wait(self) -> None:
        """Block until everything recorded so far has completed (end of training only)."""

    def stage(self, value: Any) -> Any:
        """Start copying ``value`` (a loss on the device) to the host without blocking, and return
        what ``float()`` reads once the *next* :meth:`end` has completed. ``value`` itself when it is
        not on the device."""


@dataclass(frozen=True, slots=True)
class DeviceWindow:
    """What the device did in one window, in seconds.

    Attributes:
        window_s: device time from the end of the previous window's last step to this window's last step.
        idles: per iteration, the device's idle time between the previous step's end and this
            iteration's first forward (0 when the forward was queued before the step ended).
        durations: per iteration, device time from the previous step's end to this one's.
    """

    window_s: float
    idles: tuple[float, ...]
    durations: tuple[float, ...]

    @property
    def idle_s(self) -> float:
        """Total idle time between steps."""
        return sum(self.idles)

    @property
    def idle_max_s(self) -> float:
        return max(self.idles) if self.idles else 0.0

    @property
    def idle_mean_s(self) -> float:
        return self.idle_s / len(self.idles) if self.idles else 0.0

    def data_idle_s(self, etls: Sequence[float]) -> float:
        """Idle time that free data would remove: per iteration, the smaller of the device's idle
        time and the host's data wait before it (a wait hidden behind device work costs nothing).

        Args:
            etls: each iteration's host data wait in seconds, oldest first (as many as ``idles``).
        """
        if len(etls) != len(self.idles):
            raise ValueError(f"etls must hold one data wait per iteration ({len(self.idles)}), got {len(etls)}")
        return sum(min(idle, etl) for idle, etl in zip(self.idles, etls, strict=True))


def device_window(times: Sequence[tuple[float | None, float]], excluded: Sequence[float] = ()) -> DeviceWindow:
    """The device figures of a window from its iterations' ``(begin, end)`` times.

    Args:
        times: per iteration, oldest first, the device time its first forward started (``None``
            when unknown: its idle time counts as 0) and the time its step ended, in seconds since
            the end of the previous window's last step.
        excluded: per iteration (missing ones: 0), host seconds left out of the window before it
            (validation, checkpointing, see :meth:`PerformanceListener.exclude`, and trainperf's own
            reports): they are taken off that iteration's idle gap, as far as the device sat idle;
            work the device did meanwhile stays in the iteration.

    Example:
        >>> w = device_window([(0.002, 0.035), (0.035, 0.068)])
        >>> [round(i * 1000, 3) for i in w.idles], round(w.window_s * 1000, 3)
        ([2.0, 0.0], 68.0)
    """
    if not times:
        raise ValueError("a device window needs at least one iteration")
    idles: list[float] = []
    durations: list[float] = []
    prev = 0.0
    for i, (begin, end) in enumerate(times):
        left_out = excluded[i] if i < len(excluded) else 0.0
        if begin is None:
            gap, removed = 0.0, left_out
        else:  # the host's left-out time removes the device's idle gap only, never work it overlapped
            gap = max(0.0, begin - prev)
            removed = min(left_out, gap)
            gap -= removed
        idles.append(gap)
        durations.append(max(0.0, end - prev - removed))
        prev = end
    return DeviceWindow(window_s=sum(durations), idles=tuple(idles), durations=tuple(durations))


def speedup(window_s: float, removable_s: float) -> float | None:
    """How many times faster a window of ``window_s`` would run without ``removable_s`` of it.

    ``None`` when the window is empty or the removable time is all of it (no finite answer).

    Example:
        >>> speedup(1.0, 0.46)
        1.8518518518518516
    """
    if window_s <= 0.0:
        return None
    rest = window_s - max(0.0, removable_s)
    if rest <= 0.0:
        return None
    return window_s / rest
