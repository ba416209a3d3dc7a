"""The record and the pure math behind it: the schema (:class:`PerformanceRecord`), the window's
figures from plain numbers, the device clock's window math, the verdict, the summary, the advice,
the line format, strict JSON and the table of device peaks. Nothing here reads a clock or knows the
listener."""

from __future__ import annotations

from ._peaks import peak_flops
from ._record import SCHEMA_VERSION, GCStat, PerformanceRecord, Verdict
from ._summary import RunSummary
from ._timeline import DeviceTimeline

__all__ = ["SCHEMA_VERSION", "DeviceTimeline", "GCStat", "PerformanceRecord", "RunSummary", "Verdict", "peak_flops"]

# used by the other parts of trainperf
from ._advice import CUDA_FIXES as CUDA_FIXES
from ._advice import DEFAULT_FIXES as DEFAULT_FIXES
from ._advice import dataloader_tips as dataloader_tips
from ._compiled_line import format_line as format_line
from ._format import DL4J_FIELDS as DL4J_FIELDS
from ._format import TRAINPERF_FIELDS as TRAINPERF_FIELDS
from ._format import LineField as LineField
from ._format import counted as counted
from ._goodput import AttemptAccount as AttemptAccount
from ._goodput import StepHistogram as StepHistogram
from ._goodput_rows import GOODPUT_ROWS as GOODPUT_ROWS
from ._goodput_rows import GoodputAccount as GoodputAccount
from ._goodput_rows import account_job as account_job
from ._goodput_rows import account_rank as account_rank
from ._goodput_rows import duration_words as duration_words
from ._goodput_rows import live_goodput as live_goodput
from ._json import json_line as json_line
from ._json import record_json as record_json
from ._json import strict as strict
from ._memo import TextMemo as TextMemo
from ._memory import FloorTrend as FloorTrend
from ._memory import Growth as Growth
from ._memory import ReservedTrend as ReservedTrend
from ._memory import growth_verdict as growth_verdict
from ._memory_peaks import MemoryPeaks as MemoryPeaks
from ._padding import PADDING_SHARE as PADDING_SHARE
from ._padding import judge_padding as judge_padding
from ._padding import padding_share as padding_share
from ._padding import real_mfu as real_mfu
from ._peaks import Peak as Peak
from ._peaks import find_peak as find_peak
from ._peaks import number_format as number_format
from ._record import build_record as build_record
from ._record import flat_columns as flat_columns
from ._record import metric_fields as metric_fields
from ._summary import MFU_ABOVE_PEAK as MFU_ABOVE_PEAK
from ._summary import build_summary as build_summary
from ._timeline import DeviceWindow as DeviceWindow
from ._timeline import device_window as device_window
from ._timeline import speedup as speedup
from ._verdict import GC_BOUND_SHARE as GC_BOUND_SHARE
from ._verdict import INPUT_BOUND_SHARE as INPUT_BOUND_SHARE
from ._verdict import LOOP_BOUND_SHARE as LOOP_BOUND_SHARE
from ._verdict import CpuLoad as CpuLoad
from ._verdict import Thresholds as Thresholds
from ._verdict import judge as judge
from ._verdict import judge_device as judge_device
from ._verdict import persists as persists
from ._window import WindowEntry as WindowEntry
from ._window import WindowFigures as WindowFigures
from ._window import percentile as percentile
from ._window import safe_rate as safe_rate
from ._window import window_figures as window_figures

#: A record's text line and JSON line, made once for all the sinks that write them.
line_of = TextMemo(format_line)
json_of = TextMemo(record_json)
