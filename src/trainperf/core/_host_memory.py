"""The host's memory as the records see it: the training process's resident memory and its peak, what it
can still grow by, and a loader worker's own share. Read on reports only; each read is a few
microseconds (``/proc`` and ``getrusage``) except a worker's share (a walk of its page tables, about a
third of a millisecond per GB), which the caller reads seldom."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from typing import Any

__all__: list[str] = []

_MB = 1024.0 * 1024.0
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: ``ru_maxrss`` is in kB on Linux and in bytes on macOS.
_MAXRSS_UNIT = 1.0 if sys.platform == "darwin" else 1024.0
#: A cgroup's limit at or above this is no limit (cgroup v1 writes 2**63 rounded to pages).
_NO_LIMIT = 2**60


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _malloc_free_reader() -> Callable[[], int] | None:
    """The bytes the C allocator holds free (glibc's ``mallinfo2().fordblks``, every arena summed), or
    ``None`` where it cannot say (another C library; glibc before 2.33)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    function.argtypes = []
    return lambda: int(function().fordblks)


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as file:
            return file.read().decode("ascii", "replace")
    except OSError:
        return None


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() else None


class HostMemory:
    """Readings of this process's memory.

    Args:
        process: a ``psutil.Process`` (this one, or another in tests), read where ``/proc`` is not.
        virtual_memory: ``psutil.virtual_memory`` (the machine's available memory).
        cgroup_root: where the cgroup file system is mounted.
    """

    def __init__(self, process: Any, virtual_memory: Any = None, *, cgroup_root: str = "/sys/fs/cgroup") -> None:
        self._process = process
        self._virtual_memory = virtual_memory
        self._statm: int | None = None
        if getattr(process, "pid", None) == os.getpid():
            try:
                self._statm = os.open("/proc/self/statm", os.O_RDONLY)
            except OSError:
                self._statm = None
        self._cgroup = self._find_cgroup(cgroup_root)
        self._malloc_free = _malloc_free_reader() if self._statm is not None else None

    def close(self) -> None:
        if self._statm is not None:
            try:
                os.close(self._statm)
            except OSError:
                pass
            self._statm = None

    def __del__(self) -> None:
        self.close()

    def rss_mb(self) -> float:
        """The resident memory now."""
        if self._statm is not None:
            try:
                return int(os.pread(self._statm, 256, 0).split()[1]) * _PAGE / _MB
            except (OSError, IndexError, ValueError):
                pass
        return float(self._process.memory_info().rss) / _MB

    def floor_mb(self, rss_mb: float) -> float:
        """What of ``rss_mb`` is in use: less the memory the C allocator keeps free for later (freed
        tensors of varying sizes leave it more or less of that, window after window, which would hide a
        leak's steady rise in noise or look like one). The resident memory itself where that is unknown."""
        if self._malloc_free is None:
            return rss_mb
        try:
            return max(0.0, rss_mb - self._malloc_free() / _MB)
        except Exception:  # noqa: BLE001 - then the resident memory
            return rss_mb

    def peak_mb(self) -> float | None:
        """The highest resident memory since the process started (``None`` where unknown)."""
        try:
            import resource
        except ImportError:  # Windows
            return None
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _MAXRSS_UNIT / _MB

    def headroom_mb(self, rss_mb: float | None = None) -> float | None:
        """What the process can still grow by: the machine's available memory, or what its cgroup's limit
        leaves when that is less (``None`` where neither can be read)."""
        room: float | None = None
        if self._virtual_memory is not None:
            try:
                room = float(self._virtual_memory().available) / _MB
            except Exception:  # noqa: BLE001 - no reading, no headroom
                room = None
        if self._cgroup is not None:
            limit_path, usage_path = self._cgroup
            limit, usage = _number(_read(limit_path)), _number(_read(usage_path))
            if limit is not None and usage is not None and limit < _NO_LIMIT:
                left = max(0.0, (limit - usage) / _MB)
                room = left if room is None else min(room, left)
        return room

    @staticmethod
    def _find_cgroup(root: str) -> tuple[str, str] | None:
        """The limit and usage files of this process's memory cgroup (v2, else v1), ``None`` when none."""
        own = _read("/proc/self/cgroup") or ""
        for line in own.splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            hierarchy, controllers, path = parts
            if hierarchy == "0" and controllers == "":
                folder = os.path.join(root, path.lstrip("/"))
                limit, usage = os.path.join(folder, "memory.max"), os.path.join(folder, "memory.current")
                if os.path.exists(limit) and os.path.exists(usage):
                    return limit, usage
            elif "memory" in controllers.split(","):
                folder = os.path.join(root, "memory", path.lstrip("/"))
                limit = os.path.join(folder, "memory.limit_in_bytes")
                usage = os.path.join(folder, "memory.usage_in_bytes")
                if os.path.exists(limit) and os.path.exists(usage):
                    return limit, usage
        for folder in (root, os.path.join(root, "memory")):  # inside a container, the root is its own
            for limit, usage in (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")):
                if os.path.exists(os.path.join(folder, limit)) and os.path.exists(os.path.join(folder, usage)):
                    return os.path.join(folder, limit), os.path.join(folder, usage)
        return None


def own_memory_mb(pid: int, process: Any) -> float | None:
    """A process's own share of memory: its proportional set size (private pages, and its share of the
    pages it shares), from ``/proc/PID/smaps_rollup``; its resident memory where that cannot be read."""
    text = _read(f"/proc/{pid}/smaps_rollup")
    if text is not None:
        for line in text.splitlines():
            if line.startswith("Pss:"):
                fields = line.split()
                if len(fields) >= 2 and fields[1].isdigit():
                    return int(fields[1]) * 1024.0 / _MB
    try:
        return float(process.memory_info().rss) / _MB
    except Exception:  # noqa: BLE001 - a worker that ended
        return None
