"""Sinks that own files: JSON lines and CSV."""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import IO, Any

from .._record import PerformanceRecord

__all__ = ["JsonLinesSink", "CsvSink", "CSV_COLUMNS"]

#: The CSV sink's leading columns, always present and always in this order. Collector columns
#: (``gc.<name>.count``, ``gc.<name>.ms``) follow in the order the collectors first appear.
CSV_COLUMNS = (
    "timestamp", "host", "pid", "rank", "device", "epoch", "iteration", "window_iterations", "window_s",
    "warmup", "etl_ms", "etl_max_ms", "iteration_ms", "iteration_p50_ms", "iteration_p95_ms",
    "iteration_max_ms", "samples_per_sec", "batches_per_sec", "score", "samples", "batches",
    "etl_total_ms", "gc_total_ms", "verdict", "verdict_pct",
)


class _FileSink:
    def __init__(self, path: str | os.PathLike[str], *, append: bool) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {path!r}")
        self.path = Path(path)
        if not self.path.parent.exists():
            raise FileNotFoundError(f"path {str(self.path)!r}: folder {str(self.path.parent)!r} does not exist")
        self._append = append
        self._file: IO[str] | None = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def closed(self) -> bool:
        return self._file is None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"


def _json_default(value: Any) -> Any:
    return str(value)


class JsonLinesSink(_FileSink):
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


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


class CsvSink(_FileSink):
    """One row per record under a stable header.

    The header is :data:`CSV_COLUMNS` followed by one ``gc.<name>.count`` / ``gc.<name>.ms`` pair per
    collector, in the order collectors first appear. If a later record brings a column the header
    lacks (a collector that appears mid-run, say), the file is rewritten once with the wider
    header, into a temporary file that then replaces it, so a reader or a crash never sees a file
    that is half old and half new; earlier rows get empty cells in the new columns. Rows are
    flushed as written.

    Args:
        path: the file; it is created afresh.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, append=False)
        self.columns: list[str] = []
        self._file = open(self.path, "w", encoding="utf-8", newline="")  # noqa: SIM115 - owned
        self._writer: Any = None

    def __call__(self, record: PerformanceRecord) -> None:
        if self._file is None:
            raise ValueError(f"{self!r} is closed")
        row = record.to_dict(flat=True)
        row.pop("extra", None)
        if not self.columns:
            self.columns = [*CSV_COLUMNS, *(k for k in row if k.startswith("gc."))]
            self._start(self._file)
        else:
            new = [k for k in row if k not in self.columns]
            if new:
                self._widen(new)
        self._writer.writerow({k: _cell(row.get(k)) for k in self.columns})
        self._file.flush()

    def _start(self, file: IO[str]) -> None:
        self._writer = csv.DictWriter(file, fieldnames=self.columns, extrasaction="ignore")
        self._writer.writeheader()

    def _widen(self, new: list[str]) -> None:
        assert self._file is not None
        self._file.close()
        with open(self.path, encoding="utf-8", newline="") as old:
            rows = list(csv.DictReader(old))
        self.columns.extend(new)
        fd, tmp = tempfile.mkstemp(prefix=self.path.name, suffix=".tmp", dir=self.path.parent)
        with open(fd, "w", encoding="utf-8", newline="") as out:
            self._start(out)
            self._writer.writerows(rows)
        os.replace(tmp, self.path)
        warnings.warn(f"{self!r}: new columns {new}; the file was rewritten with a wider header", stacklevel=3)
        self._file = open(self.path, "a", encoding="utf-8", newline="")  # noqa: SIM115 - owned
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
