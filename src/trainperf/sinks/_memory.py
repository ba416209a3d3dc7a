"""Records kept in memory: for tests, notebooks and ``listener.history``."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import overload

from ..records import PerformanceRecord

__all__ = ["MemorySink"]


class MemorySink:
    """Keeps records in memory, for tests and notebooks.

    Args:
        maxlen: keep only the newest ``maxlen`` records (``None``: keep all).
    """

    def __init__(self, maxlen: int | None = None) -> None:
        if maxlen is not None and (isinstance(maxlen, bool) or not isinstance(maxlen, int) or maxlen < 1):
            raise ValueError(f"maxlen must be a positive int or None, got {maxlen!r}")
        self.records: deque[PerformanceRecord] = deque(maxlen=maxlen)

    def __call__(self, record: PerformanceRecord) -> None:
        self.records.append(record)

    def __iter__(self) -> Iterator[PerformanceRecord]:
        return iter(list(self.records))

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> PerformanceRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[PerformanceRecord]: ...

    def __getitem__(self, index: int | slice) -> PerformanceRecord | list[PerformanceRecord]:
        if isinstance(index, slice):
            return list(self.records)[index]
        return self.records[index]

    def __repr__(self) -> str:
        return f"MemorySink({len(self.records)} records)"

    def clear(self) -> None:
        self.records.clear()
