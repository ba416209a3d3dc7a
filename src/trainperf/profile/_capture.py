"""Capturing the bad window: when a published window triggers the rule, the next iterations are
profiled (one warm-up, then :attr:`CaptureRule.iterations` traced) and the trace is written off the
training thread. Nothing runs on the training thread between captures but one check per window.

A trace is named (in records, in the log) only once it is written: the windows a capture overlaps
ask :meth:`Capture.waits_for` and are reported when it answers no."""

from __future__ import annotations

import logging
import math
import os
import threading
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import user_stacklevel
from ..records import PerformanceRecord
from ..sinks.shared import LOGGER_NAME, describe, ensure_visible
from ._rule import CaptureRule, Firing, Trigger
from ._trace_file import TraceNotWritten, cause, finish_trace, probe_folder, remove_raw, why_not_written
from ._tracer import TorchTracer, Tracer

__all__: list[str] = []

logger = logging.getLogger(LOGGER_NAME)

#: The longest :meth:`Capture.close` waits for a trace still being written.
CLOSE_WAIT_S = 120.0


@dataclass(slots=True)
class _Job:
    """One capture: what triggered it, its tracer and iterations, and what it cost."""

    tracer: Tracer
    path: Path
    armed_at: int  #: iterations done when it was armed
    first: int  #: first traced iteration
    last: int  #: last traced iteration (lowered when training ends before it)
    trigger: tuple[int, int]  #: the triggering window's first and last iteration
    firing: Firing  #: why: the baseline, or an anomaly and its severity
    median_ms: float | None  #: the triggering window's median iteration time
    rank: int | None
    world_size: int | None
    cost_s: float = 0.0  #: training-thread seconds in the profiler's calls
    ends: list[float] | None = None  #: the end times of iterations first-1 .. last
    started: bool = False

    def meta(self) -> dict[str, Any]:
        ends = self.ends or []
        durations = [b - a for a, b in zip(ends, ends[1:], strict=False)]
        return {
            "trigger_first_iteration": self.trigger[0], "trigger_last_iteration": self.trigger[1],
            "reason": self.firing.reason, "baseline": self.firing.baseline, "severity": self.firing.severity,
            "first_iteration": self.first, "last_iteration": self.last,
            "iterations": len(durations),
            "traced_iteration_ms": 1000.0 * sum(durations) / len(durations) if durations else None,
            "trigger_median_ms": self.median_ms, "cost_ms": 1000.0 * self.cost_s,
        }


