"""What adapters set up on a listener and what they read from it, apart from the hot path and the
reports: the device, the rank and epoch, collectors and probes, loader workers, FLOPs, advisors, the
device clock, close callbacks, and the clocks and counts it measures with. :class:`~trainperf.PerformanceListener`
is built on it; the state it touches is the listener's own, created in the listener's ``__init__``."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..base import check_callable, check_int, check_part, check_seconds, check_str
from ..records import DeviceTimeline, Peak, RunSummary, WindowEntry
from ..sinks.shared import Sink, describe
from ._closer import WindowCloser
from ._collections import Collector
from ._emit import Emitter
from ._flop_policy import step_flops
from ._goodput_live import LiveGoodput
from ._hardware import Probe
from ._named_spans import ListenerSpan, SpanRoute, Spans, check_kind
from ._notices import Advisor, Notices
from ._open_window import OpenWindow
from ._options import ListenerOptions
from ._own_time import OwnTime, UserClock
from ._publish import Publisher
from ._readings import HostReadings
from ._step_flops import ShapeFlops, StepShape

if TYPE_CHECKING:  # a listener with neither loads neither
    from ..profile import Capture
    from ..ranks import RunDirLink

__all__: list[str] = []

#: What a device clock must offer (see :class:`~trainperf.DeviceTimeline`).
_TIMELINE_METHODS = ("start", "begin", "end", "ready", "take", "wait", "stage")


class ListenerSetup:
    """The set-up and read-only side of a listener (see the module's docstring)."""

    options: ListenerOptions
    frequency: int
    rank: int | None
    device: int | None
    epoch: int | None
    _readings: HostReadings
    _notices: Notices
    _emitter: Emitter
    _publisher: Publisher
    _closer: WindowCloser
    _open: OpenWindow
    _run_dir: RunDirLink | None
    _timeline: DeviceTimeline | None
    _user_clock: UserClock
    _clock: Callable[[], float]
    _wall_clock: Callable[[], float]
    _lock: threading.RLock
    _on_close: list[Callable[[], None]]
    _explicit_source: str
    _count: int
    _resumed_at: int
    _next_report: int
    _closed: bool
    _own: OwnTime
    _owner: int | None
    _capture: Capture | None
    _append: Callable[[WindowEntry], None]
    _explicit_etl: bool
    _pending_etl: float
    _goodput: LiveGoodput
    _spans: Spans

    def about_to_wait(self) -> None:
        """Say that the training thread is about to wait without running Python (for the next batch, the
        device, a collective): the writer thread writes the records it holds now, which then costs the training
        thread nothing. The adapters say it before each loader fetch. It changes no figure."""
        self._emitter.nudge()

    def tell_sinks(self, event: Mapping[str, Any]) -> None:
        """Hand rank 0's word on the ranks to the sinks' ``on_cluster`` (see :class:`~trainperf.sinks.Sink`)."""
        self._emitter.tell(event)

    @property
    def sinks(self) -> list[Sink]:
        """The user's sinks (without :attr:`history`)."""
        return list(self._emitter.sinks)

    def add_sink(self, sink: Sink) -> None:
        """Add a sink; it receives every later record."""
        if not callable(sink):
            raise TypeError(f"sink must be a callable taking a record, got {describe(sink)}")
        self._emitter.sinks.append(sink)

    def set_epoch(self, epoch: int | None) -> None:
        """The epoch that later records carry (adapters call it at each epoch's start)."""
        self.epoch = check_int("epoch", epoch, optional=True)

    def set_etl_source(self, source: str) -> None:
        """Name what measured the ``etl`` given to :meth:`record_iteration` (records carry it as ``etl_source``; default
        ``"given"``, ``"loader"`` once :meth:`add_etl` was used). Iterations timed by ``started`` count as ``"gap"``."""
        self._explicit_source = check_str("source", source, empty=False)

    def set_rank(self, rank: int | None) -> None:
        """The process rank that later records carry (adapters call it when they find a process group).
        A run directory that has received nothing yet moves to the rank's folder."""
        self.rank = check_int("rank", rank, optional=True)
        if self._run_dir is not None and rank is not None:
            self._run_dir.set_rank(rank)

    def use_device(self, index: int | None, timeline: DeviceTimeline | None = None) -> None:
        """The model runs on device ``index`` (a CUDA ordinal): later records carry it, and with a ``timeline`` the
        iteration times and the device's idle time come from that device's clock (see :meth:`set_timeline`)."""
        self.device = check_int("index", index, optional=True)
        if timeline is not None:
            self.set_timeline(timeline)

    def add_collector(self, name: str, read: Collector) -> None:
        """Report another collector beside Python's generations.

        Args:
            name: the collector's name in records and lines.
            read: returns cumulative ``(count, milliseconds or None)``; called on report iterations only.
        """
        self._readings.add_collector(name, read)

    def set_loader_workers(self, pids: Callable[[], Collection[int]]) -> None:
        """Where to find the process ids of the training loader's worker processes (adapters that see the loader
        call it). Only those count as ``workers_cpu_pct``: no other child process (a ``subprocess``, Spark's JVM)."""
        self._readings.set_loader_workers(pids)

    def set_flops(self, per_step: float | None = None, peak: Peak | None = None, *,
                  device_name: str | None = None, number_format: str | None = None, recomputed: float = 0.0,
                  by_shape: ShapeFlops | None = None) -> None:
        """The model's FLOPs per optimizer step as an adapter counted them, and the device's peak
        from the table (adapters call it); ``flops_per_step=`` and ``peak_flops=`` given to the
        listener win. Later records carry ``tflops_per_sec`` and, with a peak, ``mfu``. A device
        (``device_name``, ``number_format``) the table has no peak for is said once, and so are
        ``recomputed`` FLOPs (forward passes re-run by activation checkpointing: left out of the
        model's FLOPs that MFU counts). ``by_shape``: the FLOPs of each step shape, which the
        iterations' shapes (:meth:`add_step_shape`) then follow; its notes are said as the listener's."""
        if by_shape is not None:
            by_shape.say = self._notices.once
        self._closer.flops = step_flops(self.options, self._notices.once, per_step, peak, device_name=device_name,
                                        number_format=number_format, recomputed=recomputed, note=self._notices.note,
                                        by_shape=by_shape)

    def add_step_shape(self, shape: StepShape) -> None:
        """The iteration being recorded trained on a step of ``shape``: ``(micro_batches, sum of b*L,
        sum of b*L*L)`` over its micro-batches (see :class:`~trainperf.core._step_flops.ShapeFlops`).
        Adapters call it once per iteration, before the iteration is recorded; a window's
        ``flops_per_step`` is then the FLOPs of the shapes its iterations trained on."""
        shapes = self._open.shapes  # inline: once per iteration
        shapes[shape] = shapes.get(shape, 0) + 1

    def add_advisor(self, advisor: Advisor) -> None:
        """Register a function that, given a bad verdict's kind, names fixes it can see (adapters use this)."""
        self._notices.advisors.append(check_callable("advisor", advisor))

    def set_timeline(self, timeline: DeviceTimeline | None) -> None:
        """Take iteration times and the device's idle time from ``timeline`` (CUDA events, say).

        The listener then never waits for the device while training: a window's record is built
        once the device has finished the window's work (polled on later iterations), so it may
        arrive a few iterations after the window closed; :meth:`flush` and :meth:`close` wait once.

        Args:
            timeline: a :class:`~trainperf.DeviceTimeline`, or ``None`` for the host clock alone.
        """
        if timeline is not None:
            missing = [m for m in _TIMELINE_METHODS if not callable(getattr(timeline, m, None))]
            if missing:
                raise TypeError(
                    f"timeline must be a DeviceTimeline (missing {', '.join(missing)}), got {timeline!r}"
                )
        with self._lock:
            self._closer.use(timeline)
            self._timeline = timeline
            self._next_report = self._open.end

    @property
    def timeline(self) -> DeviceTimeline | None:
        """The device clock set with :meth:`set_timeline` (adapters call its ``begin``)."""
        return self._timeline

    def add_probe(self, probe: Probe) -> None:
        """Read some of the records' hardware fields on report iterations.

        Args:
            probe: returns a mapping of field names (``cuda_allocated_max_mb``, ``gpu_utilization_pct``,
                ``cpu_pct``, ...) to numbers or ``None``; called once per report, never in between.
        """
        self._readings.add_probe(probe)

    def on_close(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the listener closes (adapters remove their hooks this way)."""
        self._on_close.append(check_callable("callback", callback))

    def set_step_threads(self, threads: int | None) -> None:
        """How many threads the step computes with on the CPU (``torch.get_num_threads()``; adapters
        of CPU models say it): with it, ``cpu-contention`` also needs the step to get clearly less
        CPU than its compute needed."""
        self._readings.set_step_threads(threads)

    def fixes_for(self, kind: str) -> list[str]:
        """Fixes for a bad verdict: first what the adapters can see, then the general ones."""
        self._notices.on_cuda = self.device is not None
        return self._notices.fixes_for(kind)

    def summary(self) -> RunSummary:
        """Time split (data wait / compute / GC) over every reported window after warm-up, with the
        top recommendations."""
        return replace(self._publisher.summary(self._count, self.fixes_for), goodput=self._goodput.account())

    @property
    def wall_clock(self) -> Callable[[], float]:
        """The wall clock of the records' timestamps."""
        return self._wall_clock

    @property
    def clock(self) -> Callable[[], float]:
        """The clock this listener measures with: its monotonic clock less trainperf's own time (the
        reports of every listener on that clock, on the thread that trains) and the time left out with
        :meth:`exclude`. Adapters read their timestamps from it. :meth:`record_iteration`'s
        ``started`` is a reading of the raw clock instead (the one the listener was given)."""
        return self._clock

    @property
    def gc_pauses(self) -> list[tuple[float, float, int]] | None:
        """The GC pauses not yet reported, ``(start, seconds, generation)`` on :attr:`clock`, newest
        last (the same list for the listener's life); ``None`` without ``report_gc``. Adapters take a
        loader fetch's own pauses out of its data wait with :func:`trainperf.core._gc.gc_within`."""
        return self._readings.pauses

    def clock_parts(self) -> UserClock:
        """What :attr:`clock` reads (``raw() - own.total - offset.total``), for an adapter's hot path
        that reads it inline."""
        return self._user_clock

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def dropped(self) -> int:
        """Records the sinks never got because the writer's queue was full (a slow or hanging sink)."""
        return self._emitter.dropped

    @property
    def iteration(self) -> int:
        """Iterations recorded so far."""
        return self._count

    # -- what adapters add to the open window -------------------------------------------------
    def start(self, at: float | None = None, *, iteration: int = 0) -> None:
        """Begin timing now, or at ``at`` (a reading of :attr:`clock` not later than now: an adapter
        that sees training begin with a loader's first fetch starts the window where the fetch
        began). Adapters call it when training starts; before that, time since construction counts
        towards the first (warm-up) window. ``iteration``: the iterations done before, by a run
        resumed from a checkpoint; before the first iteration is recorded, the count goes on from there."""
        if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at)):
            raise TypeError(f"at must be a finite reading of the listener's clock or None, got {at!r}")
        check_int("iteration", iteration)
        self._readings.restart()
        self._spans.move_here()  # trainperf.span on the thread that trains spans this listener
        if self._owner is None:  # the thread that starts training is the one that trains
            self._own.move_to_this_thread()
        with self._lock:
            self._closer.finish()
        now = self._clock()
        first = self._count == 0 or self._count == self._resumed_at
        if first:
            self._count = self._resumed_at = iteration
            # spans before training (a checkpoint loaded) are start-up's, not the first window's
            begun = now if at is None or at > now else at
            self._goodput.started(self._wall_clock() - (now - begun), iteration, self._open.take_named())
        self._reset_window(now if at is None or at > now else at, first=first)
        self._closer.pending.restart()

    def add_etl(self, seconds: float) -> None:
        """Add data-loading wait measured by a loader wrapper to the current iteration.

        An iteration during which this was called takes its data wait from these calls and
        ignores the ``etl`` argument of :meth:`record_iteration`.
        """
        try:
            if not 0.0 <= seconds < math.inf:  # NaN fails too; one chained compare, this runs per batch
                check_seconds("seconds", seconds)
        except TypeError:
            check_seconds("seconds", seconds)
        self._explicit_etl = True
        self._explicit_source = "loader"
        self._pending_etl += seconds

    def add_time(self, name: str, seconds: float) -> None:
        """Add ``seconds`` of a named part of the current window's iterations (``"forward"``, say);
        records carry the mean per iteration as ``extra["<name>_ms"]``. Adapters call it only for
        parts they were asked to time (the forward pass in a distributed run)."""
        check_part(name, seconds)
        self._open.add_time(name, seconds)

    def span(self, kind: str) -> ListenerSpan:
        """Time the ``with`` block as ``kind`` on this listener's clock: records carry the mean per
        iteration of the window as ``extra["<kind>_ms"]``, part of the iteration's other host time. The
        adapters name ``"eval"``, ``"checkpoint"`` (a save) and ``"checkpoint_load"``; any non-empty name of
        lowercase letters, digits and ``_`` is allowed. Under an adapter the span goes through its
        accountant (inside an iteration it is taken out of the step); before :meth:`start` it stays in the
        first window's named times; inside another span of this listener it counts nothing (the outer
        one counts). :func:`trainperf.span` does this for every open listener of the thread.

        Example:
            >>> from trainperf import PerformanceListener
            >>> listener = PerformanceListener(1, sinks=[])
            >>> with listener.span("checkpoint_load"):
            ...     state = {"step": 10}                     # torch.load(...), your own restore
            >>> listener.close()
        """
        return ListenerSpan(self._spans, check_kind(kind))

    def route_spans(self, route: SpanRoute | None) -> Callable[[], None]:
        """Adapters: hand each span to ``route(kind, started, ended)`` (readings of :attr:`clock`) instead of
        the named times, until the returned undo is called (it gives back the route before, unless another
        was set since)."""
        if route is not None:
            check_callable("route", route)
        return self._spans.route_to(route)

    @property
    def in_span(self) -> bool:
        """Whether a :meth:`span` of this listener is open now (adapters time nothing of their own then)."""
        return self._spans.open

    def count_tokens(self, padded: int | None = None, loss: int | None = None) -> None:
        """The padded tokens (every position the model computes, padding included) and the loss tokens
        (labels other than -100) of the iteration recorded next; the real ones go to
        :meth:`record_iteration`'s ``tokens``. A window's ``tokens_padded`` and ``tokens_loss`` are
        known when each of its iterations gave them; its ``padding_share`` is ``1 - tokens /
        tokens_padded``. The adapters call it for every batch they can count.

        Raises:
            TypeError, ValueError: a count is not a non-negative int or ``None`` (named).
        """
        if not ((padded is None or type(padded) is int and padded >= 0)
                and (loss is None or type(loss) is int and loss >= 0)):
            check_int("padded", padded, optional=True)
            check_int("loss", loss, optional=True)
        self._open.add_token_counts(padded, loss)

    def add_sample(self, name: str, seconds: float) -> None:
        """Like :meth:`add_time`, for a part timed once per iteration: records also carry the
        window's median as ``extra["<name>_p50_ms"]``, which one slow iteration does not move."""
        check_part(name, seconds)
        self._open.add_sample(name, seconds)

    def set_score(self, score: Any) -> None:
        """Remember the latest loss; it is converted with ``float()`` only when a window is reported."""
        self._open.score = score

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` that just passed (validation, checkpointing) out of the current window."""
        seconds = check_seconds("seconds", seconds)
        if seconds == 0.0:
            return
        # Never more than has passed since the last iteration ended: the clock must not run backwards
        # past a time already recorded.
        now = self._clock()
        seconds = min(seconds, max(0.0, now - self._open.last_end))
        if self._timeline is not None:  # the device's work then is not idle time of the next iteration
            self._open.exclude_before(self._count, seconds)
        self._readings.forget_since(now - seconds)  # collections in that time are left out with it
        self._own.leave_out(seconds)

    def _open_run_dir(self, run_dir: Any, clock: Callable[[], float], wall_clock: Callable[[], float]) -> None:
        """The run directory (``None`` for none) and the job's time account, closed with the listener."""
        self._run_dir = sink = None
        if run_dir is not None:  # a listener without one loads none of the multi-rank package
            from ..ranks import RunDirLink

            self._run_dir = RunDirLink.open(run_dir, self.rank, clock, wall_clock)
            sink = self._run_dir.sink if self._run_dir is not None else None
            self._emitter.sinks.extend([sink] if sink is not None else [])
        self._goodput = self._publisher.goodput = LiveGoodput(wall_clock, os.getpid(), lambda: self.rank, sink)
        self._emitter.before = self._goodput.catch_up  # each record's goodput is set before a sink sees it
        self._on_close.append(lambda: self._goodput.close(self._open.take_named()))

    def _reset_window(self, now: float, *, first: bool) -> None:
        window = self._open
        window.reset(now, self._count, self.frequency, first=first)
        self._append = window.entries.append  # bound once per window: the hot path's one call
        # While windows wait for the device or for a capture's trace, or a capture profiles, every
        # iteration takes the report path.
        closer = self._closer
        self._next_report = self._count + 1 if closer.pending or closer.held or self._capturing() else window.end

    def _capturing(self) -> bool:
        return self._capture is not None and self._capture.busy
