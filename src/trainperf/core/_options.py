"""A listener's options as one frozen, validated value: every error names the argument and the value
it got. The adapters take the same options (their signatures derive from the listener's)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base import check_bool, check_callable, check_int
from ..records import GC_BOUND_SHARE, INPUT_BOUND_SHARE, LOOP_BOUND_SHARE, Thresholds
from ..sinks import LoggingSink, Sink
from ..sinks.shared import describe

if TYPE_CHECKING:
    from ..profile import CaptureRule

__all__: list[str] = []

#: How many real tokens a batch holds (``None``: cannot tell), for adapters that see the batches.
TokenCounter = Callable[[Any], "int | None"]


#: When the CUDA allocator records its history (the ``memory_history`` option).
MEMORY_HISTORY = ("when_short", "start", "never")


def _check_share(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 100.0:
        raise ValueError(f"{name} must be a percentage in (0, 100], got {value!r}")
    return float(value)


#: Each option of :class:`~trainperf.PerformanceListener` (and so of every adapter), documented once:
#: the listener's docstring and the adapters' take it from here.
OPTIONS_DOC = """\
        frequency: report every this many iterations (a positive int).
        report_score: the last loss given (:meth:`set_score`, ``record_iteration(score=...)``, ``fit``),
            read with ``float()`` on report iterations only. ``None`` (the default) records a score
            whenever one is given; ``True`` also asks the Lightning callback to read the training
            step's loss; ``False`` leaves the score out, and a score given anyway is warned about once.
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
        input_bound_share, gc_bound_share, loop_bound_share: the verdict's lines, in percent of the
            window: data wait (default 20), GC pauses (10) and other host time (20) at or above them
            turn the verdict input-bound, GC-bound or loop-bound.
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
        flops_per_step: the model's FLOPs per optimizer step, one figure for every step (the adapters
            count them otherwise, from the second step on, once per batch shape: a varying shape is
            followed); records then carry ``tflops_per_sec``.
        peak_flops: the device's dense peak FLOP/s, for ``mfu`` (otherwise taken from
            :func:`~trainperf.peak_flops` for the device and number format the adapters see).
        profile_dir: when a window turns bad (see ``profile_rule``), profile the next iterations with
            ``torch.profiler`` and write the trace under this folder (``docs/profiling.md``); the
            record of each window the capture overlaps names the trace in ``capture``.
        profile_rule: when to capture and how much (a :class:`~trainperf.CaptureRule`; its defaults
            when ``None``).
        memory_history: on CUDA, when the caching allocator records its history with Python stacks, for
            the snapshot an out-of-memory error leaves (``docs/memory.md``): ``"when_short"`` (the default)
            from the first report whose ``cuda_reserved_max_mb`` reaches 90% of the device's memory,
            ``"start"`` from the training's start, ``"never"``. At most 100,000 entries are kept."""


@dataclass(frozen=True, slots=True)
class ListenerOptions:
    """What a listener reports and how (see :class:`~trainperf.PerformanceListener` for each)."""

    frequency: int = 1
    report_score: bool | None = None
    report_gc: bool = False
    report_etl: bool = True
    report_iteration: bool = True
    report_time: bool = True
    report_sample: bool = True
    report_batch: bool = True
    strict: bool = False
    sink_thread: bool = True
    history: int | None = 1000
    verdict: bool = True
    input_bound_share: float = INPUT_BOUND_SHARE
    gc_bound_share: float = GC_BOUND_SHARE
    loop_bound_share: float = LOOP_BOUND_SHARE
    rank: int | None = None
    run_dir: str | os.PathLike[str] | None = None
    cluster_every: int = 10
    cluster_timeout_s: float = 30.0
    report_hardware: bool = True
    tokens: TokenCounter | None = None
    flops_per_step: float | None = None
    peak_flops: float | None = None
    profile_dir: str | os.PathLike[str] | None = None
    profile_rule: CaptureRule | None = None
    memory_history: str = "when_short"
    #: The three shares as the verdict's lines (derived from them).
    thresholds: Thresholds = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        frequency = self.frequency
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"frequency must be a positive int, got {frequency!r}")
        if self.report_score is not None and not isinstance(self.report_score, bool):
            raise TypeError(f"report_score must be a bool or None, got {self.report_score!r}")
        for name in ("report_gc", "report_etl", "report_iteration", "report_time", "report_sample",
                     "report_batch", "verdict"):
            check_bool(name, getattr(self, name))
        for name in ("input_bound_share", "gc_bound_share", "loop_bound_share"):
            object.__setattr__(self, name, _check_share(name, getattr(self, name)))
        check_bool("strict", self.strict)
        rank = self.rank
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
            raise ValueError(f"rank must be a non-negative int or None, got {rank!r}")
        check_int("history", self.history, minimum=1, optional=True)
        check_bool("sink_thread", self.sink_thread)
        check_bool("report_hardware", self.report_hardware)
        check_int("cluster_every", self.cluster_every, minimum=1)
        if self.tokens is not None:
            check_callable("tokens", self.tokens)
        for name in ("flops_per_step", "peak_flops"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                    raise ValueError(f"{name} must be a positive, finite number of FLOPs (or None), got {value!r}")
                object.__setattr__(self, name, float(value))
        if self.profile_dir is not None and not isinstance(self.profile_dir, (str, os.PathLike)):
            raise TypeError("profile_dir must be a path (str or os.PathLike) or None, got "
                            f"{describe(self.profile_dir)}")
        if self.profile_rule is not None and not _is_capture_rule(self.profile_rule):
            raise TypeError(f"profile_rule must be a trainperf.CaptureRule or None, got {describe(self.profile_rule)}")
        if self.memory_history not in MEMORY_HISTORY:
            raise ValueError(f"memory_history must be one of {', '.join(map(repr, MEMORY_HISTORY))}, "
                             f"got {self.memory_history!r}")
        timeout = self.cluster_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
            raise ValueError(f"cluster_timeout_s must be seconds in (0, 3600], got {timeout!r}")
        object.__setattr__(self, "cluster_timeout_s", float(timeout))
        object.__setattr__(self, "thresholds",
                           Thresholds(self.input_bound_share, self.gc_bound_share, self.loop_bound_share))


def _is_capture_rule(value: object) -> bool:
    from ..profile import CaptureRule  # only a listener given a rule loads the profile package

    return isinstance(value, CaptureRule)


def checked_sinks(sinks: Iterable[Sink] | None) -> list[Sink]:
    """A listener's sinks as a list, each checked (``None``: one :class:`~trainperf.LoggingSink`)."""
    if sinks is not None and (isinstance(sinks, (str, bytes)) or not isinstance(sinks, Iterable)):
        raise TypeError("sinks must be an iterable of sinks (callables taking a record) or None, "
                        f"got {describe(sinks)}")
    sink_list: list[Sink] = [LoggingSink()] if sinks is None else list(sinks)
    for sink in sink_list:
        if not callable(sink):
            raise TypeError(f"sinks must be callables taking a record, got {describe(sink)}")
    return sink_list