class Capture:
    """A listener's captures under ``directory``.

    Args:
        directory: where traces go (created at the first capture).
        rule: when to capture and how much.
        clock: the listener's raw monotonic clock (the interval between captures, the cost).
        who: the process's rank (``None`` when unknown), its world size and a name for its files.
        on_written: called on the training thread with each written capture's description (the run
            directory's event).
        tracer: makes the profiler (``torch.profiler`` by default).
    """

    #: How long closing waits for the traces being written.
    close_wait_s = CLOSE_WAIT_S

    def __init__(self, directory: str | os.PathLike[str], rule: CaptureRule, *, clock: Callable[[], float],
                 who: Callable[[], tuple[int | None, int | None, str]],
                 on_written: Callable[[dict[str, Any]], None] | None = None,
                 tracer: Callable[[], Tracer] = TorchTracer) -> None:
        self.directory = Path(directory)
        self.rule = rule
        self.trigger = Trigger(rule)
        self._clock, self._who, self._on_written, self._new_tracer = clock, who, on_written, tracer
        self._job: _Job | None = None  # armed or tracing
        self._spans: list[tuple[int, int, str]] = []  # (first, last iteration, path) of every capture
        self._unwritten: set[str] = set()  # the paths of the spans whose trace is not written yet
        self._disturbed_until: float = 0.0  # windows starting at or before this iteration overlap a capture
        self._exporting = 0
        self._done: deque[tuple[_Job, Any]] = deque()  # (job, result or exception), from the writer
        self._jobs: deque[_Job] = deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._failed = False
        self._arming = True
        self.written: list[dict[str, Any]] = []  #: every capture written, as described to ``on_written``
        ensure_visible(logger)

    @property
    def busy(self) -> bool:
        """A capture is armed or tracing: each iteration's end must reach :meth:`step`."""
        return self._job is not None

    # ------------------------------------------------------------------ the trigger
    def consider(self, record: PerformanceRecord, count: int) -> None:
        """A window was published (``count`` iterations done): arm a capture when it triggers the rule."""
        if self._done:
            self._collect(count)
        if self._job is not None or record.warmup or not self._arming:
            return
        first = record.iteration - record.window_iterations + 1
        if first <= self._disturbed_until:
            return
        p50 = record.iteration_p50_ms if record.iteration_p50_ms is not None else record.iteration_ms
        p95 = record.iteration_p95_ms if record.iteration_p95_ms is not None else record.iteration_ms
        verdict = record.verdict
        firing = self.trigger.see(p50, p95, verdict.kind if verdict is not None else None, self._clock())
        if firing is not None:
            self._arm(record, first, count, firing, p50)

    def _arm(self, record: PerformanceRecord, first: int, count: int, firing: Firing, median_ms: float | None) -> None:
        rank, world_size, name = self._who()
        traced = (count + 2, count + 1 + self.rule.iterations)
        path = self.directory / f"{name}-iter{traced[0]}-{traced[1]}.pt.trace.json.gz"
        began = self._clock()
        try:  # a folder that cannot be written is found now, not after profiling for nothing
            probe_folder(self.directory)
        except OSError as exc:
            said = cause(exc, self.directory) or f"folder {str(self.directory)!r}: {describe(exc)}"
            self._fail(f"could not profile iterations {traced[0]}-{traced[1]}: {said}")
            return
        tracer = None
        try:
            tracer = self._new_tracer()
            tracer.prepare()
        except Exception as exc:  # noqa: BLE001 - a capture never stops training
            if tracer is not None:
                _stop_quietly(tracer)
            self._fail(f"could not start the profiler for iterations {traced[0]}-{traced[1]}: {describe(exc)}")
            return
        job = _Job(tracer, path, count, traced[0], traced[1], (first, record.iteration), firing, median_ms, rank,
                   world_size)
        job.cost_s = self._clock() - began
        self._job = job
        self._disturbed_until = math.inf
        self._spans.append((count + 1, traced[1], str(path)))
        self._unwritten.add(str(path))
        logger.info("trainperf: iterations %d-%d: %s; profiling iterations %d-%d (the trace goes to %s once "
                    "written)", first, record.iteration, firing.reason, traced[0], traced[1], self.directory)

    # ------------------------------------------------------------------ the capture
    def step(self, count: int, now: float) -> None:
        """Iteration ``count`` ended at ``now`` (the listener's clock) while a capture is armed or tracing."""
        job = self._job
        if job is None:
            return
        began = self._clock()
        try:
            if count == job.first - 1:
                job.tracer.start()
                job.started = True
                job.tracer.mark(job.first)
                job.ends = [now]
            elif count < job.last:
                job.tracer.mark(count + 1)
                if job.ends is not None:
                    job.ends.append(now)
            else:
                if job.ends is not None:
                    job.ends.append(now)
                self._stop(job)
        except Exception as exc:  # noqa: BLE001
            self._job = None
            self._disturbed_until = count
            _stop_quietly(job.tracer)  # never left running
            self._forget(job)
            self._fail(f"the profiler failed while tracing iterations {job.first}-{job.last}: {describe(exc)}")
        finally:
            job.cost_s += self._clock() - began

    def _stop(self, job: _Job) -> None:
        self._job = None
        job.tracer.stop()
        with self._wake:
            self._jobs.append(job)
            self._exporting += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_traces, name="trainperf-capture", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _forget(self, job: _Job) -> None:
        """A capture that wrote nothing: windows not yet reported name no trace for it."""
        self._spans = [span for span in self._spans if span[2] != str(job.path)]
        self._unwritten.discard(str(job.path))

    def path_in(self, first: int, last: int) -> str | None:
        """The written trace of a capture whose iterations (its warm-up included) overlap ``first``-``last``."""
        for a, b, path in reversed(self._spans):
            if a <= last and first <= b and path not in self._unwritten:
                return path
        return None

    def waits_for(self, first: int, last: int) -> bool:
        """Whether a capture whose iterations overlap ``first``-``last`` is not written yet (nor failed):
        a window of these iterations is reported once it is, naming its trace or none."""
        unwritten = self._unwritten
        return bool(unwritten) and any(a <= last and first <= b and path in unwritten for a, b, path in self._spans)

    def collect(self, count: int) -> None:
        """Say the traces the writer finished since (``count`` iterations done), on the training thread."""
        if self._done:
            self._collect(count)

    # ------------------------------------------------------------------ writing, off the training thread
    def _write_traces(self) -> None:
        while True:
            with self._wake:
                while not self._jobs and self._arming:
                    self._wake.wait()
                if not self._jobs:  # closed: the thread ends
                    self._thread = None
                    return
                job = self._jobs.popleft()
            began = self._clock()
            result: dict[str, Any] | Exception
            try:
                result = self._write(job)
                result["export_ms"] = 1000.0 * (self._clock() - began)
            except Exception as exc:  # noqa: BLE001 - said on the training thread
                result = exc
            with self._wake:
                self._done.append((job, result))
                self._exporting -= 1
                self._wake.notify_all()

    def _write(self, job: _Job) -> dict[str, Any]:
        raw = job.path.with_name(f".{job.path.name}.raw.json")
        try:
            try:
                job.path.parent.mkdir(parents=True, exist_ok=True)
                job.tracer.save(str(raw))
                meta = job.meta()
                written = finish_trace(raw, job.path, rank=job.rank, world_size=job.world_size, meta=meta,
                                       max_bytes=self.rule.max_bytes)
            except Exception as exc:
                raise why_not_written(exc, job.path.parent) from exc  # before what it left is removed
        finally:
            remove_raw(raw)
        return dict(meta, path=str(job.path), rank=job.rank, bytes=written.size, trimmed_events=written.trimmed)

    def _collect(self, count: int) -> None:
        """Say what the writer finished (on the training thread, ``count`` iterations done)."""
        while self._done:
            job, result = self._done.popleft()
            if not self._exporting and self._job is None:
                self._disturbed_until = count
            if isinstance(result, BaseException):
                self._forget(job)
                why = str(result) if isinstance(result, TraceNotWritten) else describe(result)
                self._fail(f"could not write the trace of iterations {job.first}-{job.last}: {why}")
                continue
            self._unwritten.discard(str(job.path))
            self.written.append(result)
            trimmed = result["trimmed_events"]
            logger.info(
                "trainperf: trace of iterations %d-%d written to %s (%.2f MB%s); the capture cost %.1f ms on the "
                "training thread and %.0f ms of writing beside it; traced iterations took %s ms on average (the "
                "triggering window's median: %s ms)", job.first, job.last, job.path, result["bytes"] / 1e6,
                f", {trimmed:,} shortest events left out for the {self.rule.max_mb:g} MB cap" if trimmed else "",
                result["cost_ms"], result["export_ms"], _ms(result["traced_iteration_ms"]), _ms(job.median_ms))
            if self._on_written is not None:
                self._on_written(dict(result, kind="capture"))

    def _fail(self, message: str) -> None:
        if not self._failed:
            self._failed = True
            warnings.warn(f"trainperf: {message}; training goes on", RuntimeWarning, stacklevel=user_stacklevel())
        else:
            logger.warning("trainperf: %s", message)

    # ------------------------------------------------------------------ the end
    def stop_arming(self) -> None:
        """Training is ending: the last windows trigger no capture (no iteration would follow it), and
        the writer's thread ends once it has written what it holds."""
        with self._wake:
            self._arming = False
            self._wake.notify_all()

    def close(self, count: int) -> None:
        """Training ended after ``count`` iterations (call :meth:`stop_arming` first, before the last
        windows are reported): a capture still tracing keeps what it traced, one still warming up is
        dropped; waits (at most :data:`CLOSE_WAIT_S`) for the traces being written, then says them."""
        self.stop_arming()
        job = self._job
        if job is not None:
            self._job = None
            try:
                if job.started and count >= job.first:
                    job.last = count
                    self._job = job  # _stop clears it
                    self._stop(job)
                else:
                    self._forget(job)
                    job.tracer.stop()
            except Exception as exc:  # noqa: BLE001
                self._fail(f"the profiler failed while stopping: {describe(exc)}")
        self.wait(CLOSE_WAIT_S)
        self._collect(count)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until every trace handed to the writer is written (or has failed); whether it is."""
        with self._wake:
            return self._wake.wait_for(lambda: self._exporting == 0, timeout=timeout_s)


def _stop_quietly(tracer: Tracer) -> None:
    try:
        tracer.stop()
    except Exception:  # noqa: BLE001, S110 - already failing; said by the caller
        pass


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"
