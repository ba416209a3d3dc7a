"""The framework-free core: counts iterations, times windows, and emits one record per window."""

from __future__ import annotations

import functools
import math
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Collection, Iterable
from typing import Any

from ._check import check_callable, check_int, check_seconds, check_str
from ._closer import WindowCloser
from ._collections import Collector
from ._deferred import StepFlops
from ._emit import Emitter
from ._handover import CLOSED, SHARED, Handover
from ._hardware import Probe
from ._notices import Advisor, BottleneckWarning, Notices
from ._open_window import OpenWindow
from ._options import ListenerOptions, TokenCounter, checked_sinks
from ._own_time import OwnTime, UserClock
from ._peaks import Peak
from ._process import bad_iteration, env_int, env_rank, iteration_error, user_stacklevel
from ._publish import Publisher
from ._readings import HostReadings
from ._record import PerformanceRecord
from ._summary import RunSummary
from ._timeline import DeviceTimeline
from ._verdict import (
    GC_BOUND_SHARE,
    INPUT_BOUND_SHARE,
    LOOP_BOUND_SHARE,
)
from ._window import WindowEntry
from .profile._capture import Capture
from .profile._rule import CaptureRule
from .ranks._spans import RunDirLink
from .sinks._base import Sink, SinkError, describe
from .sinks._memory import MemorySink

__all__ = ["PerformanceListener", "BottleneckWarning"]



_TIMELINE_METHODS = ("start", "begin", "end", "ready", "take", "wait", "stage")


_INF = math.inf
_get_ident = threading.get_ident


def _check_part(name: str, seconds: float) -> None:
    """A named part's name and seconds (one chained test when they are fine: adapters call this per iteration)."""
    if type(name) is not str or not name:
        check_str("name", name, empty=False)
    try:
        if 0.0 <= seconds < _INF:
            return
    except TypeError:
        pass
    check_seconds("seconds", seconds)


def _check_clock(reading: object) -> float:
    """The clock's first reading is a finite number: a clock that gives NaN or infinity would make
    every figure NaN; said at once, naming the argument."""
    if isinstance(reading, bool) or not isinstance(reading, (int, float)) or not math.isfinite(reading):
        raise ValueError(f"clock must return finite seconds (a monotonic clock), got {reading!r}")
    return reading


def _say_sink(message: str) -> None:
    warnings.warn(message if message.startswith("trainperf") else f"trainperf: {message}", SinkError,
                  stacklevel=user_stacklevel())


