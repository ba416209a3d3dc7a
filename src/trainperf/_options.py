"""A listener's options as one frozen, validated value: every error names the argument and the value
it got. The adapters take the same options (their signatures derive from the listener's)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ._check import check_bool, check_callable, check_int
from ._verdict import GC_BOUND_SHARE, INPUT_BOUND_SHARE, LOOP_BOUND_SHARE, Thresholds
from .profile._rule import CaptureRule
from .sinks._base import Sink, describe
from .sinks._logging import LoggingSink

__all__: list[str] = []

#: How many real tokens a batch holds (``None``: cannot tell), for adapters that see the batches.
TokenCounter = Callable[[Any], "int | None"]


def _check_share(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 100.0:
        raise ValueError(f"{name} must be a percentage in (0, 100], got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class ListenerOptions:
    """What a listener reports and how (see :class:`~trainperf.PerformanceListener` for each)."""

    frequency: int = 1
    report_score: bool = False
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
    #: The three shares as the verdict's lines (derived from them).
    thresholds: Thresholds = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        frequency = self.frequency
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"frequency must be a positive int, got {frequency!r}")
        for name in ("report_score", "report_gc", "report_etl", "report_iteration", "report_time", "report_sample",
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
        if self.profile_rule is not None and not isinstance(self.profile_rule, CaptureRule):
            raise TypeError(f"profile_rule must be a trainperf.CaptureRule or None, got {describe(self.profile_rule)}")
        timeout = self.cluster_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
            raise ValueError(f"cluster_timeout_s must be seconds in (0, 3600], got {timeout!r}")
        object.__setattr__(self, "cluster_timeout_s", float(timeout))
        object.__setattr__(self, "thresholds",
                           Thresholds(self.input_bound_share, self.gc_bound_share, self.loop_bound_share))


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
