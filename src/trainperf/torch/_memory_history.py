"""The CUDA caching allocator's history, recorded for the snapshot an out-of-memory error leaves.

With its history on, the allocator keeps the Python stack of every live block and a ring of its
last alloc and free events: a snapshot then says which line of the user's code holds the memory.
That costs a few microseconds per allocation, so by default it starts only once memory runs short
(a report's reserved peak at :data:`SHORT_SHARE` of the device's memory). The ring holds at most
:data:`HISTORY_ENTRIES` events. A history someone else turned on is left as it is: trainperf
neither restarts nor stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..core import PerformanceListener

__all__ = ["HISTORY_ENTRIES", "SHORT_SHARE", "MemoryHistory"]

#: The most alloc and free events the allocator keeps (a ring: the newest win). Each costs a few KB
#: of host memory with its stack, so a snapshot stays in the hundreds of MB at worst.
HISTORY_ENTRIES = 100_000

#: ``memory_history="when_short"`` starts the history at the first report whose reserved peak
#: reaches this share of the device's memory.
SHORT_SHARE = 0.9

Probe = Callable[[], Mapping[str, Any]]


def history_enabled() -> bool:
    """Whether the allocator records its history now (``False`` where torch cannot say)."""
    enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    return bool(enabled()) if enabled is not None else False


def record_history(on: bool) -> None:
    """Turn the allocator's history on (Python stacks, a ring of :data:`HISTORY_ENTRIES`) or off."""
    memory: Any = torch.cuda.memory
    if on:
        memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=HISTORY_ENTRIES)
    else:
        memory._record_memory_history(enabled=None)


class MemoryHistory:
    """The allocator's history for one training on a CUDA ``device``, as ``mode`` asks (see the
    ``memory_history`` option): :meth:`start` at set-up, :meth:`watch` on the memory probe for
    ``"when_short"``, :meth:`stop` at the training's end.

    Attributes:
        since: ``(wall time, iteration)`` at which trainperf started the history, else ``None``.
        theirs: the history was on before the training began (someone else's: left alone).
    """

    def __init__(self, listener: PerformanceListener, device: torch.device, mode: str) -> None:
        self.mode = mode
        self._listener = listener
        self.since: tuple[float, int] | None = None
        self.theirs = False
        self._ours = False  # trainperf turned it on, and turns it off at the end
        self._limit_mb = float("inf")
        if mode == "when_short":  # read once: the device's memory does not change
            total = torch.cuda.get_device_properties(device).total_memory
            self._limit_mb = SHORT_SHARE * total / 2**20

    @property
    def recorded(self) -> bool:
        """Whether the history is being recorded (by trainperf or by someone before it)."""
        return self.theirs or self._ours

    def start(self) -> None:
        """Set-up: with ``"start"``, record from now on; in any mode, note a history already on."""
        if self.mode == "never":
            return
        self.theirs = history_enabled()
        if self.mode == "start":
            self._begin()

    def _begin(self) -> None:
        if self.recorded or self.since is not None:  # on already, or stopped at the training's end
            return
        record_history(True)
        self._ours = True
        self.since = (self._listener.wall_clock(), self._listener.iteration)

    def watch(self, probe: Probe) -> Probe:
        """``probe`` (the allocator's peaks, read at reports), starting the history at the first reading
        whose ``cuda_reserved_max_mb`` reaches the limit; ``probe`` itself in the other modes."""
        if self.mode != "when_short":
            return probe
        limit = self._limit_mb

        def read() -> Mapping[str, Any]:
            figures = probe()
            if self.since is None and (figures.get("cuda_reserved_max_mb") or 0.0) >= limit:
                self._begin()
            return figures

        return read

    def stop(self) -> None:
        """The training ended: the history trainperf started stops (one that was on before stays)."""
        if self._ours:
            self._ours = False
            record_history(False)
