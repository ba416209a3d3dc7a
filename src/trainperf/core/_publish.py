"""Publishing a closed window: its record is built, added to the run's totals, its verdict noted for
the warnings, kept in the history and handed to the sinks. It knows nothing of the listener; the
listener calls it under its lock."""

from __future__ import annotations

from collections.abc import Callable

from ..records import CpuLoad, DeviceWindow, PerformanceRecord, RunSummary
from ..sinks import MemorySink
from ._build import build_window_record
from ._emit import Emitter
from ._goodput_live import LiveGoodput
from ._memory_watch import MemoryWatch
from ._notices import Notices
from ._options import ListenerOptions
from ._pending import HostWindow
from ._totals import RunTotals

__all__: list[str] = []


class Publisher:
    """From a window's host side (and, on an asynchronous device, its device side) to every sink.

    Args:
        options: what the records hold.
        history: the listener's newest records (kept synchronously, before any sink).
        emitter: the sinks, on their writer thread.
        notices: the warnings said once and the bottlenecks to warn about.
        host_name: the machine the records describe; ``pid`` its process.
    """

    __slots__ = ("options", "history", "emitter", "notices", "totals", "host_name", "pid", "_previous", "goodput",
                 "memory")

    def __init__(self, options: ListenerOptions, history: MemorySink, emitter: Emitter, notices: Notices, *,
                 host_name: str, pid: int) -> None:
        self.options, self.history, self.emitter, self.notices = options, history, emitter, notices
        self.host_name, self.pid = host_name, pid
        self.totals = RunTotals()
        self._previous: str | None = None  # the verdict of the last window after the warm-up
        self.goodput: LiveGoodput | None = None  # the job's time account, which sets each record's goodput
        self.memory = MemoryWatch(notices.once)  # whether memory grows, window after window

    def publish(self, host: HostWindow, device: DeviceWindow | None, cpu: CpuLoad | None = None) -> PerformanceRecord:
        """Build the window's record and send it to every sink; ``cpu`` is its CPU use (host clock)."""
        growth = self.memory.observe(host.iteration, host.hardware, warmup=host.warmup)
        built = build_window_record(host, device, self.options, host_name=self.host_name, pid=self.pid,
                                    previous=self._previous, cpu=cpu, growth=growth)
        record, figures, hardware, notices = built.record, host.figures, host.hardware, self.notices
        if self.goodput is not None:
            self.goodput.add(record)
        verdict = record.verdict
        if hardware:
            notices.workers_cpu_pct = hardware.get("workers_cpu_pct")
        self.totals.add(record, etl_s=figures.etl_s, other_s=figures.other_s, gc_s=host.gc_s,
                        data_free_s=built.data_free_s, gc_free_s=built.gc_free_s,
                        device_window_s=device.window_s if device is not None else None,
                        device_idle_s=device.idle_s if device is not None else 0.0)
        if host.score is not None and self.options.report_score is False:
            notices.once("a score was given (set_score or record_iteration(score=...)) but report_score=False "
                         "leaves it out of the records; leave report_score out (or set it True) to record it")
        if figures.samples is None and self.options.report_sample:
            notices.once("could not find the batch size; samples/sec is left out for this run")
        if verdict is not None and not record.warmup:  # the warm-up's start-up costs set no precedent
            self._previous = built.time_kind
            # growth is judged over several windows already: said at once, before the run runs out
            if verdict.kind == "memory-growth" or (verdict.kind != "fine" and self.totals.persists(verdict.kind)):
                notices.bottleneck(verdict)
        self.history(record)
        self.emitter.deliver(record)  # inline: every sink gets the record before a SinkError can leave
        return record

    def summary(self, total_iterations: int, fixes: Callable[[str], list[str]]) -> RunSummary:
        """The run's time split over every published window after the warm-up, with ``fixes`` per bottleneck."""
        return self.totals.summary(thresholds=self.options.thresholds, total_iterations=total_iterations,
                                   fixes=fixes)
