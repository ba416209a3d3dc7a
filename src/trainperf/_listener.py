"""The framework-free core: counts iterations, times windows, and emits one record per window."""

from __future__ import annotations

import os
import socket
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._advice import DEFAULT_FIXES
from ._gc import GCMonitor
from ._record import GCStat, PerformanceRecord, Verdict
from ._summary import RunSummary, build_summary
from ._timeline import open_run_dir, write_timeline
from ._verdict import GC_BOUND_SHARE, INPUT_BOUND_SHARE, LOOP_BOUND_SHARE, Thresholds, judge
from ._window import WindowEntry, WindowFigures, window_figures
from .sinks._base import FanOut, Sink
from .sinks._logging import LoggingSink
from .sinks._memory import MemorySink

__all__ = ["PerformanceListener", "IterationTimer", "BottleneckWarning"]

Collector = Callable[[], tuple[int, float | None]]
Advisor = Callable[[str], Sequence[str]]


@dataclass
class _RunTotals:
    """Sums over the reported windows after the warm-up one, for :meth:`PerformanceListener.summary`."""

    wall_s: float = 0.0
    etl_s: float = 0.0
    gc_s: float = 0.0
    other_s: float = 0.0
    samples: int = 0
    iterations: int = 0
    verdict_counts: dict[str, int] = field(default_factory=dict)


class BottleneckWarning(UserWarning):
    """Issued once per run, the first time a window's verdict turns bad."""


class IterationTimer(Protocol):
    """Per-iteration timing from another clock than the host's (CUDA events, for instance).

    ``mark`` runs every iteration and must not synchronise; ``synchronize`` and ``durations``
    run only when a window is reported.
    """

    def start(self) -> None: ...

    def mark(self) -> None: ...

    def synchronize(self) -> None: ...

    def durations(self) -> list[float]: ...


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


