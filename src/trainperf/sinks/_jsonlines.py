"""One JSON object per record and line."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..base import check_bool, open_to_append
from ..records import PerformanceRecord, json_of
from ._file import FileSink

__all__ = ["JsonLinesSink"]


class JsonLinesSink(FileSink):
    """One JSON object per record and line, flushed as it is written.

    Each record (or each batch of records the writer thread holds at once) is written with a
    single ``write`` and flushed, so after a crash the file is
    readable up to its last complete line (:func:`trainperf.parse_log` skips a cut-off last line).
    The lines are strict JSON: a non-finite figure (a diverging loss) is written as the string
    ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, which :func:`trainperf.parse_log` reads back as
    the float it was. A file an earlier run left is appended to (a restarted run keeps the earlier
    attempt's lines); when its last line was cut (a crash), the new lines start on a line of their own.

    Args:
        path: the file; created, or appended to when ``append`` is true.
        append: keep what the file already holds (default) or start it afresh.
        fsync: also ask the OS to put each line on disk (slower; survives power loss).
    """

    def __init__(self, path: str | os.PathLike[str], *, append: bool = True, fsync: bool = False) -> None:
        super().__init__(path)
        append = check_bool("append", append)
        self.fsync = check_bool("fsync", fsync)
        self._file = open_to_append(self.path) if append else open(self.path, "w", encoding="utf-8")  # noqa: SIM115

    def __call__(self, record: PerformanceRecord) -> None:
        self.write_many((record,))

    def write_many(self, records: Sequence[PerformanceRecord]) -> None:
        """Write ``records`` with one ``write`` and flush them (the writer thread hands over what it
        holds at once); a write that fails loses these records."""
        if self._file is None:
            raise ValueError(f"{self!r} is closed")
        if not records:
            return
        self._file.write(json_of(records[0]) if len(records) == 1 else "".join(map(json_of, records)))
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())

