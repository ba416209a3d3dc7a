"""Where records go. A sink is any callable taking a :class:`~trainperf.PerformanceRecord`, with an
optional ``close()``; sinks that own files close them and work as context managers."""

from .._sinks import LoggingSink, MemorySink, Sink
from ._files import CSV_COLUMNS, CsvSink, JsonLinesSink
from ._integrations import LoggerSink, TensorBoardSink, TqdmSink, scalar_metrics

__all__ = [
    "CSV_COLUMNS",
    "CsvSink",
    "JsonLinesSink",
    "LoggerSink",
    "LoggingSink",
    "MemorySink",
    "Sink",
    "TensorBoardSink",
    "TqdmSink",
    "scalar_metrics",
]
