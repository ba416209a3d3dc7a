"""A run's memory over its windows, from their records: the peaks, the least headroom, the allocator's
errors and retries, and the last growth judged. What the summary says of memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._record import PerformanceRecord

__all__: list[str] = []


def _most(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class MemoryPeaks:
    """The run's memory, window by window (the warm-up window included: a peak is a peak wherever it is).

    Attributes:
        allocated_mb, allocated_pct: the highest CUDA allocated peak, and its share of the device.
        reserved_mb, reserved_pct: the highest reserved peak, and its share.
        headroom_mb: the least headroom left above an allocated peak.
        ooms: the allocator's out-of-memory errors in all windows.
        retries: its retries (its cache freed and the allocation tried again).
        rss_peak_mb: the process's highest resident memory.
        workers_mb: the loader workers' highest memory.
        growth: the reason of the last window judged ``memory-growth``, ``None`` when none was.
    """

    allocated_mb: float | None = None
    allocated_pct: float | None = None
    reserved_mb: float | None = None
    reserved_pct: float | None = None
    headroom_mb: float | None = None
    ooms: int = 0
    retries: int = 0
    rss_peak_mb: float | None = None
    workers_mb: float | None = None
    growth: str | None = None

    def add(self, record: PerformanceRecord) -> None:
        """Count a window's memory figures."""
        self.allocated_mb = _most(self.allocated_mb, record.cuda_allocated_max_mb)
        self.allocated_pct = _most(self.allocated_pct, record.cuda_allocated_max_pct)
        self.reserved_mb = _most(self.reserved_mb, record.cuda_reserved_max_mb)
        self.reserved_pct = _most(self.reserved_pct, record.cuda_reserved_max_pct)
        if record.cuda_headroom_mb is not None:
            least = self.headroom_mb
            self.headroom_mb = record.cuda_headroom_mb if least is None else min(least, record.cuda_headroom_mb)
        self.ooms += record.cuda_ooms or 0
        self.retries += sum(stat.count for stat in record.gc if stat.name == "cuda_alloc_retries")
        self.rss_peak_mb = _most(self.rss_peak_mb, _most(record.rss_peak_mb, record.rss_mb))
        self.workers_mb = _most(self.workers_mb, record.workers_memory_mb)
        if record.verdict is not None and record.verdict.kind == "memory-growth":
            self.growth = record.verdict.reason

    def to_dict(self) -> dict[str, Any]:
        return {"allocated_mb": self.allocated_mb, "allocated_pct": self.allocated_pct,
                "reserved_mb": self.reserved_mb, "reserved_pct": self.reserved_pct, "headroom_mb": self.headroom_mb,
                "ooms": self.ooms, "retries": self.retries, "rss_peak_mb": self.rss_peak_mb,
                "workers_mb": self.workers_mb, "growth": self.growth}

    def lines(self) -> list[str]:
        """The summary's lines on memory (none when nothing was read)."""
        out: list[str] = []
        if self.allocated_mb is not None:
            text = f"  CUDA memory: allocated peak {self.allocated_mb:,.0f} MB"
            if self.allocated_pct is not None:
                text += f" ({self.allocated_pct:.0f}% of the device)"
            if self.reserved_mb is not None:
                text += f", reserved peak {self.reserved_mb:,.0f} MB"
                text += f" ({self.reserved_pct:.0f}%)" if self.reserved_pct is not None else ""
            if self.headroom_mb is not None:
                text += f"; least headroom {self.headroom_mb:,.0f} MB"
            if self.retries or self.ooms:
                text += f"; {self.retries} allocator retries, {self.ooms} out-of-memory errors caught"
            out.append(text)
        if self.rss_peak_mb is not None:
            text = f"  host memory: resident peak {self.rss_peak_mb:,.0f} MB"
            if self.workers_mb is not None:
                text += f", loader workers {self.workers_mb:,.0f} MB"
            out.append(text)
        if self.growth is not None:
            out.append(f"  memory grew: {self.growth}")
        return out
