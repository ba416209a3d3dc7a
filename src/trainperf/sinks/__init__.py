"""Where records go. A sink is any callable taking a :class:`~trainperf.PerformanceRecord`, with an
optional ``close()``; sinks that own files close them and work as context managers.

The listener's own sinks (``LoggingSink``, ``MemorySink``) load with the package; the others are
imported on first use."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..base import lazy_names as _lazy_names
from ._base import Sink, SinkError
from ._logging import LoggingSink
from ._memory import MemorySink

if _TYPE_CHECKING:
    from ..ranks import RunDirSink
    from ._csv import CSV_COLUMNS, CsvSink
    from ._jsonlines import JsonLinesSink
    from ._loggers import LoggerSink
    from ._metrics import scalar_metrics
    from ._mlflow import MlflowSink
    from ._tensorboard import TensorBoardSink
    from ._tqdm import TqdmSink
    from ._wandb import WandbSink

__all__ = [
    "CSV_COLUMNS",
    "CsvSink",
    "JsonLinesSink",
    "LoggerSink",
    "LoggingSink",
    "MemorySink",
    "MlflowSink",
    "RunDirSink",
    "Sink",
    "SinkError",
    "TensorBoardSink",
    "TqdmSink",
    "WandbSink",
    "scalar_metrics",
]

# ``RunDirSink`` lives with the run directory's format (:mod:`trainperf.ranks`), whose modules use the
# sinks' base; it is found here too.
if not _TYPE_CHECKING:  # mypy reads the imports above, so a misspelt name stays an error
    __getattr__, __dir__ = _lazy_names(__name__, {
        "CSV_COLUMNS": "._csv", "CsvSink": "._csv", "JsonLinesSink": "._jsonlines", "LoggerSink": "._loggers",
        "scalar_metrics": "._metrics", "TensorBoardSink": "._tensorboard", "TqdmSink": "._tqdm",
        "RunDirSink": "..ranks", "WandbSink": "._wandb", "MlflowSink": "._mlflow",
    })
