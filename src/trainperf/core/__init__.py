"""The framework-free core: :class:`~trainperf.PerformanceListener` and its parts (the open window,
closing a window, the clock that leaves trainperf's own time out, emission on a writer thread, the
run's totals, host readings, GC, notices), and :class:`StepAccountant`, which turns an adapter's
plain events into one iteration's figures. It imports no framework."""

from __future__ import annotations

from ._accountant import SPAN_KINDS, StepAccountant
from ._listener import BottleneckWarning, PerformanceListener

__all__ = ["BottleneckWarning", "PerformanceListener", "SPAN_KINDS", "StepAccountant"]

# used by the other parts of trainperf
from ._collections import Collector as Collector
from ._gc import GCMonitor as GCMonitor
from ._gc import fetch_wait as fetch_wait
from ._hardware import Probe as Probe
from ._hardware import Throttled as Throttled
from ._runs import RunListeners as RunListeners
from ._runs import check_options as check_options
