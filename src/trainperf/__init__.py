"""trainperf: why is my training slow? Data wait, iteration time, throughput and GC, while it trains."""

from ._doctor import Check, DoctorReport, doctor
from ._format import format_line
from ._listener import BottleneckWarning, PerformanceListener
from ._logs import ParsedLog, parse_log, plot
from ._peaks import peak_flops
from ._record import SCHEMA_VERSION, GCStat, PerformanceRecord, Verdict
from ._summary import RunSummary
from ._timeline import DeviceTimeline
from .profile import CaptureRule
from .ranks._copy import run_dir_files, write_run_dir_files
from .ranks._report import build_report
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
