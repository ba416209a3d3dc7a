"""CUDA timing without hidden synchronisation: events each iteration, read at the report."""

from __future__ import annotations

import torch

from .._listener import Collector

__all__ = ["CudaEventTimer"]


class CudaEventTimer:
    """Records a CUDA event at the end of every iteration; elapsed times are read only at a report,
    after a single synchronisation. Events are recycled, so a run allocates at most one window's worth.

    Args:
        device: the CUDA device the model runs on.
    """

    def __init__(self, device: torch.device) -> None:
        if not isinstance(device, torch.device) or device.type != "cuda":
            raise ValueError(f"device must be a CUDA torch.device, got {device!r}")
        self.device = device
        self._pool: list[torch.cuda.Event] = []
        self._events: list[torch.cuda.Event] = []
        self._start: torch.cuda.Event | None = None

    def _event(self) -> torch.cuda.Event:
        return self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def start(self) -> None:
        self._pool.extend(self._events)
        self._events = []
        self._start = self._event()
        self._start.record()

    def mark(self) -> None:
        event = self._event()
        event.record()
        self._events.append(event)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def durations(self) -> list[float]:
        out: list[float] = []
        prev = self._start
        for event in self._events:
            if prev is not None:
                out.append(prev.elapsed_time(event) / 1000.0)
            prev = event
        if self._start is not None:
            self._pool.append(self._start)
        self._start = self._events.pop() if self._events else None
        self._pool.extend(self._events)
        self._events = []
        return out


def alloc_retries_reader(device: torch.device) -> tuple[str, Collector]:
    """A collector for the caching allocator's retries (its "full GC": freeing cached blocks and retrying)."""

    def read() -> tuple[int, float | None]:
        return int(torch.cuda.memory_stats(device).get("num_alloc_retries", 0)), None

    return "cuda_alloc_retries", read
