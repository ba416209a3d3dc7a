"""One CSV row per record under a stable header."""

from __future__ import annotations

import csv
import math
import os
import warnings
from typing import IO, Any

from .._atomic import atomic_write
from .._record import PerformanceRecord, flat_columns
from ._file import FileSink

__all__ = ["CsvSink", "CSV_COLUMNS"]

#: The CSV sink's leading columns, always present and always in this order. Collector columns
#: (``gc.<name>.count``, ``gc.<name>.ms``) follow in the order the collectors first appear.
CSV_COLUMNS = flat_columns()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


class CsvSink(FileSink):
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
        super().__init__(path)
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

        def write(out: IO[str]) -> None:
            self._start(out)
            self._writer.writerows(rows)

        atomic_write(self.path, write)
        warnings.warn(f"{self!r}: new columns {new}; the file was rewritten with a wider header", stacklevel=3)
        self._file = open(self.path, "a", encoding="utf-8", newline="")  # noqa: SIM115 - owned
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
