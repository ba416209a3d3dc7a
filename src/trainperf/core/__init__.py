"""The framework-free core: :class:`~trainperf.PerformanceListener` and its parts (the open window,
closing a window, the clock that leaves trainperf's own time out, emission on a writer thread, the
run's totals, host readings, GC, notices), and :class:`StepAccountant`, which turns an adapter's
plain events into one iteration's figures. It imports no framework. What only the adapters use
(``StepAccountant``, ``RunListeners``) is imported on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..base import lazy_names as _lazy_names
from ._listener import BottleneckWarning, PerformanceListener

if _TYPE_CHECKING:
    from ._accountant import SPAN_KINDS, StepAccountant
    from ._named_spans import span
    from ._runs import RunListeners as RunListeners
    from ._runs import check_options as check_options

__all__ = ["BottleneckWarning", "PerformanceListener", "SPAN_KINDS", "StepAccountant", "span"]

# used by the other parts of trainperf
from ._collections import Collector as Collector
from ._gc import GCMonitor as GCMonitor
from ._gc import fetch_wait as fetch_wait
from ._hardware import Probe as Probe
from ._hardware import Throttled as Throttled
from ._step_flops import ShapeFlops as ShapeFlops
from ._step_flops import StepShape as StepShape

if not _TYPE_CHECKING:  # mypy reads the imports above, so a misspelt name stays an error
    __getattr__, __dir__ = _lazy_names(__name__, {
        "SPAN_KINDS": "._accountant", "StepAccountant": "._accountant", "span": "._named_spans",
        # a framework callback's listeners per run (it reads the listener's signature)
        "RunListeners": "._runs", "check_options": "._runs",
    })