class PerformanceListener:
    """Reports data-loading wait, iteration time, throughput, score and GC every ``frequency`` iterations.

    The listener knows no framework: adapters (``trainperf.torch``, ``trainperf.lightning``) call
    :meth:`record_iteration` once per optimizer step. Between reports that call only appends to a
    few lists and reads the clock; figures are computed, the score is read from the device and
    lines are formatted only when a window is reported.

    Args:
        frequency: report every this many iterations (a positive int).
        report_score: include the last loss (read with ``float()`` on report iterations only).
        report_gc: measure Python's garbage collection per generation through ``gc.callbacks``.
        report_etl: include the data-loading wait.
        report_iteration: include the window's iteration-time percentiles (p50/p95/max).
        report_time: include the mean iteration time.
        report_sample: include samples/sec.
        report_batch: include batches/sec.
        sinks: where records go; ``None`` means one :class:`~trainperf.LoggingSink`.
            Every listener also keeps the newest records in :attr:`history`.
        strict: re-raise a sink's exception (after every other sink got the record), for tests;
            sinks then run on the training thread.
        sink_thread: run the sinks on one writer thread, in order, so a slow or hanging sink never
            slows training (records wait in a bounded queue; :meth:`flush` and :meth:`close` deliver
            what is queued). ``False`` runs them on the training thread, inside each report.
        history: how many records :attr:`history` keeps (``None``: all).
        verdict: attach a live verdict (input-bound, GC-bound, fine) to each record and warn
            the first time it turns bad.
        clock: monotonic clock in seconds; injectable for deterministic tests.
        wall_clock: clock for the records' ``timestamp`` (seconds since the epoch).
        rank: process rank in a distributed run; defaults to the ``RANK`` environment variable, else the
            rank of an initialised ``torch.distributed`` process group.
        run_dir: write this rank's windows, a bounded timeline and its meta data under
            ``run_dir/rank-<rank>/`` (a :class:`~trainperf.RunDirSink`), for ``trainperf report``.
        cluster_every: in a ``torch.distributed`` run, rank 0 gathers every rank's figures every
            this many reports and logs which rank holds the others back, and why.
        cluster_timeout_s: the longest a rank waits for another in that exchange; a rank that does
            not answer in time is reported silent and left out from then on.
        report_hardware: read this process's CPU use and RSS and its loader workers' CPU use on
            report iterations (needs ``psutil``; without it those fields are ``None``). Adapters
            add the device's probes (CUDA memory peaks, NVML utilisation).
        tokens: for adapters that see the batches, how many real tokens a batch holds (a function of the
            batch, returning an int or ``None``); by default the attention mask's sum, else the size of
            ``input_ids``, read on the host before the batch moves to a device. Records then carry
            ``tokens`` and ``tokens_per_sec``. A loop of your own passes ``record_iteration(tokens=...)``.
        flops_per_step: the model's FLOPs per optimizer step (the adapters count them over one step
            after the first otherwise); records then carry ``tflops_per_sec``.
        peak_flops: the device's dense peak FLOP/s, for ``mfu`` (otherwise taken from
            :func:`~trainperf.peak_flops` for the device and number format the adapters see).
        profile_dir: when a window turns bad (see ``profile_rule``), profile the next iterations with
            ``torch.profiler`` and write the trace under this folder (``docs/profiling.md``); the
            record of each window the capture overlaps names the trace in ``capture``.
        profile_rule: when to capture and how much (a :class:`~trainperf.CaptureRule`; its defaults
            when ``None``).

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
        report_score: bool = False,
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
    ) -> None:
        options = ListenerOptions(
            frequency, report_score, report_gc, report_etl, report_iteration, report_time, report_sample,
            report_batch, strict, sink_thread, history, verdict, input_bound_share, gc_bound_share,
            loop_bound_share, rank, run_dir, cluster_every, cluster_timeout_s, report_hardware, tokens,
            flops_per_step, peak_flops, profile_dir, profile_rule,
        )
        self.options = options
        self.frequency = options.frequency
        self.report_score, self.report_gc, self.report_etl = options.report_score, options.report_gc, options.report_etl
        self.report_iteration, self.report_time = options.report_iteration, options.report_time
        self.report_sample, self.report_batch = options.report_sample, options.report_batch
        self.verdict, self.thresholds, self.strict = options.verdict, options.thresholds, options.strict
        self.report_hardware = options.report_hardware
        self.cluster_every, self.cluster_timeout_s = options.cluster_every, options.cluster_timeout_s
        check_callable("clock", clock)
        check_callable("wall_clock", wall_clock)
        sink_list = checked_sinks(sinks)
        self.history = MemorySink(options.history)
        self._emitter = Emitter(sink_list, strict=self.strict, inline=not options.sink_thread, say=_say_sink)
        # The clock of every figure: it stands still while trainperf works (see _own_time). Its
        # ledger is the one of the thread that trains: this one until another records.
        self._own = OwnTime(clock)
        self._user_clock = self._own.clock
        self._clock = self._user_clock.read
        try:
            started = _check_clock(self._clock())  # before anything is opened
        except TypeError:  # not a number at all
            _check_clock(clock())
            raise
        self._wall_clock = wall_clock
        self.rank = rank if rank is not None else env_rank()
        self.device: int | None = None
        self.epoch: int | None = None
        self.host = socket.gethostname()
        self.pid = os.getpid()
        user_clock = self._user_clock
        self._readings = HostReadings(self._clock, report_gc=report_gc, report_hardware=self.report_hardware,
                                      skip_gc=lambda: user_clock.own.busy > 0)
        self._notices = Notices()
        self._publisher = Publisher(options, self.history, self._emitter, self._notices, host_name=self.host,
                                    pid=self.pid)
        self._on_close: list[Callable[[], None]] = []

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
        self._run_dir = RunDirLink.open(run_dir, self.rank, clock, wall_clock)
        if self._run_dir is not None:
            self._emitter.sinks.append(self._run_dir.sink)
        self._closer = WindowCloser(self._own, self._readings, self._publisher, self._notices, self._emitter,
                                    self._run_dir, wall_clock, verdict=self.verdict)
        self._capture = self._closer.capture = self._open_capture(clock)
        self.set_flops()
        self._reset_window(started, first=True)

    def _open_capture(self, clock: Callable[[], float]) -> Capture | None:
        options = self.options
        if options.profile_dir is None:
            return None
        run_dir = self._run_dir

        def who() -> tuple[int | None, int | None, str]:
            world = run_dir.sink.world_size if run_dir is not None else env_int("WORLD_SIZE")
            name = f"rank{self.rank}" if self.rank is not None else f"{self.host}_{self.pid}"
            return self.rank, world, name

        def on_written(event: dict[str, Any]) -> None:
            if run_dir is not None:
                self._emitter.submit(functools.partial(run_dir.sink.event, event))

        return Capture(options.profile_dir, options.profile_rule or CaptureRule(), clock=clock, who=who,
                       on_written=on_written)

    # ------------------------------------------------------------------ set-up
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
        """Name what measured the ``etl`` given to :meth:`record_iteration` (records carry it as
        ``etl_source``; default ``"given"``, ``"loader"`` once :meth:`add_etl` was used). Iterations
        whose data wait came from ``started`` count as ``"gap"``."""
        self._explicit_source = check_str("source", source, empty=False)

    def set_rank(self, rank: int | None) -> None:
        """The process rank that later records carry (adapters call it when they find a process group).
        A run directory that has received nothing yet moves to the rank's folder."""
        self.rank = check_int("rank", rank, optional=True)
        if self._run_dir is not None and rank is not None:
            self._run_dir.set_rank(rank)

    def use_device(self, index: int | None, timeline: DeviceTimeline | None = None) -> None:
        """The model runs on device ``index`` (a CUDA ordinal): later records carry it, and with a
        ``timeline`` the iteration times and the device's idle time come from that device's clock
        (see :meth:`set_timeline`)."""
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
        """Where to find the process ids of the training loader's worker processes (adapters that
        see the loader call it). Only those count as ``workers_cpu_pct``; other child processes (a
        ``subprocess``, Spark's JVM) do not. Without it no child process counts as a worker."""
        self._readings.set_loader_workers(pids)

    def set_flops(self, per_step: float | None = None, peak: Peak | None = None, *,
                  device_name: str | None = None, number_format: str | None = None, recomputed: float = 0.0) -> None:
        """The model's FLOPs per optimizer step as an adapter counted them, and the device's peak
        from the table (adapters call it); ``flops_per_step=`` and ``peak_flops=`` given to the
        listener win. Later records carry ``tflops_per_sec`` and, with a peak, ``mfu``. A device
        (``device_name``, ``number_format``) the table has no peak for is said once, and so are
        ``recomputed`` FLOPs (forward passes re-run by activation checkpointing: left out of the
        model's FLOPs that MFU counts)."""
        given, given_peak = self.options.flops_per_step, self.options.peak_flops
        if given_peak is not None:
            peak = Peak(given_peak, "", "", "given")
        elif peak is None and device_name is not None:
            self._notices.once(f"no dense peak is known for {device_name!r} in {number_format}: MFU is left "
                               "out (pass peak_flops= to give one)")
        flops = given if given is not None else per_step
        if recomputed > 0 and given is None and flops is not None:
            self._notices.once(f"activation checkpointing re-runs {recomputed:.4g} FLOPs per step: left out of "
                               f"the model's {flops:.4g} that MFU counts (hardware FLOPs {flops + recomputed:.4g})")
        self._closer.flops = None if flops is None and peak is None else StepFlops(flops, peak)

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

    # ------------------------------------------------------------------ hot path
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
        if self._owner is None:  # the thread that starts training is the one that trains
            self._own.move_to_this_thread()
        with self._lock:
            self._closer.finish()
        now = self._clock()
        first = self._count == 0 or self._count == self._resumed_at
        if first:
            self._count = self._resumed_at = iteration
        self._reset_window(now if at is None or at > now else at, first=first)
        self._closer.pending.restart()

    def add_etl(self, seconds: float) -> None:
        """Add data-loading wait measured by a loader wrapper to the current iteration.

        An iteration during which this was called takes its data wait from these calls and
        ignores the ``etl`` argument of :meth:`record_iteration`.
        """
        try:
            if not 0.0 <= seconds < _INF:  # NaN fails too; one chained compare, this runs per batch
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
        _check_part(name, seconds)
        self._open.add_time(name, seconds)

    def add_sample(self, name: str, seconds: float) -> None:
        """Like :meth:`add_time`, for a part timed once per iteration: records also carry the
        window's median as ``extra["<name>_p50_ms"]``, which one slow iteration does not move."""
        _check_part(name, seconds)
        self._open.add_sample(name, seconds)

    def set_score(self, score: Any) -> None:
        """Remember the latest loss; it is converted with ``float()`` only when a window is reported."""
        self._open.score = score

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
        if _get_ident() != self._owner:
            return self._record_from_other_thread(samples, batches, etl, score, started, other, steps, skipped,
                                                  tokens)
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
        self._count = count
        if count < self._next_report:
            self._append((self._clock(), etl, started, samples, batches, other, steps, skipped))
            if self._timeline is not None:
                self._timeline.end()
            return None
        return self._report((self._clock(), etl, started, samples, batches, other, steps, skipped))

    def record_step(
        self,
        now: float,
        samples: int | None,
        batches: int,
        etl: float,
        started: float | None,
        other: float,
        steps: int,
        skipped: int,
        tokens: int | None = None,
    ) -> PerformanceRecord | None:
        """The adapters' entry point: :meth:`record_iteration` for an iteration that ended at ``now``, a
        reading of :attr:`clock` (not of the raw clock), whose figures are differences of that clock:
        nothing is checked again and the clock is not read a second time. A
        :class:`~trainperf.core.StepAccountant` calls it with these arguments, in this order."""
        if _get_ident() != self._owner or self._explicit_etl:  # first call, other threads, add_etl
            if started is not None:  # record_iteration takes the raw clock's time
                started += self._user_clock.shift
            return self.record_iteration(samples, batches, etl, None, started, other, steps, skipped, tokens)
        if tokens is not None:
            self._open.add_tokens(tokens)
        count = self._count + 1
        self._count = count
        if count < self._next_report:
            self._append((now, etl, started, samples, batches, other, steps, skipped))
            if self._timeline is not None:
                self._timeline.end()
            return None
        return self._report((now, etl, started, samples, batches, other, steps, skipped))

    def _record_from_other_thread(
        self,
        samples: int | None,
        batches: int,
        etl: float,
        score: Any,
        started: float | None,
        other: float,
        steps: int,
        skipped: int,
        tokens: int | None = None,
    ) -> PerformanceRecord | None:
        """The first call (types are checked once, here), a call after :meth:`close`, and every
        call once a second thread has used the listener: those take the lock."""
        self._handover.left_unlocked()
        with self._lock:
            if self._closed:
                raise RuntimeError("this PerformanceListener is closed: it records no more iterations")
            if self._owner is None:
                error = bad_iteration(samples, batches, etl, started, other, steps, skipped, tokens)
                if error is not None:
                    raise error
                self._owner = _get_ident()
                self._own.move_to_this_thread()
                return self.record_iteration(samples, batches, etl, score, started, other, steps, skipped, tokens)
            self._share()
            self._owner = _get_ident()  # the lock's holder takes the plain path for this one call
            try:
                return self.record_iteration(samples, batches, etl, score, started, other, steps, skipped, tokens)
            finally:
                if not self._closed:
                    self._owner = SHARED

    def _share(self) -> None:
        """A second thread uses the listener: from now on every call takes the lock. Said once.
        Called with the lock held."""
        if self._handover.shared:
            return
        first, self._owner = self._owner, SHARED
        self._handover.wait_for(first)  # it may be inside the unlocked part of a call
        warnings.warn(
            "trainperf: this PerformanceListener is used from more than one thread; from now on each "
            "record_iteration takes a lock. Iterations of all threads count in the same windows, in "
            "the order they end.",
            RuntimeWarning,
            stacklevel=user_stacklevel(),
        )

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

    # ------------------------------------------------------------------ reporting
    def _reset_window(self, now: float, *, first: bool) -> None:
        window = self._open
        window.reset(now, self._count, self.frequency, first=first)
        self._append = window.entries.append  # bound once per window: the hot path's one call
        # While windows wait for the device, or a capture profiles, every iteration takes the report path.
        self._next_report = self._count + 1 if self._closer.pending or self._capturing() else window.end

    def _capturing(self) -> bool:
        return self._capture is not None and self._capture.busy

    def _report(self, last: WindowEntry) -> PerformanceRecord | None:
        self._handover.left_unlocked()
        with self._lock:  # another thread's first call waits for a report to end
            window = self._open
            capture = self._capture
            if capture is not None and capture.busy:  # the iteration's end, for the profiler
                began = self._own.begin()
                try:
                    capture.step(self._count, last[0])
                finally:
                    self._closer.own_end(window, self._count, began)
            closes = not (self._count < window.end or last[0] < window.start)
            timeline = self._timeline
            if timeline is not None:
                if closes and self.report_score:
                    window.score = self._closer.pending.stage(window.score)
                timeline.end()
            if not closes:
                # An iteration polling windows that wait for the device; or one that passed the
                # unlocked check just before a second thread took over and reported the window it
                # would have closed: it joins the next window instead.
                window.entries.append((max(last[0], window.start), *last[1:]))
                record = self._closer.poll(window, self._count, on_cuda=self.device is not None)
                if not self._closer.pending and not self._capturing():
                    self._next_report = window.end
                return record
            return self._report_locked(last)

    def _report_locked(self, last: WindowEntry) -> PerformanceRecord | None:
        """Close the window that ``last`` ends (see :meth:`WindowCloser.close`)."""
        try:
            record = self._closer.close(self._open, last, self._count, (self.epoch, self.rank, self.device),
                                        self._explicit_source)
        finally:
            self._reset_window(self._clock(), first=False)  # where the clock stood still: no gap
        self._closer.say(on_cuda=self.device is not None)
        return record

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
        return self._publisher.summary(self._count, self.fixes_for)

    # ------------------------------------------------------------------ teardown
    def flush(self) -> PerformanceRecord | None:
        """Report the iterations since the last report now, if there are any (end of training),
        and every window still waiting for the device, after waiting for it once. Returns the
        newest record built. On a closed listener there are none: it returns ``None``."""
        with self._lock:
            self._claim()
            if self._closed:
                return None
            record = self._flush_unlocked()
        self._emitter.flush()
        return record

    def close(self) -> None:
        """Report what is left of the last window (see :meth:`flush`), remove hooks and the
        ``gc.callbacks`` entry, and close the sinks. Idempotent.

        Every step runs even when an earlier one fails: a hook-removal callback or a sink that
        raises is reported as a :class:`~trainperf.SinkError` warning once everything is closed.
        A closed listener records no more iterations (:meth:`record_iteration` raises
        ``RuntimeError``); :meth:`flush` returns ``None``.
        """
        with self._lock:
            self._claim()
            if self._closed:
                return
            failures: list[str] = []
            if self._capture is not None:
                self._capture.stop_arming()
            try:
                self._flush_unlocked()
            except Exception as exc:  # noqa: BLE001 - closing goes on; said below
                failures.append(f"reporting the last window failed: {exc!r}")
            if self._capture is not None:  # its traces written and said, their run directory events sent
                try:
                    self._capture.close(self._count)
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"closing the profiler's capture failed: {exc!r}")
            self._closed = True
            self._owner = CLOSED
            self._emitter.flush()  # what the close callbacks (a cluster link) read has reached its sinks
            self._own.close()
            self._readings.close()
            callbacks, self._on_close = self._on_close, []
            for callback in callbacks:
                try:
                    callback()
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"close callback {callback!r} raised {exc!r}")
            try:
                self._emitter.close()
            finally:
                for failure in failures:
                    warnings.warn(f"trainperf: while closing, {failure}", SinkError, stacklevel=2)

    def _flush_unlocked(self) -> PerformanceRecord | None:
        if self._closed:
            return None
        record = None
        window = self._open
        if window.entries:
            if self.report_score:
                window.score = self._closer.pending.stage(window.score)  # read after the wait below
            record = self._report_locked(window.entries.pop())
        if self._closer.pending:
            record = self._closer.drain(window, self._count, on_cuda=self.device is not None) or record
            self._next_report = window.end
        return record

    def _claim(self) -> None:
        """Called, with the lock held, by the methods that change the window from outside the hot
        path: another thread than the recording one makes the listener shared (see :meth:`_share`)."""
        owner = self._owner
        if owner is not None and owner >= 0 and owner != _get_ident():
            self._share()

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
        loader fetch's own pauses out of its data wait with :func:`trainperf._gc.gc_within`."""
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

    def __enter__(self) -> PerformanceListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PerformanceListener(frequency={self.frequency}, iteration={self._count})"
