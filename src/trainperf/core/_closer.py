"""Closing a window: its host figures are read, its device side waited for (never blocking), and its
record published, once the trace of a capture it overlaps is written (so that it names only a trace
that exists). It knows nothing of the listener: the listener hands it the open window, the iteration
count and who measured it, under its lock, on the thread that records."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..base import user_stacklevel
from ..records import DeviceTimeline, DeviceWindow, PerformanceRecord, WindowEntry, window_figures
from ._emit import Emitter
from ._notices import Notices
from ._open_window import OpenWindow
from ._own_time import OwnTime
from ._pending import HostWindow, PendingWindows, StepFlops
from ._publish import Publisher
from ._readings import HostReadings

if TYPE_CHECKING:  # a listener with neither loads neither
    from ..profile import Capture
    from ..ranks import RunDirLink

__all__: list[str] = []

_Done = list[tuple[HostWindow, DeviceWindow]]


class WindowCloser:
    """From a closed window to its record, with trainperf's own time in it left out.

    Args:
        own: trainperf's own time on the thread that trains (a close is own time).
        readings: GC and hardware readings, taken once per window.
        publisher: builds each record and hands it to the sinks.
        notices: the warnings said once the records reached the sinks.
        emitter: the sinks (the run directory's spans go to its writer thread).
        run_dir: the run directory this rank writes, or ``None``.
        wall_clock: the clock of the records' timestamps.
        verdict: whether records carry a verdict (the CPU load is read only for it).

    Attributes:
        pending: the device clock and the closed windows waiting for it.
        held: the windows, oldest first, whose device side is known but whose capture's trace is not
            written yet (nor failed); every later window waits behind them, so records keep their order.
        flops: the model's FLOPs per optimizer step and the device's peak, for MFU (``None``: unknown).
        capture: the profiler captures each published window may trigger (``None``: no ``profile_dir``).
    """

    __slots__ = ("own", "readings", "publisher", "notices", "emitter", "run_dir", "wall_clock", "verdict",
                 "pending", "held", "flops", "capture")

    def __init__(self, own: OwnTime, readings: HostReadings, publisher: Publisher, notices: Notices,
                 emitter: Emitter, run_dir: RunDirLink | None, wall_clock: Callable[[], float], *,
                 verdict: bool) -> None:
        self.own, self.readings, self.publisher, self.notices = own, readings, publisher, notices
        self.emitter, self.run_dir, self.wall_clock, self.verdict = emitter, run_dir, wall_clock, verdict
        self.pending = PendingWindows()
        self.held: deque[tuple[HostWindow, DeviceWindow | None]] = deque()
        self.flops: StepFlops | None = None  # the FLOPs per step and the peak, once known
        self.capture: Capture | None = None

    def use(self, timeline: DeviceTimeline | None) -> None:
        """Measure with ``timeline`` from now on; the windows that waited for the previous one are
        published first, after waiting for it once."""
        self._publish_all(self.pending.use(timeline), None)

    def close(self, window: OpenWindow, last: WindowEntry, count: int, who: tuple[int | None, int | None, int | None],
              source: str, *, began: float | None = None) -> PerformanceRecord | None:
        """Close ``window`` with ``last``, its iteration ``count``; ``who`` is the ``(epoch, rank, device)``
        its record carries and ``source`` what measured the data wait given to the listener. The
        record is built now, or, with a device timeline, once the device has done the window's work:
        returns the newest record built. The caller opens the next window, then calls :meth:`say`.
        ``began``: the raw clock's reading at which trainperf's work on it began (default: now)."""
        began = self.own.begin(began)
        try:
            return self._close(window, last, count, who, source)
        finally:
            self.own_end(window, count, began, new_window=True)

    def _close(self, window: OpenWindow, last: WindowEntry, count: int,
               who: tuple[int | None, int | None, int | None], source: str) -> PerformanceRecord | None:
        window_start = window.start
        entries = window.entries
        entries.append(last)
        readings, notices = self.readings, self.notices
        figures = window_figures(window_start, entries, pauses=readings.take_pauses())
        padded, loss = window.window_token_counts(figures.iterations)
        gap = figures.etl_from_gap
        epoch, rank, device = who
        host = HostWindow(
            first_iteration=window.first_iteration,
            iteration=count,
            figures=figures,
            warmup=window.warmup,
            timestamp=self.wall_clock(),
            gc=readings.read_collections(notices.once),
            gc_s=figures.gc_s,
            score=window.score,
            epoch=epoch,
            rank=rank,
            device=device,
            overhead_s=self.own.overhead_s,
            times=window.take_times(figures.iterations),
            etl_source=source if gap == 0 else "gap" if gap == figures.iterations else f"{source}+gap",
            hardware=readings.read_hardware(notices.once),
            excluded=window.take_excluded(count, figures.iterations),
            tokens=window.window_tokens(figures.iterations),
            tokens_padded=padded,
            tokens_loss=loss,
            flops=self.flops,
            shapes=window.shapes,
        )
        pending = self.pending
        record: PerformanceRecord | None
        if pending.timeline is None:
            record = self._publish(host, None, count)
        else:
            record = self._publish_all(pending.add(host), count)
        if self.held:
            record = self.release(count) or record
        if self.run_dir is not None:  # the window's host spans, once its iterations are known
            self.emitter.submit(self.run_dir.spans_task(window_start, entries, count, self.own.clock.shift))
        return record

    def poll(self, window: OpenWindow, count: int, *, on_cuda: bool) -> PerformanceRecord | None:
        """Publish the windows whose device work has completed and whose capture's trace is written
        (never blocks); their cost is left out of ``window``, the open one, after ``count`` iterations."""
        done = self.pending.poll()
        if not done and not self.held:
            return None
        return self._publish_timed(done, window, count, on_cuda=on_cuda)

    def drain(self, window: OpenWindow, count: int, *, on_cuda: bool) -> PerformanceRecord | None:
        """Publish every window still waiting for the device, after waiting for it once (end of
        training), and those waiting for a capture's trace being written, after waiting for it (at most
        the capture's ``close_wait_s``; a capture still tracing keeps its windows), as
        trainperf's own time; the newest record, or ``None`` when none waited."""
        if not self.pending and not self.held:
            return None
        if self.held and self.capture is not None:
            self.capture.wait(self.capture.close_wait_s)
        return self._publish_timed(self.pending.drain(), window, count, on_cuda=on_cuda)

    def finish(self) -> None:
        """Publish every window still waiting, after waiting for the device once (training restarts)."""
        self._publish_all(self.pending.drain(), None)

    def _publish_timed(self, done: _Done, window: OpenWindow, count: int, *, on_cuda: bool) -> PerformanceRecord | None:
        began = self.own.begin()
        try:
            record = self._publish_all(done, count)
            if self.held:
                record = self.release(count) or record
        finally:
            self.own_end(window, count, began)
        self.say(on_cuda=on_cuda)
        return record

    def own_end(self, window: OpenWindow, count: int, began: float, *, new_window: bool = False) -> None:
        """trainperf's own work begun at ``began`` ended: on a device, its idle time then is not the
        next iteration's (``count`` is the iterations so far) either."""
        seconds = self.own.end(began, new_window=new_window)
        if self.pending.timeline is not None:
            window.exclude_before(count, seconds)

    def say(self, *, on_cuda: bool) -> None:
        """Issue the warnings of the records just built, once they have reached every sink. Saying one
        is trainperf's own time (the first warning of a run formats it and reads the user's source
        line: milliseconds), kept out of the window now open."""
        notices = self.notices
        notices.on_cuda = on_cuda
        if not notices.waiting:
            return
        began = self.own.begin()
        try:
            notices.say(user_stacklevel)
        finally:
            self.own.end(began)

    def _publish_all(self, done: _Done, count: int | None) -> PerformanceRecord | None:
        record = None
        for host, device in done:
            record = self._publish(host, device, count) or record
        return record

    def release(self, count: int, *, force: bool = False) -> PerformanceRecord | None:
        """Publish the held windows, oldest first, up to the first whose capture's trace is still not
        written (``force``: all of them, naming only the traces written by now: training ended); the
        newest record published, else ``None``."""
        capture = self.capture
        if capture is None or not self.held:
            return None
        capture.collect(count)
        record = None
        while self.held:
            host, device = self.held[0]
            if not force and capture.waits_for(host.first_iteration, host.iteration):
                break
            self.held.popleft()
            host.capture = capture.path_in(host.first_iteration, host.iteration)
            record = self._publish_now(host, device, count)
        return record

    def release_all(self, count: int, *, on_cuda: bool) -> None:
        """Training ended and the captures' traces are written (or given up on): every held window is
        published, naming its trace when it was written, and its warnings said."""
        if self.held:
            self.release(count, force=True)
            self.say(on_cuda=on_cuda)

    def _publish(self, host: HostWindow, device: DeviceWindow | None, count: int | None) -> PerformanceRecord | None:
        """Publish a window, or hold it while the trace of a capture it overlaps is not written (or
        while older windows are held)."""
        capture = self.capture
        if capture is not None:
            if self.held or capture.waits_for(host.first_iteration, host.iteration):
                self.held.append((host, device))
                return None
            host.capture = capture.path_in(host.first_iteration, host.iteration)
        return self._publish_now(host, device, count)

    def _publish_now(self, host: HostWindow, device: DeviceWindow | None, count: int | None) -> PerformanceRecord:
        """Publish a window; with the iterations done so far (``count``; ``None`` when training
        restarts), a capture may arm."""
        cpu = self.readings.cpu_load(host.hardware, host.figures) if device is None and self.verdict else None
        record = self.publisher.publish(host, device, cpu)
        if self.capture is not None and count is not None:  # in trainperf's own time: not the loop's
            self.capture.consider(record, count)
        return record
