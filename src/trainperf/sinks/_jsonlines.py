"""One JSON object per record and line."""

from __future__ import annotations

import os
from pathlib import Path

from ..base import check_bool
from ..records import PerformanceRecord, json_line
from ._file import FileSink

__all__ = ["JsonLinesSink"]


class JsonLinesSink(FileSink):
    """One JSON object per record and line, flushed as it is written.

    Each record is written with a single ``write`` and flushed, so after a crash the file is
    readable up to its last complete line (:func:`trainperf.parse_log` skips a cut-off last line).
    The lines are strict JSON: a non-finite figure (a diverging loss) is written as the string
    ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, which :func:`trainperf.parse_log` reads back as
    the float it was. Appending to a file whose last line was cut (a crash) starts on a new line.

    Args:
        path: the file; created, or appended to when ``append`` is true.
        append: keep what the file already holds (default) or start it afresh.
        fsync: also ask the OS to put each line on disk (slower; survives power loss).
    """

    def __init__(self, path: str | os.PathLike[str], *, append: bool = True, fsync: bool = False) -> None:
        super().__init__(path)
        append = check_bool("append", append)
        self.fsync = check_bool("fsync", fsync)
        if append and _ends_mid_line(self.path):
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("\n")
        self._file = open(self.path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115 - owned

    def __call__(self, record: PerformanceRecord) -> None:
        if self._file is None:
            raise ValueError(f"{self!r} is closed")
        line = json_line(record.to_dict())
        self._file.write(line)
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())


def _ends_mid_line(path: Path) -> bool:
    """Whether the file exists and its last byte is not a newline (its writer stopped mid-line)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False
