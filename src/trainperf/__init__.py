"""trainperf: why is my training slow? Data wait, iteration time, throughput and GC, while it trains."""

from .core import BottleneckWarning, PerformanceListener
from .diagnosis import Check, DoctorReport, doctor
from .logs import ParsedLog, parse_log, plot
from .profile import CaptureRule
from .ranks import build_report, run_dir_files, write_run_dir_files
from .records import (
    SCHEMA_VERSION,
    DeviceTimeline,
    GCStat,
    PerformanceRecord,
    RunSummary,
    Verdict,
    format_line,
    peak_flops,
)
from .sinks import LoggingSink, MemorySink, RunDirSink, Sink, SinkError

__version__ = "0.1.0"


__all__ = [
    "SCHEMA_VERSION",
    "BottleneckWarning",
    "CaptureRule",
    "Check",
    "DeviceTimeline",
    "DoctorReport",
    "GCStat",
    "LoggingSink",
    "MemorySink",
    "ParsedLog",
    "PerformanceListener",
    "PerformanceRecord",
    "RunDirSink",
    "RunSummary",
    "Sink",
    "SinkError",
    "Verdict",
    "build_report",
    "doctor",
    "format_line",
    "parse_log",
    "peak_flops",
    "plot",
    "run_dir_files",
    "write_run_dir_files",
]
