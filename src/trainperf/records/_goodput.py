"""One attempt's time account, window by window: the parts the job's goodput is made of.

An *attempt* is one process of one rank: it starts when the operating system started the process,
trains from ``start_iteration``, writes windows, and ends at its last sign of life (a clean close, or
its last window when it was killed). :class:`AttemptAccount` sums each window's parts as its record
gives them, so the live listener, the run directory's ledger and a reader of old files all count the
same way; :mod:`~trainperf.records._goodput_rows` turns attempts into the rows of a rank and a job.

A window's wall time is its ``window_s`` (the user's clock) plus ``overhead_ms`` (trainperf's own
time, left out of that clock). It splits into: data wait (``etl_total_ms``), GC (``gc_total_ms``),
evaluation, checkpoint saves and loads (``extra["eval_ms"]``, ``extra["checkpoint_ms"]``,
``extra["checkpoint_load_ms"]``, means per iteration), other host time (``other_ms`` less those spans),
collective wait (``extra["wait_ms"]``, inside ``compute_ms``), trainperf's own time, and the **step**:
the rest of ``compute_ms``. A span that did not fall in the host time (a plain loop that gives no
``other``) comes out of the step.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["AttemptAccount", "StepHistogram", "SPAN_PARTS", "WINDOW_PARTS", "merged_steps"]

#: The named spans that are rows of their own: the record's ``extra`` key of each.
SPAN_PARTS = {"eval": "eval_ms", "checkpoint_save": "checkpoint_ms", "checkpoint_load": "checkpoint_load_ms"}
#: A window's parts besides the step, in seconds.
WINDOW_PARTS = ("data_wait", "gc", "eval", "checkpoint_save", "checkpoint_load", "other_host", "collective_wait",
                "trainperf")
#: Width of the step histogram's bins: 0.1% of the value (the ideal step is known to about 0.05%).
_BIN = 1000.0
#: A window whose per-iteration step is not positive (everything was waiting) is binned here.
_ZERO_BIN = -(2**31)


_INF = math.inf


def _ms(value: Any) -> float:
    """A record's millisecond figure as seconds, 0 when absent or not a finite non-negative number."""
    if type(value) is float:  # what a record holds: one comparison (NaN fails it too)
        return value * 0.001 if 0.0 < value < _INF else 0.0
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    try:
        value = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return 0.0
    return value * 0.001 if 0.0 < value < _INF else 0.0


class StepHistogram:
    """Per-iteration step times of windows, binned at 0.1%: their median without keeping every window,
    merged across attempts and ranks exactly. The median is followed as windows are added (a few
    operations each), so a live listener can read it at every report."""

    __slots__ = ("counts", "total", "_keys", "_at", "_below")

    def __init__(self, counts: Mapping[int, int] | None = None) -> None:
        self.counts: dict[int, int] = {k: v for k, v in (counts or {}).items() if v > 0}
        self.total = sum(self.counts.values())
        self._keys = sorted(self.counts)  # the bins, ascending
        self._at = 0  # index of the median's bin in _keys
        self._below = 0  # windows in the bins before it
        self._settle()

    def add(self, seconds: float) -> None:
        key = math.floor(math.log(seconds) * _BIN) if seconds > 0.0 else _ZERO_BIN
        counts, keys = self.counts, self._keys
        if key in counts:
            counts[key] += 1
        else:
            counts[key] = 1
            at = bisect_left(keys, key)
            keys.insert(at, key)
            if at <= self._at and len(keys) > 1:
                self._at += 1
        if len(keys) > 1 and key < keys[self._at]:
            self._below += 1
        self.total += 1
        self._settle()

    def _settle(self) -> None:
        """Move the median's bin to where the lower middle window falls."""
        keys, counts = self._keys, self.counts
        if not keys:
            self._at = self._below = 0
            return
        half = (self.total + 1) // 2
        while self._below + counts[keys[self._at]] < half:
            self._below += counts[keys[self._at]]
            self._at += 1
        while self._below >= half:
            self._at -= 1
            self._below -= counts[keys[self._at]]

    def merge(self, other: StepHistogram) -> None:
        counts = self.counts
        for key, count in other.counts.items():
            counts[key] = counts.get(key, 0) + count
        self.__init__(counts)  # type: ignore[misc]

    def median(self) -> float | None:
        """The median window's step, ``None`` with no window (the lower middle one for an even count)."""
        if not self.total:
            return None
        key = self._keys[self._at]
        return 0.0 if key == _ZERO_BIN else math.exp((key + 0.5) / _BIN)


