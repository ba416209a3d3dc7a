"""Where records go. A sink is any callable taking a :class:`~trainperf.PerformanceRecord`, with an
optional ``close()``; sinks that own files close them and work as context managers."""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._base import Sink, SinkError
from ._csv import CSV_COLUMNS, CsvSink
from ._jsonlines import JsonLinesSink
from ._loggers import LoggerSink
from ._logging import LoggingSink
from ._memory import MemorySink
from ._metrics import scalar_metrics
from ._tensorboard import TensorBoardSink
from ._tqdm import TqdmSink

if _TYPE_CHECKING:
    from ..ranks import RunDirSink

__all__ = [
    "CSV_COLUMNS",
    "CsvSink",
    "JsonLinesSink",
    "LoggerSink",
    "LoggingSink",
    "MemorySink",
    "RunDirSink",
    "Sink",
    "SinkError",
    "TensorBoardSink",
    "TqdmSink",
    "scalar_metrics",
]



def __getattr__(name: str) -> _Any:
    """``RunDirSink`` lives with the run directory's format (:mod:`trainperf.ranks`); it is found here
    too, imported on first use (the run directory's modules use the sinks' base)."""
    if name == "RunDirSink":
        from ..ranks import RunDirSink

        return RunDirSink
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
