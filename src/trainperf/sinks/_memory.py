"""Records kept in memory: for tests, notebooks and ``listener.history``."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from typing import overload

from ..records import PerformanceRecord

__all__ = ["MemorySink"]


class MemorySink:
    """Keeps records in memory, for tests and notebooks.

    It runs on the training thread, inside the report (it does no I/O, only an append): right after
    the loop it holds every record reported, without ``flush()``. Reading it is safe from any thread,
    while training runs: :attr:`records`, iteration, ``len`` and indexing each see one whole snapshot.

    Args:
        maxlen: keep only the newest ``maxlen`` records (``None``: keep all).
    """

    #: Delivered on the training thread, in the report, rather than by the sinks' writer thread.
    on_training_thread = True

    def __init__(self, maxlen: int | None = None) -> None:
        if maxlen is not None and (isinstance(maxlen, bool) or not isinstance(maxlen, int) or maxlen < 1):
            raise ValueError(f"maxlen must be a positive int or None, got {maxlen!r}")
        self.maxlen = maxlen
        self._records: deque[PerformanceRecord] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def __call__(self, record: PerformanceRecord) -> None:
        with self._lock:
            self._records.append(record)

    @property
    def records(self) -> list[PerformanceRecord]:
        """The records kept, oldest first: a new list, a snapshot that later records do not change."""
        with self._lock:
            return list(self._records)

    def __iter__(self) -> Iterator[PerformanceRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> PerformanceRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[PerformanceRecord]: ...

    def __getitem__(self, index: int | slice) -> PerformanceRecord | list[PerformanceRecord]:
        if isinstance(index, slice):
            return self.records[index]
        with self._lock:
            return self._records[index]

    def __repr__(self) -> str:
        return f"MemorySink({len(self._records)} records)"

    def clear(self) -> None:
        """Forget every record kept."""
        with self._lock:
            self._records.clear()
