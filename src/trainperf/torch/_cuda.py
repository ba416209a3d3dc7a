"""CUDA's device timeline without a synchronisation: two events per iteration, read once completed."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from ..core import Collector, Probe

__all__ = ["CudaEvents", "CudaTimeline", "CurrentStream"]

_MB = 1024.0 * 1024.0


def _cuda_device(device: Any) -> torch.device:
    """``device`` as a CUDA ``torch.device`` with its index; a ``ValueError`` for anything else."""
    if not isinstance(device, torch.device) or device.type != "cuda":
        raise ValueError(f"device must be a CUDA torch.device, got {device!r}")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


class CurrentStream:
    """A device's current stream, where the model's work is queued now (call it).

    Looked up again only when the current stream's raw handle changes (a ``torch.cuda.stream``
    context, or the autograd engine's thread, which runs with the stream of the forward pass):
    ``torch.cuda.current_stream`` costs several microseconds of Python per call.

    Args:
        device: the CUDA device, with its index.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._raw_stream: int | None = None
        self._stream: torch.cuda.Stream | None = None

    def __call__(self) -> torch.cuda.Stream:
        raw = _raw_stream(self.device.index)
        if raw is None or raw != self._raw_stream or self._stream is None:
            self._stream = torch.cuda.current_stream(self.device)
            self._raw_stream = raw
        return self._stream


class CudaEvents:
    """Timing events on a CUDA device's current stream, recycled: the event source of the
    collective timing on CUDA (see :class:`trainperf.torch._device_phases.EventSource`). Nothing
    here waits for the device: :meth:`done` is ``Event.query()``.

    Args:
        device: the CUDA device the model runs on.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = _cuda_device(device)
        self._pool: list[torch.cuda.Event] = []
        self._stream = CurrentStream(self.device)
        # C calls, without a Python frame of ours around them: a few of each per iteration
        self.done: Callable[[torch.cuda.Event], bool] = _QUERY
        """Whether the device has reached the event: ``Event.query()``, which never waits."""
        self.release: Callable[[torch.cuda.Event], None] = self._pool.append
        """Give an event back, to be recorded again."""

    def record(self) -> torch.cuda.Event:
        pool = self._pool
        event = pool.pop() if pool else torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        _RECORD(event, self._stream())
        return event

    def elapsed_s(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return float(_ELAPSED(start, end)) / 1000.0


class CudaTimeline:
    """The :class:`~trainperf.DeviceTimeline` of a CUDA device.

    Records a CUDA event on the device's current stream when an iteration starts (its first batch
    delivered, or its first forward when no loader is seen)
    (:meth:`begin`) and one when its optimizer step ends (:meth:`end`). Nothing here waits for the
    device while training: :meth:`ready` asks an event whether it has completed
    (``Event.query()``), and :meth:`take` reads elapsed times only between completed events.
    Events are recycled, so a run allocates about two windows' worth.

    Args:
        device: the CUDA device the model runs on.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device = _cuda_device(device)
        self._pool: list[torch.cuda.Event] = []
        self.current_stream = CurrentStream(device)
        self._ended: deque[tuple[torch.cuda.Event | None, torch.cuda.Event]] = deque()
        self._begin: torch.cuda.Event | None = None
        self._origin: torch.cuda.Event | None = None

    def _record(self) -> torch.cuda.Event:
        event = self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        _RECORD(event, self.current_stream())
        return event

    def start(self) -> None:
        """Forget what was recorded; the first window's device time starts now."""
        for begin, end in self._ended:
            if begin is not None:
                self._pool.append(begin)
            self._pool.append(end)
        self._ended.clear()
        if self._begin is not None:
            self._pool.append(self._begin)
            self._begin = None
        if self._origin is not None:
            self._pool.append(self._origin)
        self._origin = self._record()

    def begin(self) -> None:
        """The iteration's first forward starts now (a second call in one iteration is ignored)."""
        if self._begin is None:
            self._begin = self._record()

    def end(self) -> None:
        """The iteration's optimizer step ended now."""
        self._ended.append((self._begin, self._record()))
        self._begin = None

    def ready(self, count: int) -> bool:
        """Whether the oldest ``count`` ended iterations have completed (a non-blocking query)."""
        if count > len(self._ended):
            return False
        return bool(_QUERY(self._ended[count - 1][1]))

    def take(self, count: int) -> list[tuple[float | None, float]]:
        """``(begin, end)`` seconds since the previous window's last step end, for the oldest
        ``count`` ended iterations, which must have completed (see :meth:`ready`)."""
        if not self.ready(count):
            raise ValueError(f"count must be at most the completed iterations, got {count!r}")
        origin = self._origin
        if origin is None:
            raise RuntimeError("CudaTimeline.start() was not called")
        out: list[tuple[float | None, float]] = []
        used: list[torch.cuda.Event] = [origin]
        end = origin
        elapsed = _ELAPSED
        for _ in range(count):
            begin, end = self._ended.popleft()
            began = None if begin is None else elapsed(origin, begin) / 1000.0
            out.append((began, elapsed(origin, end) / 1000.0))
            if begin is not None:
                used.append(begin)
            used.append(end)
        used.pop()  # the last end is the next window's origin
        self._origin = end
        self._pool.extend(used)
        return out

    def wait(self) -> None:
        """Wait once for everything queued on the device (end of training)."""
        torch.cuda.synchronize(self.device)

    def stage(self, value: Any) -> Any:
        """Start copying a CUDA tensor to pinned host memory without blocking; other values as they are."""
        if isinstance(value, torch.Tensor) and value.is_cuda:
            host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            host.copy_(value.detach(), non_blocking=True)
            return host
        return value