def _check_share(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 100.0:
        raise ValueError(f"{name} must be a percentage in (0, 100], got {value!r}")
    return float(value)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_MARKERS = (f"{os.sep}torch{os.sep}", f"{os.sep}lightning{os.sep}", f"{os.sep}pytorch_lightning{os.sep}")


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the user's own line: the first frame outside
    trainperf and the frameworks that called into it (an optimizer's step hook, a Lightning hook)."""
    frame = sys._getframe(2)  # the caller of warnings.warn's caller
    level = 2
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_PACKAGE_DIR) and not any(marker in name for marker in _TORCH_MARKERS):
            return level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return 2


def _env_rank() -> int | None:
    raw = os.environ.get("RANK")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


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
        strict: re-raise a sink's exception (after every other sink got the record), for tests.
        history: how many records :attr:`history` keeps (``None``: all).
        verdict: attach a live verdict (input-bound, GC-bound, fine) to each record and warn
            the first time it turns bad.
        clock: monotonic clock in seconds; injectable for deterministic tests.
        wall_clock: clock for the records' ``timestamp`` (seconds since the epoch).
        rank: process rank in a distributed run; defaults to the ``RANK`` environment variable.
        run_dir: write this rank's windows, a bounded timeline and its meta data under
            ``run_dir/rank-<rank>/`` (a :class:`~trainperf.RunDirSink`), for ``trainperf report``.

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
        history: int | None = 1000,
        verdict: bool = True,
        input_bound_share: float = INPUT_BOUND_SHARE,
        gc_bound_share: float = GC_BOUND_SHARE,
        loop_bound_share: float = LOOP_BOUND_SHARE,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
        rank: int | None = None,
        run_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"frequency must be a positive int, got {frequency!r}")
        self.frequency = frequency
        self.report_score = _check_bool("report_score", report_score)
        self.report_gc = _check_bool("report_gc", report_gc)
        self.report_etl = _check_bool("report_etl", report_etl)
        self.report_iteration = _check_bool("report_iteration", report_iteration)
        self.report_time = _check_bool("report_time", report_time)
        self.report_sample = _check_bool("report_sample", report_sample)
        self.report_batch = _check_bool("report_batch", report_batch)
        self.verdict = _check_bool("verdict", verdict)
        self.thresholds = Thresholds(
            input_bound=_check_share("input_bound_share", input_bound_share),
            gc_bound=_check_share("gc_bound_share", gc_bound_share),
            loop_bound=_check_share("loop_bound_share", loop_bound_share),
        )
        self.strict = _check_bool("strict", strict)
        if not callable(clock):
            raise TypeError(f"clock must be callable, got {clock!r}")
        if not callable(wall_clock):
            raise TypeError(f"wall_clock must be callable, got {wall_clock!r}")
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
            raise ValueError(f"rank must be a non-negative int or None, got {rank!r}")
        sink_list = [LoggingSink()] if sinks is None else list(sinks)
        for sink in sink_list:
            if not callable(sink):
                raise TypeError(f"sinks must be callables taking a record, got {sink!r}")
        self.history = MemorySink(history)
        self._fanout = FanOut(sink_list, strict=strict)
        self._clock = clock
        self._wall_clock = wall_clock
        self.rank = rank if rank is not None else _env_rank()
        self.device: int | None = None
        self.epoch: int | None = None
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._gc = GCMonitor(clock) if report_gc else None
        if self._gc is not None:
            self._gc.install()
        self._gc_prev = self._gc.snapshot() if self._gc is not None else ((), ())
        self._collectors: list[tuple[str, Collector, tuple[int, float | None]]] = []
        self._advisors: list[Advisor] = []
        self._on_close: list[Callable[[], None]] = []

        self._timer: IterationTimer | None = None
        self._warned_verdicts: set[str] = set()
        self._closed = False
        self._samples_warned = False
        self._explicit_etl = False
        self._pending_etl = 0.0
        self._explicit_source = "given"
        self._count = 0
        self._totals = _RunTotals()
        self._started = False
        self._window: list[WindowEntry] = []
        self._score: Any = None
        self._window_start = 0.0
        self._next_report = 0
        self._warmup = True
        self._run_dir = open_run_dir(run_dir, self.rank, clock, wall_clock)
        if self._run_dir is not None:
            self._fanout.sinks.append(self._run_dir[0])
        self._reset_window(self._clock(), first=True)

    # ------------------------------------------------------------------ set-up
    @property
    def sinks(self) -> list[Sink]:
        """The user's sinks (without :attr:`history`)."""
        return list(self._fanout.sinks)

    def add_sink(self, sink: Sink) -> None:
        """Add a sink; it receives every later record."""
        if not callable(sink):
            raise TypeError(f"sink must be a callable taking a record, got {sink!r}")
        self._fanout.sinks.append(sink)

    def set_epoch(self, epoch: int | None) -> None:
        """The epoch that later records carry (adapters call it at each epoch's start)."""
        self.epoch = epoch

    def set_etl_source(self, source: str) -> None:
        """Name what measured the ``etl`` given to :meth:`record_iteration` (records carry it as
        ``etl_source``; default ``"given"``, ``"loader"`` once :meth:`add_etl` was used). Iterations
        whose data wait came from ``started`` count as ``"gap"``."""
        if not isinstance(source, str) or not source:
            raise ValueError(f"source must be a non-empty str, got {source!r}")
        self._explicit_source = source

    def set_rank(self, rank: int | None) -> None:
        """The process rank that later records carry (adapters call it when they find a process group)."""
        self.rank = rank

    def use_device(self, index: int | None, timer: IterationTimer | None = None) -> None:
        """The model runs on device ``index`` (a CUDA ordinal): later records carry it, and with a
        ``timer`` the iteration times come from that device's clock (see :meth:`set_timer`)."""
        self.device = index
        if timer is not None:
            self.set_timer(timer)

    def add_collector(self, name: str, read: Collector) -> None:
        """Report another collector beside Python's generations.

        Args:
            name: the collector's name in records and lines.
            read: returns cumulative ``(count, milliseconds or None)``; called on report iterations only.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty str, got {name!r}")
        self._collectors.append((name, read, read()))

    def add_advisor(self, advisor: Advisor) -> None:
        """Register a function that, given a bad verdict's kind, names fixes it can see (adapters use this)."""
        self._advisors.append(advisor)

    def set_timer(self, timer: IterationTimer | None) -> None:
        """Take per-iteration durations from ``timer`` (CUDA events, say) instead of the host clock."""
        self._timer = timer
        if timer is not None:
            timer.start()

    def on_close(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the listener closes (adapters remove their hooks this way)."""
        self._on_close.append(callback)

    # ------------------------------------------------------------------ hot path
    def start(self) -> None:
        """Begin timing now. Adapters call it when training starts; before that, time since
        construction counts towards the first (warm-up) window."""
        if self._gc is not None:
            self._gc_prev = self._gc.snapshot()
        self._collectors = [(name, read, read()) for name, read, _ in self._collectors]
        self._started = True
        self._reset_window(self._clock(), first=self._count == 0)
        if self._timer is not None:
            self._timer.start()

    def add_etl(self, seconds: float) -> None:
        """Add data-loading wait measured by a loader wrapper to the current iteration.

        An iteration during which this was called takes its data wait from these calls and
        ignores the ``etl`` argument of :meth:`record_iteration`.
        """
        self._explicit_etl = True
        self._explicit_source = "loader"
        self._pending_etl += seconds

    def set_score(self, score: Any) -> None:
        """Remember the latest loss; it is converted with ``float()`` only when a window is reported."""
        self._score = score

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
    ) -> PerformanceRecord | None:
        """One iteration (optimizer step) ended now.

        Args:
            samples: samples in the iteration (all micro-batches); ``None`` when unknown.
            batches: data batches consumed by the iteration.
            etl: seconds the iteration waited for data.
            score: the loss, any object ``float()`` accepts (a tensor is fine); read on report only.
            started: alternatively to ``etl``, the clock time at which the iteration's compute
                started; its data wait is then the time since the previous iteration ended.
                Both are ignored for an iteration during which :meth:`add_etl` was called.
            other: seconds of the iteration's host time that were neither data wait nor the step
                (evaluation, logging, metric syncs between the step and the next batch).
            steps: optimizer steps taken in the iteration.
            skipped: of those, steps skipped (a ``GradScaler`` that found inf/NaN gradients).

        Returns:
            The record when this iteration closed a window, else ``None``.
        """
        if self._explicit_etl:
            etl = self._pending_etl
            started = None
            self._pending_etl = 0.0
            self._explicit_etl = False
        if score is not None:
            self._score = score
        if self._timer is not None:
            self._timer.mark()
        count = self._count + 1
        self._count = count
        if count < self._next_report:
            self._window.append((self._clock(), etl, started, samples, batches, other, steps, skipped))
            return None
        return self._report((self._clock(), etl, started, samples, batches, other, steps, skipped))

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` that just passed (validation, checkpointing) out of the current window."""
        if seconds <= 0:
            return
        self._window_start += seconds
        self._window = [
            (end + seconds, etl, None if started is None else started + seconds, samples, batches, other, steps, skip)
            for end, etl, started, samples, batches, other, steps, skip in self._window
        ]

    # ------------------------------------------------------------------ reporting
    def _reset_window(self, now: float, *, first: bool) -> None:
        self._window_start = now
        self._window = []
        self._score = None
        self._next_report = self._count + self.frequency
        self._warmup = first

    def _report(self, last: WindowEntry) -> PerformanceRecord:
        timer = self._timer
        if timer is not None:
            timer.synchronize()
        now = last[0]
        window_start = self._window_start
        window = self._window
        window.append(last)
        figures = window_figures(self._window_start, window, timer.durations() if timer is not None else None)
        n = figures.iterations
        window_s = figures.window_s
        etl_s = figures.etl_s
        samples = figures.samples
        if samples is None and not self._samples_warned and self.report_sample:
            self._samples_warned = True
            warnings.warn(
                "trainperf could not find the batch size; samples/sec is left out for this run",
                RuntimeWarning,
                stacklevel=3,
            )
        gc_stats, gc_s = self._collect_gc()
        verdict = judge(window_s, etl_s, gc_s, figures.other_s, self.thresholds) if self.verdict else None
        record = PerformanceRecord(
            iteration=self._count,
            window_iterations=n,
            window_s=window_s,
            warmup=self._warmup,
            timestamp=self._wall_clock(),
            etl_ms=1000.0 * etl_s / n if self.report_etl else None,
            etl_max_ms=1000.0 * figures.etl_max_s if self.report_etl else None,
            iteration_ms=1000.0 * figures.mean_s if self.report_time else None,
            iteration_p50_ms=1000.0 * figures.percentile_s(50) if self.report_iteration else None,
            iteration_p95_ms=1000.0 * figures.percentile_s(95) if self.report_iteration else None,
            iteration_max_ms=1000.0 * figures.max_s if self.report_iteration else None,
            samples_per_sec=figures.samples_per_sec if self.report_sample else None,
            batches_per_sec=figures.batches_per_sec if self.report_batch else None,
            score=self._read_score() if self.report_score else None,
            gc=gc_stats,
            epoch=self.epoch,
            host=self.host,
            pid=self.pid,
            rank=self.rank,
            device=self.device,
            verdict=verdict,
            samples=samples,
            batches=figures.batches,
            etl_total_ms=1000.0 * etl_s,
            compute_ms=1000.0 * figures.compute_s / n,
            other_ms=1000.0 * figures.other_s / n,
            optimizer_steps=figures.steps,
            skipped_steps=figures.skipped,
            etl_source=self._etl_source(figures),
            gc_total_ms=1000.0 * gc_s if self._gc is not None else None,
        )
        self._accumulate(record, figures, gc_s)
        self._reset_window(now, first=False)
        self.history(record)
        self._fanout(record)
        if self._run_dir is not None:
            write_timeline(self._run_dir, window_start, window, record.iteration)
        if verdict is not None and verdict.kind != "fine" and not record.warmup:
            self._warn_verdict(verdict)
        return record

    def _read_score(self) -> float | None:
        score = self._score
        if score is None:
            return None
        try:
            return float(score)
        except (TypeError, ValueError, RuntimeError):
            return None

    def _collect_gc(self) -> tuple[tuple[GCStat, ...], float]:
        stats: list[GCStat] = []
        gc_s = 0.0
        if self._gc is not None:
            counts, seconds = self._gc.snapshot()
            prev_counts, prev_seconds = self._gc_prev
            for gen, (c, s, pc, ps) in enumerate(zip(counts, seconds, prev_counts, prev_seconds, strict=True)):
                stats.append(GCStat(f"gen{gen}", c - pc, 1000.0 * (s - ps)))
                gc_s += s - ps
            self._gc_prev = (counts, seconds)
        for i, (name, read, (prev_count, prev_ms)) in enumerate(self._collectors):
            count, ms = read()
            delta_ms = ms - prev_ms if ms is not None and prev_ms is not None else None
            stats.append(GCStat(name, count - prev_count, delta_ms))
            self._collectors[i] = (name, read, (count, ms))
        return tuple(stats), gc_s

    def _etl_source(self, figures: WindowFigures) -> str:
        if figures.etl_from_gap == 0:
            return self._explicit_source
        return "gap" if figures.etl_from_gap == figures.iterations else f"{self._explicit_source}+gap"

    def _accumulate(self, record: PerformanceRecord, figures: WindowFigures, gc_s: float) -> None:
        if record.warmup:
            return
        totals = self._totals
        totals.wall_s += record.window_s
        totals.etl_s += figures.etl_s
        totals.other_s += figures.other_s
        totals.gc_s += gc_s
        totals.samples += record.samples or 0
        totals.iterations += record.window_iterations
        if record.verdict is not None:
            kind = record.verdict.kind
            totals.verdict_counts[kind] = totals.verdict_counts.get(kind, 0) + 1

    def fixes_for(self, kind: str) -> list[str]:
        """Fixes for a bad verdict: first what the adapters can see, then the general ones."""
        specific: list[str] = []
        for advisor in self._advisors:
            try:
                specific.extend(advisor(kind))
            except Exception:  # noqa: BLE001 - advice must never break training
                continue
        return [*specific, *DEFAULT_FIXES.get(kind, ())]

    def _warn_verdict(self, verdict: Verdict) -> None:
        if verdict.kind in self._warned_verdicts:
            return
        self._warned_verdicts.add(verdict.kind)
        fixes = self.fixes_for(verdict.kind)
        text = "\n".join(f"  - {fix}" for fix in fixes)
        warnings.warn(
            f"trainperf: training is {verdict.kind} ({verdict.reason}). Likely fixes:\n{text}",
            BottleneckWarning,
            stacklevel=_user_stacklevel(),
        )

    def summary(self) -> RunSummary:
        """Time split (data wait / compute / GC) over every reported window after warm-up, with the
        top recommendations."""
        totals = self._totals
        return build_summary(
            wall_s=totals.wall_s,
            etl_s=totals.etl_s,
            gc_s=totals.gc_s,
            other_s=totals.other_s,
            iterations=totals.iterations,
            samples=totals.samples,
            verdict_counts=dict(totals.verdict_counts),
            thresholds=self.thresholds,
            total_iterations=self._count,
            fixes=self.fixes_for,
        )

    # ------------------------------------------------------------------ teardown
    def flush(self) -> PerformanceRecord | None:
        """Report the iterations since the last report now, if there are any (end of training)."""
        if self._window and not self._closed:
            return self._report(self._window.pop())
        return None

    def close(self) -> None:
        """Report what is left of the last window (see :meth:`flush`), remove hooks and the
        ``gc.callbacks`` entry, and close the sinks. Idempotent."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        if self._gc is not None:
            self._gc.uninstall()
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback()
        self._fanout.close()

    @property
    def clock(self) -> Callable[[], float]:
        """The monotonic clock this listener measures with."""
        return self._clock

    @property
    def closed(self) -> bool:
        return self._closed

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
