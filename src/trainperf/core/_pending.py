"""Windows whose device work has not finished yet: their host figures wait here for the device.

On an asynchronous device a window's record cannot be built when the host closes it without
waiting for the device (a synchronisation, which drains the launch queue and slows training).
Instead the listener keeps the window's host side here and asks the device timeline, on later
iterations, whether the window's last event has completed; then the window's device times are
read and the record is built. Only :meth:`PendingWindows.drain`, at the end of training, waits.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..records import DeviceTimeline, DeviceWindow, GCStat, Peak, WindowFigures, device_window
from ._step_flops import ShapeFlops, StepShape

__all__: list[str] = []


@dataclass(frozen=True, slots=True)
class StepFlops:
    """The model's FLOPs per optimizer step (counted or given) and the peak its MFU is taken against;
    ``by_shape``: the FLOPs of each step shape, when they follow the batch's shape (``per_step`` is
    then the first count, for iterations whose shape is not known)."""

    per_step: float | None
    peak: Peak | None
    by_shape: ShapeFlops | None = None


@dataclass(slots=True)
class HostWindow:
    """What the host measured of one closed window, kept until its device side is known.

    Attributes:
        first_iteration: the window's first iteration (1-based).
        iteration: its last iteration.
        figures: the host's window figures.
        warmup: whether it is the warm-up window.
        timestamp: wall-clock time the window closed.
        gc: per-collector statistics; ``gc_s`` their total pause in seconds.
        score: the loss as staged on the report iteration (``float()`` reads it once the device is done).
        overhead_s: what the previous report cost the host.
        hardware: the probes' figures, read on the report iteration.
        excluded: per iteration of the window, host seconds left out before it.
        times: the named parts the adapters timed (``add_time``), mean milliseconds per iteration.
        tokens: the window's real tokens, when every iteration counted them.
        tokens_padded: its padded tokens, and ``tokens_loss`` its loss tokens, likewise.
        flops: the model's FLOPs per optimizer step and the device's peak, when known.
        shapes: how many of the window's iterations trained on each step shape.
        capture: the profiler trace of a capture whose iterations overlap the window.
    """

    first_iteration: int
    iteration: int
    figures: WindowFigures
    warmup: bool
    timestamp: float
    gc: tuple[GCStat, ...]
    gc_s: float
    score: Any
    epoch: int | None
    rank: int | None
    device: int | None
    overhead_s: float
    etl_source: str
    hardware: dict[str, float | None] = field(default_factory=dict)
    tokens: int | None = None
    tokens_padded: int | None = None
    tokens_loss: int | None = None
    flops: StepFlops | None = None
    shapes: dict[StepShape, int] = field(default_factory=dict)
    capture: str | None = None
    excluded: tuple[float, ...] = ()
    times: dict[str, float] = field(default_factory=dict)


class PendingWindows:
    """The device clock a listener measures with, and the closed windows waiting for it, oldest first.
    Without a clock (the host's alone) nothing waits.

    Args:
        timeline: the device clock whose events the windows wait for, or ``None``.
    """

    __slots__ = ("timeline", "_windows")

    def __init__(self, timeline: DeviceTimeline | None = None) -> None:
        self.timeline = timeline
        self._windows: deque[HostWindow] = deque()

    def __len__(self) -> int:
        return len(self._windows)

    def use(self, timeline: DeviceTimeline | None) -> list[tuple[HostWindow, DeviceWindow]]:
        """Measure with ``timeline`` from now on (and start it); returns the windows that waited for
        the previous clock, after waiting for it once."""
        done = self.drain()
        self.timeline = timeline
        self.restart()
        return done

    def restart(self) -> None:
        """Training (re)starts: the clock's next event opens the first iteration."""
        if self.timeline is not None:
            self.timeline.start()

    def stage(self, score: Any) -> Any:
        """The loss, copied to the host behind the step's work (read once the window's events completed)."""
        if self.timeline is None or score is None:
            return score
        return self.timeline.stage(score)

    def add(self, window: HostWindow) -> list[tuple[HostWindow, DeviceWindow]]:
        """Keep ``window`` until its device work has completed; returns the windows done by now."""
        self._windows.append(window)
        return self.poll()

    def poll(self) -> list[tuple[HostWindow, DeviceWindow]]:
        """The windows, oldest first, whose device work has completed by now (never blocks)."""
        done: list[tuple[HostWindow, DeviceWindow]] = []
        timeline = self.timeline
        while self._windows and timeline is not None:
            host = self._windows[0]
            n = host.figures.iterations
            if not timeline.ready(n):
                break
            self._windows.popleft()
            done.append((host, device_window(timeline.take(n), host.excluded)))
        return done

    def drain(self) -> list[tuple[HostWindow, DeviceWindow]]:
        """Every window, after waiting once for the device (end of training)."""
        if not self._windows or self.timeline is None:
            return []
        self.timeline.wait()
        return self.poll()