class AttemptAccount:
    """One attempt's parts, summed over the windows it wrote (see the module's docstring).

    Args:
        process_start: wall time (seconds since the epoch) the operating system started the process.
        started: wall time training started (the listener's start); ``None`` until then.
        start_iteration: the iterations done before this attempt (a run resumed from a checkpoint).
        pid: the process.
    """

    __slots__ = ("process_start", "started", "start_iteration", "pid", "startup_parts", "tail_parts", *WINDOW_PARTS,
                 "windows", "iterations", "last_iteration", "last_seen", "ended", "warmup_step_s", "warmup_iterations",
                 "steady_step_s", "steady_iterations", "steady", "warmup", "window_wall_s", "last_step")

    def __init__(self, process_start: float, *, started: float | None = None, start_iteration: int = 0,
                 pid: int = 0) -> None:
        self.process_start = process_start
        self.started = started
        self.start_iteration = start_iteration
        self.pid = pid
        self.startup_parts: dict[str, float] = {}  # spans before training started (a checkpoint loaded)
        self.tail_parts: dict[str, float] = {}  # spans after the last iteration (a final save)
        self.data_wait = self.gc = self.eval = self.checkpoint_save = self.checkpoint_load = 0.0
        self.other_host = self.collective_wait = self.trainperf = 0.0
        self.windows = 0
        self.iterations = 0
        self.last_iteration: int | None = None
        self.last_seen: float | None = None  # the last window's time stamp, or the clean close
        self.ended: float | None = None
        self.warmup_step_s = 0.0
        self.warmup_iterations = 0
        self.steady_step_s = 0.0
        self.steady_iterations = 0
        self.steady = StepHistogram()  # the steady windows' per-iteration step
        self.warmup = StepHistogram()  # the warm-up windows', the ideal step's fallback
        self.window_wall_s = 0.0
        self.last_step = 0.0  # the newest window's per-iteration step

    @property
    def parts(self) -> dict[str, float]:
        """The windows' parts besides the step, seconds by :data:`WINDOW_PARTS` name."""
        return {name: getattr(self, name) for name in WINDOW_PARTS}

    @parts.setter
    def parts(self, parts: Mapping[str, float]) -> None:
        for name in WINDOW_PARTS:
            setattr(self, name, float(parts.get(name, 0.0)))

    # -- windows -----------------------------------------------------------------------------------
    def add_record(self, record: Any) -> None:
        """Count a :class:`~trainperf.PerformanceRecord`'s window."""
        self.add_window(record.iteration, record.window_iterations, record.window_s, record.warmup, record.timestamp,
                        etl_total_ms=record.etl_total_ms, gc_total_ms=record.gc_total_ms,
                        compute_ms=record.compute_ms, other_ms=record.other_ms, overhead_ms=record.overhead_ms,
                        extra=record.extra)

    def add_window(self, iteration: int, iterations: int, window_s: float, warmup: bool, timestamp: float | None, *,
                   etl_total_ms: Any, gc_total_ms: Any, compute_ms: Any, other_ms: Any, overhead_ms: Any,
                   extra: Mapping[str, Any] | None) -> None:
        """Count one window from its record's figures (see the module's docstring); figures that are
        missing or not finite and non-negative count as 0."""
        n = iterations
        compute = _ms(compute_ms) * n
        other = _ms(other_ms) * n
        spans = collective = 0.0
        if extra:  # the spans and the collective wait the adapters timed
            get = extra.get
            evaluation, save, load = _ms(get("eval_ms")) * n, _ms(get("checkpoint_ms")) * n, _ms(
                get("checkpoint_load_ms")) * n
            self.eval += evaluation
            self.checkpoint_save += save
            self.checkpoint_load += load
            spans = evaluation + save + load
            collective = min(_ms(get("wait_ms")) * n, compute)
        step = compute - collective
        if spans > other:  # spans the host time does not hold came out of the step
            step = max(0.0, step - (spans - other))
            other = 0.0
        else:
            other -= spans
        overhead = _ms(overhead_ms)
        self.data_wait += _ms(etl_total_ms)
        self.gc += _ms(gc_total_ms)
        self.other_host += other
        self.collective_wait += collective
        self.trainperf += overhead
        self.window_wall_s += (window_s if 0.0 < window_s < _INF else 0.0) + overhead
        per = step / n
        self.last_step = per
        if warmup:
            self.warmup_step_s += step
            self.warmup_iterations += n
            self.warmup.add(per)
        else:
            self.steady_step_s += step
            self.steady_iterations += n
            self.steady.add(per)
        self.windows += 1
        self.iterations += n
        if self.last_iteration is None or iteration > self.last_iteration:
            self.last_iteration = iteration
        seen = self.last_seen
        if timestamp is not None and -_INF < timestamp < _INF and (seen is None or timestamp > seen):
            self.last_seen = timestamp

    def add_startup(self, times_s: Mapping[str, float]) -> None:
        """Spans seen before training started (``{"checkpoint_load": seconds}``; the names of
        :meth:`~trainperf.PerformanceListener.add_time`)."""
        _add_named(self.startup_parts, times_s)

    def add_tail(self, times_s: Mapping[str, float]) -> None:
        """Spans seen after the last iteration (a final checkpoint save)."""
        _add_named(self.tail_parts, times_s)

    def close(self, ended: float) -> None:
        """The attempt ended cleanly at ``ended`` (wall time)."""
        self.ended = ended
        if self.last_seen is None or ended > self.last_seen:
            self.last_seen = ended

    # -- what it says --------------------------------------------------------------------------------
    @property
    def first_seen(self) -> float:
        """When training started (the process's start until it is known)."""
        return self.started if self.started is not None else self.process_start

    def last_seen_or_start(self) -> float:
        """Its last sign of life: the last window or the close, else when training started."""
        return self.last_seen if self.last_seen is not None else self.first_seen


    @property
    def reached(self) -> int:
        """The last iteration trained (its start when none was)."""
        return self.start_iteration if self.last_iteration is None else max(self.last_iteration, self.start_iteration)

    def to_dict(self) -> dict[str, Any]:
        """The account as plain JSON values (the run directory's ``goodput.json`` holds one per attempt)."""
        return {
            "pid": self.pid, "process_start": self.process_start, "started": self.started,
            "start_iteration": self.start_iteration, "startup_parts": dict(self.startup_parts),
            "tail_parts": dict(self.tail_parts), "parts": dict(self.parts), "windows": self.windows,
            "iterations": self.iterations, "last_iteration": self.last_iteration, "last_seen": self.last_seen,
            "ended": self.ended, "warmup_step_s": self.warmup_step_s, "warmup_iterations": self.warmup_iterations,
            "steady_step_s": self.steady_step_s, "steady_iterations": self.steady_iterations,
            "steady": {str(k): v for k, v in self.steady.counts.items()},
            "warmup": {str(k): v for k, v in self.warmup.counts.items()}, "window_wall_s": self.window_wall_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AttemptAccount:
        """An account written by :meth:`to_dict`. Raises ``ValueError`` naming the first field that is
        missing or of the wrong kind (a reader skips such an attempt and says so)."""
        account = cls(_number(data, "process_start"), started=_number(data, "started", optional=True),
                      start_iteration=_count(data, "start_iteration"), pid=_count(data, "pid"))
        account.startup_parts = _seconds_map(data, "startup_parts")
        account.tail_parts = _seconds_map(data, "tail_parts")
        account.parts = _seconds_map(data, "parts")
        account.windows = _count(data, "windows")
        account.iterations = _count(data, "iterations")
        last = data.get("last_iteration")
        account.last_iteration = None if last is None else _count(data, "last_iteration")
        account.last_seen = _number(data, "last_seen", optional=True)
        account.ended = _number(data, "ended", optional=True)
        account.warmup_step_s = _number(data, "warmup_step_s")
        account.warmup_iterations = _count(data, "warmup_iterations")
        account.steady_step_s = _number(data, "steady_step_s")
        account.steady_iterations = _count(data, "steady_iterations")
        account.steady = StepHistogram(_bins(data, "steady"))
        account.warmup = StepHistogram(_bins(data, "warmup"))
        account.window_wall_s = _number(data, "window_wall_s")
        return account

    def copy(self) -> AttemptAccount:
        return AttemptAccount.from_dict(self.to_dict())


def _add_named(into: dict[str, float], times_s: Mapping[str, float]) -> None:
    for name, seconds in times_s.items():
        if seconds > 0.0 and math.isfinite(seconds):
            into[name] = into.get(name, 0.0) + seconds


#: Wall times are seconds since 1970 below this (the year 5138), and sums of seconds below 1e12 (31,000
#: years): a ledger's figures beyond them are not a run's, and their differences could overflow.
_MAX_WALL_S = 1e11
_MAX_SECONDS = 1e12
_WALL_TIMES = ("process_start", "started", "last_seen", "ended")


def _number(data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    limit = _MAX_WALL_S if key in _WALL_TIMES else _MAX_SECONDS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < limit:
        raise ValueError(f"{key}: not a time or seconds trainperf writes ({value!r})")
    return float(value)


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
        raise ValueError(f"{key}: not a count ({value!r})")
    return value


def _seconds_map(data: Mapping[str, Any], key: str) -> dict[str, float]:
    value = data.get(key)
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise ValueError(f"{key}: not an object")
    out: dict[str, float] = {}
    for name, seconds in value.items():
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0.0 <= seconds < 1e9:
            raise ValueError(f"{key}.{name}: not seconds ({seconds!r})")
        out[str(name)] = float(seconds)
    return out


def _bins(data: Mapping[str, Any], key: str) -> dict[int, int]:
    value = data.get(key)
    value = {} if value is None else value
    if not isinstance(value, dict) or len(value) > 1_000_000:
        raise ValueError(f"{key}: not a histogram")
    out: dict[int, int] = {}
    for name, count in value.items():
        try:
            bin_key = int(name)
        except ValueError:
            raise ValueError(f"{key}: bin {name!r} is not an integer") from None
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count < 2**62:
            raise ValueError(f"{key}.{name}: not a count ({count!r})")
        out[bin_key] = count
    return out


def merged_steps(attempts: Iterable[AttemptAccount]) -> tuple[StepHistogram, StepHistogram]:
    """The steady and warm-up step histograms of ``attempts`` together."""
    steady, warmup = StepHistogram(), StepHistogram()
    for attempt in attempts:
        steady.merge(attempt.steady)
        warmup.merge(attempt.warmup)
    return steady, warmup
