"""One CSV row per record under a stable header."""

from __future__ import annotations

import csv
import math
import os
import re
import warnings
from pathlib import Path
from typing import IO, Any

from ..base import atomic_write, check_bool, open_to_append, remove_leftovers
from ..records import PerformanceRecord, flat_columns
from ._file import FileSink

__all__ = ["CsvSink", "CSV_COLUMNS"]

#: The CSV sink's leading columns, always present and always in this order. Collector columns
#: (``gc.<name>.count``, ``gc.<name>.ms``) follow in the order the collectors first appear.
CSV_COLUMNS = flat_columns()
_KNOWN = frozenset(CSV_COLUMNS)
_COLLECTOR_COLUMN = re.compile(r"gc\..+\.(count|ms)")


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

    A file an earlier run left is appended to, as every file sink does (a restarted run keeps the
    earlier attempt's rows): its header is kept and no second one is written; a row the earlier run
    left cut (a kill mid-write) is ended first, so the new rows start on a line of their own. A
    header with fewer collector columns (or fewer of :data:`CSV_COLUMNS`, from an older trainperf)
    is widened as above; a header with a column this sink never writes is another program's file,
    and the sink refuses it rather than mix two tables in one file.

    Args:
        path: the file.
        append: keep what the file holds and add rows under its header (default), or start it afresh.

    Raises:
        ValueError: ``append`` is true and the file's header is not one this sink writes.
    """

    def __init__(self, path: str | os.PathLike[str], *, append: bool = True) -> None:
        super().__init__(path)
        append = check_bool("append", append)
        remove_leftovers(self.path)
        self.columns: list[str] = _earlier_header(self.path) if append else []
        self._writer: Any = None
        if self.columns:
            self._file = open_to_append(self.path, newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
        else:  # new, empty, or without one whole line (killed before its first row): started afresh
            self._file = open(self.path, "w", encoding="utf-8", newline="")  # noqa: SIM115 - owned

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
        # what the failed write left of its row is ended: the next row starts on a line of its own
        self._file = open_to_append(self.path, newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")


def _earlier_header(path: Path) -> list[str]:
    """The header of the file an earlier run left at ``path``, to append under; ``[]`` when there is
    none to keep (no file, an empty one, or one without a whole line).

    Raises:
        ValueError: the header has a column this sink never writes (another program's file).
    """
    try:
        with open(path, encoding="utf-8", newline="") as f:
            first = f.readline()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError:
        first = "\n"  # not text: refused below, by name
    if not first.endswith("\n"):
        return []
    header = next(csv.reader([first]), [])
    foreign = [c for c in header if c not in _KNOWN and not _COLLECTOR_COLUMN.fullmatch(c)]
    if not header or foreign or len(set(header)) != len(header):
        raise ValueError(f"path {str(path)!r} holds a table whose header is not CsvSink's (columns "
                         f"{', '.join(map(repr, foreign or header)) or 'none'}); give another path, move the file "
                         "away, or pass append=False to replace it")
    return header
