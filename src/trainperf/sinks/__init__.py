"""Where records go. A sink is any callable taking a :class:`~trainperf.PerformanceRecord`, with an
optional ``close()``; sinks that own files close them and work as context managers."""

from ..ranks._sink import RunDirSink
from ._base import Sink, SinkError
from ._csv import CSV_COLUMNS, CsvSink
from ._jsonlines import JsonLinesSink
from ._loggers import LoggerSink
from ._logging import LoggingSink
from ._memory import MemorySink
from ._metrics import scalar_metrics
from ._tensorboard import TensorBoardSink
from ._tqdm import TqdmSink

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
