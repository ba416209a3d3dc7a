"""What the hardware did in a window, read on report iterations only: probes and the host's own.

A probe is a callable returning some of the record's hardware fields by name (``None`` for what it
cannot read). The listener calls its probes once per report and never on other iterations. The
host probe here reads the training process's CPU use and RSS and its child processes' CPU use
(a DataLoader's workers) through ``psutil``, an optional dependency: without it there is no probe,
and the fields stay ``None``. ``trainperf.torch`` adds the CUDA allocator's and NVML's probes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ._host_memory import HostMemory, own_memory_mb

__all__: list[str] = []

Probe = Callable[[], Mapping[str, "float | None"]]

#: The record's fields that probes fill, in the schema's order.
HARDWARE_FIELDS = (
    "cuda_allocated_max_mb",
    "cuda_reserved_max_mb",
    "cuda_allocated_floor_mb",
    "cuda_allocated_max_pct",
    "cuda_reserved_max_pct",
    "cuda_headroom_mb",
    "cuda_fragmentation_mb",
    "cuda_inactive_split_pct",
    "cuda_ooms",
    "gpu_utilization_pct",
    "gpu_memory_used_mb",
    "cpu_pct",
    "workers_cpu_pct",
    "rss_mb",
    "rss_floor_mb",
    "rss_peak_mb",
    "rss_headroom_mb",
    "workers_memory_mb",
)

#: Mean CPU use of the loader's workers, in percent of one core each, from which they count as
#: busy decoding (below a tenth of it they count as idle, waiting for I/O).
WORKERS_BUSY_PCT = 80.0
WORKERS_IDLE_PCT = 10.0

_MB = 1024.0 * 1024.0


class Throttled:
    """A probe read at most every ``min_interval_s`` seconds: a call sooner than that repeats the
    last reading.

    Args:
        read: the probe behind it.
        min_interval_s: seconds between two readings.
        clock: monotonic clock, injectable for tests.
    """

    def __init__(self, read: Probe, *, min_interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if min_interval_s < 0:
            raise ValueError(f"min_interval_s must not be negative, got {min_interval_s!r}")
        self._read = read
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._read_at: float | None = None
        self._last: Mapping[str, float | None] = {}

    def __call__(self) -> Mapping[str, float | None]:
        now = self._clock()
        if self._read_at is not None and now - self._read_at < self._min_interval_s:
            return self._last
        self._last = self._read()
        self._read_at = now
        return self._last


class ProcessProbe:
    """CPU use of this process and of its children (DataLoader workers), and the memory of both.

    CPU shares are over the time since the previous reading: the first one of a process gives 0.
    CPU readings and the headroom are taken at most every ``min_interval_s`` seconds (each costs tens
    of microseconds of ``/proc`` reads); a report sooner than that repeats them. The resident memory and
    its peak are read at every report (a few microseconds), so a floor that rises is seen window by
    window. The workers' own memory is read at most every ``workers_memory_s`` seconds (a walk of their
    page tables). Children are looked up again at most every ``rescan_s`` seconds (listing them walks
    every process of the machine).

    Args:
        process: a ``psutil.Process`` (default: this one).
        min_interval_s: seconds between two readings.
        rescan_s: seconds between two look-ups of the children.
        clock: monotonic clock, injectable for tests.
        workers: the process ids of the loader's workers (asked at each look-up); children that are
            not among them (a ``subprocess``, Spark's JVM) are no workers. ``None``: every child is.
        memory: this process's memory readings (its peak, its headroom and its workers' own memory
            are read only with it); ``None``: the resident memory from ``process`` alone.
        workers_memory_s: seconds between two readings of the workers' own memory.
    """

    def __init__(
        self,
        process: Any,
        *,
        min_interval_s: float = 1.0,
        rescan_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        workers: Callable[[], Collection[int]] | None = None,
        memory: HostMemory | None = None,
        workers_memory_s: float = 10.0,
    ) -> None:
        self._worker_pids = workers
        self._memory = memory
        self._workers_memory = Throttled(self._read_workers_memory, min_interval_s=workers_memory_s, clock=clock)
        if rescan_s < 0:
            raise ValueError(f"rescan_s must not be negative, got {rescan_s!r}")
        self._throttled = Throttled(self._read, min_interval_s=min_interval_s, clock=clock)
        self._process = process
        self._rescan_s = rescan_s
        self._clock = clock
        self._children: dict[int, Any] = {}
        self._scanned: float | None = None
        process.cpu_percent(None)  # the first call starts the interval

    def _workers(self) -> list[Any]:
        now = self._clock()
        if self._scanned is None or now - self._scanned >= self._rescan_s:
            self._scanned = now
            pids = self._worker_pids() if self._worker_pids is not None else None
            # Listing the children reads every process of the machine (milliseconds to tens of them on a
            # busy one): not when the loader has no workers to find, a loop without a DataLoader's workers
            children = self._process.children(recursive=False) if pids is None or pids else ()
            found = {child.pid: child for child in children}
            if pids is not None:
                found = {pid: child for pid, child in found.items() if pid in pids}
            for pid, child in found.items():
                if pid not in self._children:
                    self._children[pid] = child
                    child.cpu_percent(None)
            for pid in [pid for pid in self._children if pid not in found]:
                del self._children[pid]
        return list(self._children.values())

    def __call__(self) -> Mapping[str, float | None]:
        out = dict(self._throttled())
        memory = self._memory
        if memory is None:
            return out
        rss = out["rss_mb"] = memory.rss_mb()
        out["rss_floor_mb"] = memory.floor_mb(rss)
        out["rss_peak_mb"] = memory.peak_mb()
        return out

    def _read_workers_memory(self) -> dict[str, float | None]:
        shares = [own_memory_mb(pid, child) for pid, child in list(self._children.items())]
        known = [share for share in shares if share is not None]
        return {"workers_memory_mb": sum(known) if known else None}

    def _read(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {"cpu_pct": float(self._process.cpu_percent(None))}
        if self._memory is not None:
            out["rss_headroom_mb"] = self._memory.headroom_mb()
        else:  # no readings of its own: the resident memory with the CPU's
            out["rss_mb"] = self._process.memory_info().rss / _MB
        shares: list[float] = []
        for child in self._workers():
            try:
                shares.append(float(child.cpu_percent(None)))
            except Exception:  # noqa: BLE001 - a worker that ended between two reads
                self._children.pop(getattr(child, "pid", -1), None)
        out["workers_cpu_pct"] = sum(shares) / len(shares) if shares else None
        if self._memory is not None:
            out.update(self._workers_memory() if self._children else {"workers_memory_mb": None})
        return out


def process_probe(workers: Callable[[], Collection[int]] | None = None) -> Probe | None:
    """The host probe for this process, or ``None`` when ``psutil`` is not installed.

    Args:
        workers: the process ids of the loader's workers (see :class:`ProcessProbe`).
    """
    try:
        import psutil
    except ImportError:
        return None
    process = psutil.Process()
    return ProcessProbe(process, workers=workers, memory=HostMemory(process, psutil.virtual_memory))


def read_probes(probes: list[Probe], failed: Callable[[str], None]) -> dict[str, float | None]:
    """Every probe's figures merged (a later probe's value wins over a ``None``).

    Args:
        probes: the probes to read.
        failed: called with a message for each probe that raised or returned something else than
            a mapping of known fields to numbers; that probe is left out of this window.
    """
    out: dict[str, float | None] = {}
    for probe in probes:
        try:
            values = probe()
            for name, value in values.items():
                if name not in HARDWARE_FIELDS:
                    raise ValueError(f"unknown field {name!r}")
                if value is not None:
                    out[name] = float(value)
                else:
                    out.setdefault(name, None)
        except Exception as exc:  # noqa: BLE001 - reading the hardware must never stop training
            failed(f"hardware probe {probe!r} failed and is left out of this window: {exc!r}")
    return out


def worker_tips(workers_cpu_pct: float | None) -> list[str]:
    """What the loader's workers' CPU use says about an input-bound run.

    Args:
        workers_cpu_pct: their mean CPU use, percent of one core each (``None``: no workers seen).
    """
    if workers_cpu_pct is None:
        return []
    if workers_cpu_pct >= WORKERS_BUSY_PCT:
        return [
            f"the loader's workers use {workers_cpu_pct:.0f}% CPU each: decoding and augmenting are the cost; "
            "add workers (num_workers), or pre-save decoded batches with trainperf.data.presave()"
        ]
    if workers_cpu_pct <= WORKERS_IDLE_PCT:
        return [
            f"the loader's workers use only {workers_cpu_pct:.0f}% CPU each: they wait for I/O; read from "
            "faster storage, cache the data set in memory or local disk, or pre-fetch more (prefetch_factor)"
        ]
    return []
