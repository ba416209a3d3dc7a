"""What the host reads of a window when it is reported: Python's garbage collections (pauses and
counts) and any other collector, the hardware probes, and the CPU use of the process and its loader
workers. It knows nothing of the listener; the listener calls it under its lock."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection, Sequence

from ..base import check_callable, check_int, usable_cores
from ..records import CpuLoad, GCStat, WindowFigures
from ._collections import Collections, Collector
from ._gc import GCMonitor
from ._hardware import Probe, process_probe, read_probes

__all__: list[str] = []


def _nothing() -> None:
    return None


class HostReadings:
    """The host's readings of each window.

    Args:
        clock: the listener's clock, which GC pauses are timed on.
        report_gc: time Python's collections through ``gc.callbacks`` (installed here, removed on
            :meth:`close` or when this object is dropped).
        report_hardware: read this process's CPU use and RSS and its loader workers' CPU use.
        skip_gc: whether a collection starting now is trainperf's own (not the user's).
    """

    def __init__(self, clock: Callable[[], float], *, report_gc: bool, report_hardware: bool,
                 skip_gc: Callable[[], bool]) -> None:
        self.gc = GCMonitor(clock, skip=skip_gc) if report_gc else None
        if self.gc is not None:
            self.gc.install()
        # Dropped without close(), it leaves no gc.callbacks entry behind.
        self._gc_finalizer = weakref.finalize(self, self.gc.uninstall if self.gc is not None else _nothing)
        self.collections = Collections(self.gc)
        self.probes: list[Probe] = []
        self.loader_workers: Callable[[], Collection[int]] = tuple  # no loader workers known
        if report_hardware:
            probe = process_probe(lambda: self.loader_workers())
            if probe is not None:
                self.probes.append(probe)
        self.cores = usable_cores()
        self.step_threads: int | None = None

    def add_collector(self, name: str, read: Collector) -> None:
        self.collections.add_collector(name, read)

    def add_probe(self, probe: Probe) -> None:
        self.probes.append(check_callable("probe", probe, "a callable returning a mapping of figures"))

    def set_loader_workers(self, pids: Callable[[], Collection[int]]) -> None:
        self.loader_workers = check_callable("pids", pids, "a callable returning process ids")

    def set_step_threads(self, threads: int | None) -> None:
        self.step_threads = check_int("threads", threads, minimum=1, optional=True)

    def restart(self) -> None:
        """Count collections from now (training starts)."""
        self.collections.restart()

    def forget_since(self, start: float) -> None:
        """Collections since ``start`` on the clock were in time left out: not the window's."""
        if self.gc is not None:
            self.gc.forget_since(start)

    def take_pauses(self) -> Sequence[tuple[float, float, int]]:
        """Python's GC pauses since the last take, ``(start, seconds, generation)``."""
        return self.collections.take_pauses()

    def read_collections(self, say_once: Callable[[str], None]) -> tuple[GCStat, ...]:
        return self.collections.read(say_once)[0]

    def read_hardware(self, say_once: Callable[[str], None]) -> dict[str, float | None]:
        return read_probes(self.probes, say_once) if self.probes else {}

    def cpu_load(self, hardware: dict[str, float | None], figures: WindowFigures) -> CpuLoad | None:
        """The window's CPU use, when the host probe read it and the loader has workers."""
        process, worker = hardware.get("cpu_pct"), hardware.get("workers_cpu_pct")
        if process is None or worker is None:
            return None
        workers = len(self.loader_workers()) or 1
        compute_pct = 100.0 * figures.compute_s / figures.window_s if figures.window_s > 0 else None
        return CpuLoad(process, worker * workers, self.cores, self.step_threads, compute_pct)

    @property
    def pauses(self) -> list[tuple[float, float, int]] | None:
        """The GC pauses not yet reported (see :attr:`trainperf.PerformanceListener.gc_pauses`)."""
        return self.gc.pauses if self.gc is not None else None

    def close(self) -> None:
        """Remove the ``gc.callbacks`` entry (idempotent)."""
        self._gc_finalizer.detach()
        if self.gc is not None:
            self.gc.uninstall()
