"""The framework-free core: counts iterations, times windows, and emits one record per window."""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..base import bad_iteration, check_callable, check_clock, env_rank, host_name, iteration_error
from ..records import GC_BOUND_SHARE, INPUT_BOUND_SHARE, LOOP_BOUND_SHARE, DeviceTimeline, PerformanceRecord
from ..sinks import MemorySink, Sink
from ._capture_wiring import open_capture
from ._closer import WindowCloser
from ._closing import run_steps, say_failures
from ._emit import Emitter, say_sink
from ._handover import CLOSED, SHARED, Handover
from ._listener_setup import ListenerSetup
from ._named_spans import Spans
from ._notices import BottleneckWarning, Notices
from ._open_window import OpenWindow
from ._options import OPTIONS_DOC, ListenerOptions, TokenCounter, checked_sinks
from ._own_time import OwnTime
from ._publish import Publisher
from ._readings import HostReadings

if TYPE_CHECKING:  # a listener without a capture loads none of the profile package
    from ..profile import CaptureRule
    from ..records import WindowEntry

__all__ = ["PerformanceListener", "BottleneckWarning"]

_INF = math.inf
_get_ident = threading.get_ident


class PerformanceListener(ListenerSetup):
    """Reports data-loading wait, iteration time, throughput, score and GC every ``frequency`` iterations.

    The listener knows no framework: adapters (``trainperf.torch``, ``trainperf.lightning``) call
    :meth:`record_iteration` once per optimizer step. Between reports that call only appends to a few lists and
    reads the clock; figures are computed, the score is read and lines are formatted only when a window is reported.

    Args:
{options}
    Example:
        >>> listener = PerformanceListener(10, report_gc=True)
        >>> for batch in loader:  # doctest: +SKIP
        ...     train_step(batch)
        ...     listener.record_iteration(samples=len(batch))
    """

    def __init__(
        self,
        frequency: int = 1,
        *,
        report_score: bool | None = None,
        report_gc: bool = False,
        report_etl: bool = True,
        report_iteration: bool = True,
        report_time: bool = True,
        report_sample: bool = True,
        report_batch: bool = True,
        sinks: Iterable[Sink] | None = None,
        strict: bool = False,
        sink_thread: bool = True,
        history: int | None = 1000,
        verdict: bool = True,
        input_bound_share: float = INPUT_BOUND_SHARE,
        gc_bound_share: float = GC_BOUND_SHARE,
        loop_bound_share: float = LOOP_BOUND_SHARE,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
        rank: int | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        cluster_every: int = 10,
        cluster_timeout_s: float = 30.0,
        report_hardware: bool = True,
        tokens: TokenCounter | None = None,
        flops_per_step: float | None = None,
        peak_flops: float | None = None,
        profile_dir: str | os.PathLike[str] | None = None,
        profile_rule: CaptureRule | None = None,
        memory_history: str = "when_short",
    ) -> None:
        options = ListenerOptions(
            frequency, report_score, report_gc, report_etl, report_iteration, report_time, report_sample,
            report_batch, strict, sink_thread, history, verdict, input_bound_share, gc_bound_share,
            loop_bound_share, rank, run_dir, cluster_every, cluster_timeout_s, report_hardware, tokens,
            flops_per_step, peak_flops, profile_dir, profile_rule, memory_history,
        )
        self.options = options
        self.frequency = options.frequency
        self._keeps_score = options.report_score is not False  # a score given is recorded unless refused
        check_callable("clock", clock)
        check_callable("wall_clock", wall_clock)
        sink_list = checked_sinks(sinks)
        self.history = MemorySink(options.history)
        self._emitter = Emitter(sink_list, strict=options.strict, inline=not options.sink_thread, say=say_sink)
        # The clock of every figure: it stands still while trainperf works (see _own_time). Its
        # ledger is the one of the thread that trains: this one until another records.
        self._own = OwnTime(clock)
        self._user_clock = self._own.clock
        self._clock = self._user_clock.read
        try:
            started = check_clock(self._clock())  # before anything is opened
        except TypeError:  # not a number at all
            check_clock(clock())
            raise
        self._wall_clock = wall_clock
        self.rank = rank if rank is not None else env_rank()
        self.device = self.epoch = None  # what adapters say (use_device, set_epoch)
        self.host = host_name()
        self.pid = os.getpid()
        user_clock = self._user_clock
        self._readings = HostReadings(self._clock, report_gc=report_gc, report_hardware=options.report_hardware,
                                      skip_gc=lambda: user_clock.own.busy > 0)
        self._notices = Notices()
        self._publisher = Publisher(options, self.history, self._emitter, self._notices, host_name=self.host,
                                    pid=self.pid)
        self._on_close: list[Callable[[], None]] = []
        self._spans = Spans(self._clock, self.add_time, lambda: self._closed)  # on this thread until start()

        self._owner: int | None = None  # the thread that records; None until the first call
        self._handover = Handover()
        self._lock = threading.RLock()
        self._timeline: DeviceTimeline | None = None  # the device clock, for the hot path
        self._open = OpenWindow()
        self._closed = False
        self._explicit_etl = False
        self._pending_etl = 0.0
        self._explicit_source = "given"
        self._count = 0
        self._resumed_at = 0  # the count a resumed run started from (see start)
        self._next_report = 0
        self._open_run_dir(run_dir, clock, wall_clock)  # and the job's time account, with its earlier attempts
        self._closer = WindowCloser(self._own, self._readings, self._publisher, self._notices, self._emitter,
                                    self._run_dir, wall_clock, verdict=options.verdict)
        self._capture = self._closer.capture = open_capture(
            options, clock, self._run_dir, lambda: (self.rank, self.host, self.pid), self._emitter.submit)
        self.set_flops()
        self._reset_window(started, first=True)

    # ------------------------------------------------------------------ hot path
    def record_iteration(
        self,
        samples: int | None = None,
        batches: int = 1,
        etl: float = 0.0,
        score: Any = None,
        started: float | None = None,
        other: float = 0.0,
        steps: int = 1,
        skipped: int = 0,
        tokens: int | None = None,
    ) -> PerformanceRecord | None:
        """One iteration (optimizer step) ended now.

        Args:
            samples: samples in the iteration (all micro-batches); ``None`` when unknown.
            batches: data batches consumed by the iteration.
            etl: seconds the iteration waited for data.
            score: the loss, any object ``float()`` accepts (a tensor is fine); read on report only.
            started: alternatively to ``etl``, the time at which the iteration's compute started,
                read from the clock the listener was given (``time.perf_counter`` by default); its
                data wait is then the time since the previous iteration ended, trainperf's own
                time left out.
                Both are ignored for an iteration during which :meth:`add_etl` was called.
            other: seconds of the iteration's host time that were neither data wait nor the step
                (evaluation, logging, metric syncs between the step and the next batch).
            steps: optimizer steps taken in the iteration.
            skipped: of those, steps skipped (a ``GradScaler`` that found inf/NaN gradients).
            tokens: real tokens in the iteration (padding left out); ``None`` when not counted. A
                window's ``tokens`` and ``tokens_per_sec`` are known when each of its iterations gave them.

        Returns:
            The newest record built by this call, else ``None``. Without a device timeline that is
            the record of the window this iteration closed; with one (CUDA), a window's record is
            built on the first later iteration that finds the device done with it, so it may come
            a few iterations late (its ``first_iteration`` and ``iteration`` say which it covers).

        Raises:
            ValueError, TypeError: an argument is not a count or a duration it can be (negative,
                NaN, infinite, a skipped count above ``steps``, not a number); nothing is recorded.
            RuntimeError: the listener is closed.
        """
        now = self._clock()  # first: what the call does after it is trainperf's, never the user's
        if _get_ident() != self._owner:
            return self._record_from_other_thread((samples, batches, etl, score, started, other, steps, skipped,
                                                   tokens))
        try:  # one chained test of every value: cheap, and NaN or infinity fails it too
            if not (
                0.0 <= etl <= etl + other < _INF
                and 0 <= skipped <= steps
                and batches >= 0
                and (samples is None or samples >= 0)
                and (started is None or started - started == 0.0)
                and (tokens is None or tokens >= 0)
            ):
                raise iteration_error(samples, batches, etl, started, other, steps, skipped, tokens)
        except TypeError:
            raise iteration_error(samples, batches, etl, started, other, steps, skipped, tokens) from None
        if self._explicit_etl:
            etl = self._pending_etl
            started = None
            self._pending_etl = 0.0
            self._explicit_etl = False
        elif started is not None:  # a reading of the raw clock: onto the clock the window is measured with
            started = self._user_clock.at(started)
        if score is not None:
            self._open.score = score
        if tokens is not None:
            self._open.add_tokens(tokens)
        count = self._count + 1
        if count < self._next_report:
            self._count = count
            self._append((now, etl, started, samples, batches, other, steps, skipped))
            if self._timeline is not None:
                self._timeline.end()
            return None
        head = now + self._user_clock.shift  # the raw clock's reading for `now`: own time from there to the return
        try:
            return self._report((now, etl, started, samples, batches, other, steps, skipped), head)
        finally:
            self._own.finish(head)

    def record_step(self, now: float, samples: int | None, batches: int, etl: float, started: float | None,
                    other: float, steps: int, skipped: int, tokens: int | None = None) -> PerformanceRecord | None:
        """The adapters' entry point: :meth:`record_iteration` for an iteration that ended at ``now``, a reading
        of :attr:`clock` (not of the raw clock), whose figures are differences of that clock: nothing is checked
        again. A :class:`~trainperf.core.StepAccountant` calls it with these arguments, in this order."""
        if _get_ident() != self._owner or self._explicit_etl:  # first call, other threads, add_etl
            if started is not None:  # record_iteration takes the raw clock's time
                started += self._user_clock.shift
            return self.record_iteration(samples, batches, etl, None, started, other, steps, skipped, tokens)
        if tokens is not None:
            self._open.add_tokens(tokens)
        count = self._count + 1
        if count < self._next_report:
            self._count = count
            self._append((now, etl, started, samples, batches, other, steps, skipped))
            if self._timeline is not None:
                self._timeline.end()
            return None
        head = self._own.raw()  # `now` is the step's end, user callbacks may have run since: own time starts here
        try:
            return self._report((now, etl, started, samples, batches, other, steps, skipped), head)
        finally:
            self._own.finish(head)

    def _record_from_other_thread(self, call: tuple[Any, ...]) -> PerformanceRecord | None:
        """The first call (types are checked once, here), a call after :meth:`close`, and every call once a second
        thread has used the listener: those take the lock. ``call``: :meth:`record_iteration`'s arguments."""
        self._handover.left_unlocked()
        with self._lock:
            self._handover.holding()
            if self._closed:
                raise RuntimeError("this PerformanceListener is closed: it records no more iterations")
            if self._owner is None:
                samples, batches, etl, _, started, other, steps, skipped, tokens = call
                error = bad_iteration(samples, batches, etl, started, other, steps, skipped, tokens)
                if error is not None:
                    raise error
                self._owner = _get_ident()
                self._own.move_to_this_thread()
                return self.record_iteration(*call)
            self._claim()
            self._owner = _get_ident()  # the lock's holder takes the plain path for this one call
            try:
                return self.record_iteration(*call)
            finally:
                if not self._closed:
                    self._owner = SHARED

    # ------------------------------------------------------------------ reporting
    def _report(self, last: WindowEntry, head: float | None = None) -> PerformanceRecord | None:
        """Report ``last``; trainperf's own time began at ``head``, a raw clock reading (lock included)."""
        self._handover.left_unlocked()
        with self._lock:  # another thread's first call waits for a report to end
            self._handover.holding()
            self._count += 1  # with its entry, under the lock: a thread taking over never sees one without the other
            window = self._open
            capture = self._capture
            if capture is not None and capture.busy:  # the iteration's end, for the profiler
                began, head = self._own.begin(head), None
                try:
                    capture.step(self._count, last[0])
                finally:
                    self._closer.own_end(window, self._count, began)
            closes = not (self._count < window.end or last[0] < window.start)
            timeline = self._timeline
            if timeline is not None:
                if closes and self._keeps_score:
                    window.score = self._closer.pending.stage(window.score)
                timeline.end()
            if not closes:
                # An iteration polling windows that wait for the device; or one that passed the unlocked check just
                # before a second thread took over and reported the window it would have closed: it joins the next.
                window.entries.append((max(last[0], window.start), *last[1:]))
                record = self._closer.poll(window, self._count, on_cuda=self.device is not None)
                if not self._closer.pending and not self._closer.held and not self._capturing():
                    self._next_report = window.end
                return record
            return self._report_locked(last, head)

    def _report_locked(self, last: WindowEntry, head: float | None = None) -> PerformanceRecord | None:
        """Close the window that ``last`` ends (see :meth:`WindowCloser.close`); own time began at ``head``."""
        try:
            record = self._closer.close(self._open, last, self._count, (self.epoch, self.rank, self.device),
                                        self._explicit_source, began=head)
        finally:
            self._reset_window(self._own.stood_at, first=False)  # where the clock stood still: no gap
        self._closer.say(on_cuda=self.device is not None)
        return record

    # ------------------------------------------------------------------ teardown
    def flush(self) -> PerformanceRecord | None:
        """Report the iterations since the last report now, if there are any (end of training), and every window
        still waiting for the device, after waiting for it once. Returns the newest record built (``None``
        on a closed listener)."""
        with self._lock:
            self._claim()
            if self._closed:
                return None
            record = self._flush_unlocked()
        self._emitter.flush()
        return record

    def close(self) -> None:
        """Report what is left of the last window (see :meth:`flush`), remove hooks and the ``gc.callbacks``
        entry, and close the sinks. Idempotent.

        Every step runs even when an earlier one fails: a hook-removal callback or a sink that raises is
        reported as a :class:`~trainperf.SinkError` warning once everything is closed. A closed listener
        records no more iterations (:meth:`record_iteration` raises ``RuntimeError``); :meth:`flush` returns ``None``.
        """
        with self._lock:
            self._claim()
            if self._closed:
                return
            capture, count, failures = self._capture, self._count, list[str]()
            # the capture's traces are written and said, their run directory events sent, before the sinks close
            run_steps([("stopping the profiler's capture", capture.stop_arming if capture is not None else None),
                       ("reporting the last window", self._flush_unlocked),
                       ("closing the profiler's capture", functools.partial(capture.close, count) if capture else None),
                       ("reporting the windows that waited for their trace",
                        functools.partial(self._closer.release_all, count, on_cuda=self.device is not None))], failures)
            self._closed = True
            self._owner = CLOSED
            callbacks, self._on_close = self._on_close, []
            run_steps([("delivering the records", self._emitter.flush),  # what a cluster link reads at close
                       ("giving the clock back", self._own.close), ("closing the readings", self._readings.close),
                       *((f"close callback {callback!r}", callback) for callback in callbacks)], failures)
            try:
                self._emitter.close()
            finally:
                say_failures(failures)

    def _flush_unlocked(self) -> PerformanceRecord | None:
        if self._closed:
            return None
        record = None
        window = self._open
        if window.entries:
            if self._keeps_score:
                window.score = self._closer.pending.stage(window.score)  # read after the wait below
            record = self._report_locked(window.entries.pop())
        if self._closer.pending or self._closer.held:
            record = self._closer.drain(window, self._count, on_cuda=self.device is not None) or record
            self._next_report = self._count + 1 if self._closer.held else window.end
        return record

    def _claim(self) -> None:
        """Called with the lock held by every call from outside the unlocked hot path: a thread other than the
        recording one makes the listener shared, every call taking the lock from now on (see :meth:`Handover.share`)."""
        owner = self._owner
        if owner is not None and owner >= 0 and owner != _get_ident():
            self._handover.expect(owner)  # before the owner changes: the first thread may see it at once
            self._owner = SHARED
            self._handover.share(owner)

    def __enter__(self) -> PerformanceListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PerformanceListener(frequency={self.frequency}, iteration={self._count})"


PerformanceListener.__doc__ = (PerformanceListener.__doc__ or "").replace("{options}", OPTIONS_DOC)
