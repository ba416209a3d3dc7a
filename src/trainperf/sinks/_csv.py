"""One CSV row per record under a stable header."""

from __future__ import annotations

import csv
import math
import os
import warnings
from typing import IO, Any

from ..base import atomic_write, remove_leftovers
from ..records import PerformanceRecord, flat_columns
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

    A write that fails (a full disk, a folder made read-only for a while) loses that record only,
    as the JSON lines sink does: the file keeps its rows and its header, and the next record is
    written (and a header that still needs widening is widened then). Temporary files a killed
    process left beside the file are removed when it is opened.

    Args:
        path: the file; it is created afresh.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path)
        remove_leftovers(self.path)
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
        try:
            self._writer.writerow({k: _cell(row.get(k)) for k in self.columns})
            self._file.flush()
        except OSError:
            self._reopen()  # what the failed write left in the buffer is dropped with the record
            raise

    def _end_line(self) -> None:
        """A row the disk took only part of ends here, so the next row starts on a line of its own."""
        with open(self.path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size:
                f.seek(size - 1)
                last = f.read(1)
            else:
                last = b"\n"
        if last != b"\n":
            assert self._file is not None
            self._file.write("\n")

    def _start(self, file: IO[str]) -> None:
        self._writer = csv.DictWriter(file, fieldnames=self.columns, extrasaction="ignore")
        self._writer.writeheader()

    def _widen(self, new: list[str]) -> None:
        """Rewrite the file with ``new`` columns added. All or nothing: when it fails, the file keeps
        its header and rows, this sink goes on appending under that header, and the error is raised
        (the record in flight is lost; the next one with these columns tries again)."""
        assert self._file is not None
        self._file.flush()
        columns = [*self.columns, *new]
        try:
            with open(self.path, encoding="utf-8", newline="") as old:
                rows = list(csv.DictReader(old))

            def write(out: IO[str]) -> None:
                writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(rows)

            atomic_write(self.path, write)
        except OSError:
            self._reopen()  # the old file, or what the rename left: append under the header it has
            raise
        self.columns = columns
        self._reopen()
        warnings.warn(f"{self!r}: new columns {new}; the file was rewritten with a wider header", stacklevel=3)

    def _reopen(self) -> None:
        if self._file is not None:
            try:
                os.close(self._file.fileno())  # what a failed write left buffered is dropped, not retried
                self._file.close()
            except (OSError, ValueError):
                pass  # that buffer is the record that failed
        self._file = open(self.path, "a", encoding="utf-8", newline="")  # noqa: SIM115 - owned
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
        self._end_line()
