"""The run's totals: sums over the reported windows after the warm-up, and the summary built from them."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

from ..records import MemoryPeaks, PerformanceRecord, RunSummary, Thresholds, build_summary, persists

__all__: list[str] = []


class RunTotals:
    """Sums of the windows after the warm-up one, for :meth:`summary`.

    ``data_free_s`` is what free data would have removed (the data wait; on CUDA, the device's idle
    time for it), ``gc_free_s`` the same for GC pauses; ``device_wall_s`` is the device time of the
    windows, on CUDA only.
    """

    __slots__ = ("wall_s", "etl_s", "gc_s", "other_s", "data_free_s", "gc_free_s", "device_wall_s",
                 "device_idle_s", "samples", "iterations", "verdict_counts", "tokens", "tokens_wall_s",
                 "flops", "flops_wall_s", "peak_flop_s", "memory")

    def __init__(self) -> None:
        self.wall_s = 0.0
        self.etl_s = 0.0
        self.gc_s = 0.0
        self.other_s = 0.0
        self.data_free_s = 0.0
        self.gc_free_s = 0.0
        self.device_wall_s: float | None = None
        self.device_idle_s = 0.0
        self.samples = 0
        self.iterations = 0
        self.verdict_counts: dict[str, int] = {}
        self.tokens = 0  # over the windows that counted their tokens,
        self.tokens_wall_s = 0.0  # and their wall time
        self.flops = 0.0  # the FLOPs of the windows whose FLOPs per step are known,
        self.flops_wall_s = 0.0  # their wall time,
        self.peak_flop_s = 0.0  # and what their peak could have done in it (windows with a peak)
        self.memory = MemoryPeaks()  # every window's, the warm-up's too

    def add(
        self,
        record: PerformanceRecord,
        *,
        etl_s: float,
        other_s: float,
        gc_s: float,
        data_free_s: float,
        gc_free_s: float,
        device_window_s: float | None = None,
        device_idle_s: float = 0.0,
    ) -> None:
        """Count a window's record and its seconds; the warm-up window is left out (but for its memory)."""
        self.memory.add(record)
        if record.warmup:
            return
        self.data_free_s += data_free_s
        self.gc_free_s += gc_free_s
        if device_window_s is not None:
            self.device_wall_s = (self.device_wall_s or 0.0) + device_window_s
            self.device_idle_s += device_idle_s
        self.wall_s += record.window_s
        self.etl_s += etl_s
        self.other_s += other_s
        self.gc_s += gc_s
        self.samples += record.samples or 0
        self.iterations += record.window_iterations
        if record.tokens is not None:
            self.tokens += record.tokens
            self.tokens_wall_s += record.window_s
        if record.flops_per_step is not None and record.tflops_per_sec is not None:
            self.flops += record.flops_per_step * record.optimizer_steps
            self.flops_wall_s += record.window_s
            if record.mfu:
                self.peak_flop_s += 1e12 * record.tflops_per_sec / record.mfu * record.window_s
        if record.verdict is not None:
            kind = record.verdict.kind
            self.verdict_counts[kind] = self.verdict_counts.get(kind, 0) + 1

    def persists(self, kind: str) -> bool:
        """Whether ``kind`` was the verdict of enough windows after the warm-up to warn about."""
        counts = self.verdict_counts
        return persists(counts.get(kind, 0), sum(counts.values()))

    def summary(self, *, thresholds: Thresholds, total_iterations: int,
                fixes: Callable[[str], Sequence[str]]) -> RunSummary:
        return build_summary(
            wall_s=self.wall_s,
            etl_s=self.etl_s,
            gc_s=self.gc_s,
            other_s=self.other_s,
            iterations=self.iterations,
            samples=self.samples,
            verdict_counts=dict(self.verdict_counts),
            thresholds=thresholds,
            total_iterations=total_iterations,
            fixes=fixes,
            data_free_s=self.data_free_s,
            gc_free_s=self.gc_free_s,
            device_wall_s=self.device_wall_s,
            device_idle_s=self.device_idle_s,
            tokens=self.tokens,
            tokens_wall_s=self.tokens_wall_s,
            flops=self.flops,
            flops_wall_s=self.flops_wall_s,
            peak_flop_s=self.peak_flop_s,
            memory=copy.copy(self.memory),
        )