# The C methods of torch's event type, called without the Python wrappers of ``torch.cuda.Event``
# (``record`` there looks the current stream up when none is given, and each wrapper adds a frame
# to a call made twice per iteration).
_EVENT_BASE = torch.cuda.Event.__mro__[1]
_RECORD: Callable[[Any, Any], None] = getattr(_EVENT_BASE, "record", torch.cuda.Event.record)
_QUERY: Callable[[Any], bool] = getattr(_EVENT_BASE, "query", torch.cuda.Event.query)
_ELAPSED: Callable[[Any, Any], float] = getattr(_EVENT_BASE, "elapsed_time", torch.cuda.Event.elapsed_time)

#: torch's own reader of the current stream's handle; absent from some builds.
_CURRENT_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _raw_stream(index: int | None) -> int | None:
    """The handle of the current stream of device ``index`` (one C call), or ``None`` where torch
    does not offer it."""
    if _CURRENT_RAW_STREAM is None or index is None:
        return None
    try:
        return int(_CURRENT_RAW_STREAM(index))
    except Exception:  # noqa: BLE001 - then the stream is looked up each time
        return None


def _allocator_stats(device: torch.device) -> dict[str, Any]:
    """The caching allocator's counters, nested as the allocator keeps them. ``torch.cuda.memory_stats``
    (and ``max_memory_allocated``, which reads it) flattens and sorts all of them in Python on every
    call, which costs far more than the few figures read here."""
    return torch.cuda.memory_stats_as_nested_dict(device)


