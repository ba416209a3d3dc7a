"""trainperf: why is my training slow? Data wait, iteration time, throughput and GC, while it trains.

``import trainperf`` loads only the listener's parts (the core, the records, the sinks); the doctor,
the log reader, the multi-rank report and the profiler capture are imported when first used."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .base import lazy_names as _lazy_names
from .core import BottleneckWarning, PerformanceListener
from .records import (
    SCHEMA_VERSION,
    DeviceTimeline,
    GCStat,
    GoodputAccount,
    PerformanceRecord,
    RunSummary,
    Verdict,
    format_line,
    peak_flops,
)
from .sinks import LoggingSink, MemorySink, Sink, SinkError

if _TYPE_CHECKING:
    from .core import span
    from .diagnosis import Check, DoctorReport, StepMemory, doctor
    from .logs import ParsedLog, parse_log, plot
    from .profile import CaptureRule
    from .ranks import RunDirSink, build_report, read_goodput, run_dir_files, write_run_dir_files

__version__ = "0.1.0"


__all__ = [
    "SCHEMA_VERSION",
    "BottleneckWarning",
    "CaptureRule",
    "Check",
    "DeviceTimeline",
    "DoctorReport",
    "GCStat",
    "GoodputAccount",
    "LoggingSink",
    "MemorySink",
    "ParsedLog",
    "PerformanceListener",
    "PerformanceRecord",
    "RunDirSink",
    "RunSummary",
    "Sink",
    "SinkError",
    "StepMemory",
    "Verdict",
    "build_report",
    "doctor",
    "format_line",
    "parse_log",
    "peak_flops",
    "plot",
    "read_goodput",
    "run_dir_files",
    "span",
    "write_run_dir_files",
]

# imported on first use: none of them is needed to listen
if not _TYPE_CHECKING:  # mypy reads the imports above, so a misspelt name stays an error
    __getattr__, __dir__ = _lazy_names(__name__, {
        "Check": ".diagnosis", "DoctorReport": ".diagnosis", "doctor": ".diagnosis", "StepMemory": ".diagnosis",
        "ParsedLog": ".logs", "parse_log": ".logs", "plot": ".logs",
        "CaptureRule": ".profile",
        "span": ".core",
        "RunDirSink": ".ranks", "build_report": ".ranks", "run_dir_files": ".ranks", "write_run_dir_files": ".ranks",
        "read_goodput": ".ranks",
    })
