"""One JSON object per record and line."""

from __future__ import annotations

import json
import os
from typing import Any

from .._record import PerformanceRecord
from ._file import FileSink

__all__ = ["JsonLinesSink"]


def _json_default(value: Any) -> Any:
    return str(value)


class JsonLinesSink(FileSink):
    """One JSON object per record and line, flushed as it is written.

    Each record is written with a single ``write`` and flushed, so after a crash the file is
    readable up to its last complete line (:func:`trainperf.parse_log` skips a cut-off last line).
    Non-finite scores are written as JSON's common extension ``NaN`` / ``Infinity``, which Python's
    ``json`` and pandas read back.

    Args:
        path: the file; created, or appended to when ``append`` is true.
        append: keep what the file already holds (default) or start it afresh.
        fsync: also ask the OS to put each line on disk (slower; survives power loss).
    """

    def __init__(self, path: str | os.PathLike[str], *, append: bool = True, fsync: bool = False) -> None:
        super().__init__(path, append=append)
        self.fsync = fsync
        self._file = open(self.path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115 - owned

    def __call__(self, record: PerformanceRecord) -> None:
        if self._file is None:
            raise ValueError(f"{self!r} is closed")
        line = json.dumps(record.to_dict(), default=_json_default, separators=(",", ":")) + "\n"
        self._file.write(line)
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