class AllocatorCounters:
    """The caching allocator's counters, read at most every ``min_interval_s`` seconds and once per
    report for both of their readers.

    A read builds a nested dict of about a hundred counters in C++ (tens of microseconds on a busy
    training thread), and at a report every few milliseconds the peaks would say little more than
    one read a second does. The retries collector reads first in a report (collectors come before
    probes) and leaves a fresh read for the memory probe, which takes it once; between two fresh
    reads the collector sees the same cumulative count (no new retries yet: they are counted at
    the next read) and the probe repeats its last figures. The collector also reads as training
    starts (its baseline), which the probe never takes: at its first report, with nothing to
    repeat, the probe reads anew however recent that read is.

    Args:
        device: the CUDA device.
        min_interval_s: seconds between two reads of the counters (0: every time).
        clock: monotonic clock, injectable for tests.
    """

    def __init__(
        self, device: torch.device, *, min_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if min_interval_s < 0:
            raise ValueError(f"min_interval_s must not be negative, got {min_interval_s!r}")
        self.device = device
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._read_at: float | None = None
        self._last: dict[str, Any] = {}
        self._left: dict[str, Any] | None = None
        self.first: dict[str, Any] | None = None  # the first read (the retries collector's baseline at set-up)

    def _fresh(self, *, anyway: bool = False) -> dict[str, Any] | None:
        """A new read of the counters, or ``None`` when the last one is too recent (unless ``anyway``)."""
        now = self._clock()
        if not anyway and self._read_at is not None and now - self._read_at < self._min_interval_s:
            return None
        self._read_at = now
        self._last = stats = _allocator_stats(self.device)
        if self.first is None:
            self.first = stats
        return stats

    def read(self) -> dict[str, Any]:
        """The counters (the last read when it is too recent for a new one); a new read is left for
        one :meth:`take`."""
        stats = self._fresh()
        self._left = stats  # never a read left from an earlier call (one outside a report, say)
        return stats if stats is not None else self._last

    def take(self, *, first: bool = False) -> dict[str, Any] | None:
        """The new read left by :meth:`read` in this report, else a new one of its own, or ``None``
        when the last read is too recent (nothing new to say). ``first``: the caller has no figures
        to repeat yet, so it gets a new read however recent the last (the collector's at the start)."""
        stats, self._left = self._left, None
        return stats if stats is not None else self._fresh(anyway=first)


def _peak_mb(stats: dict[str, Any], name: str) -> float:
    return float(stats.get(name, {}).get("all", {}).get("peak", 0)) / _MB


def _current_mb(stats: dict[str, Any], name: str) -> float:
    return float(stats.get(name, {}).get("all", {}).get("current", 0)) / _MB


def device_capacity_mb(device: torch.device) -> float | None:
    """The device's memory in MB, ``None`` when it cannot be read."""
    try:
        return float(torch.cuda.get_device_properties(device).total_memory) / _MB
    except Exception:  # noqa: BLE001 - no capacity, no shares
        return None


def memory_figures(stats: dict[str, Any], capacity_mb: float | None) -> dict[str, float | None]:
    """The record's CUDA memory figures from one read of the allocator's nested counters (its peaks since
    they were last reset, and what it holds now, between two steps)."""
    allocated_peak, reserved_peak = _peak_mb(stats, "allocated_bytes"), _peak_mb(stats, "reserved_bytes")
    allocated, reserved = _current_mb(stats, "allocated_bytes"), _current_mb(stats, "reserved_bytes")
    inactive = _current_mb(stats, "inactive_split_bytes")
    cap = capacity_mb if capacity_mb is not None and capacity_mb > 0 else None
    return {
        "cuda_allocated_max_mb": allocated_peak,
        "cuda_reserved_max_mb": reserved_peak,
        "cuda_allocated_floor_mb": allocated,
        "cuda_allocated_max_pct": 100.0 * allocated_peak / cap if cap is not None else None,
        "cuda_reserved_max_pct": 100.0 * reserved_peak / cap if cap is not None else None,
        "cuda_headroom_mb": max(0.0, cap - allocated_peak) if cap is not None else None,
        "cuda_fragmentation_mb": max(0.0, reserved - allocated),
        "cuda_inactive_split_pct": 100.0 * inactive / reserved if reserved > 0 else None,
    }


def memory_probe(device: torch.device, counters: AllocatorCounters | None = None) -> Probe:
    """The caching allocator's figures (see :func:`memory_figures`; host-side counters: no
    synchronisation), its peaks reset at each read, and the out-of-memory errors it raised since the
    read before; read at most once a second (see :class:`AllocatorCounters`), a report in between
    repeats the last figures (and counts no new errors). The first report reads them whatever the time
    since the retries collector's reads at the start: it has no figures to repeat.

    Args:
        device: the CUDA device.
        counters: the counters shared with :func:`alloc_retries_reader` (default: its own).
    """
    shared = counters if counters is not None else AllocatorCounters(device)
    capacity = device_capacity_mb(device)
    last: dict[str, float | None] = {}
    ooms_seen: int | None = None

    def read() -> dict[str, float | None]:
        nonlocal ooms_seen
        stats = shared.take(first=not last)
        if stats is None:
            return {**last, "cuda_ooms": 0.0}  # a copy: a caller's change cannot alter the next report
        last.update(memory_figures(stats, capacity))
        torch.cuda.reset_peak_memory_stats(device)
        if ooms_seen is None:  # the errors before training (a batch-size search) are not the run's
            ooms_seen = int((shared.first or stats).get("num_ooms", 0))
        ooms = int(stats.get("num_ooms", 0))
        new, ooms_seen = max(0, ooms - ooms_seen), ooms
        return {**last, "cuda_ooms": float(new)}

    return read


def alloc_retries_reader(device: torch.device, counters: AllocatorCounters | None = None) -> tuple[str, Collector]:
    """A collector for the caching allocator's retries (its "full GC": freeing cached blocks and retrying).

    Args:
        device: the CUDA device.
        counters: the counters shared with :func:`memory_probe` (default: its own).
    """
    shared = counters if counters is not None else AllocatorCounters(device)

    def read() -> tuple[int, float | None]:
        return int(shared.read().get("num_alloc_retries", 0)), None

    return "cuda_alloc_retries", read
