"""One CSV row per record under a stable header."""

from __future__ import annotations

import csv
import math
import os
import re
import warnings
from collections.abc import Callable, Sequence
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


def _compile_cells() -> Callable[[PerformanceRecord], list[Any]]:
    """The cells of :data:`CSV_COLUMNS` for a record, read from its slots: what
    ``record.to_dict(flat=True)`` and :func:`_cell` give, without the dict. Values of the types the
    record's fields hold are taken as they are; anything else (an infinity, a float subclass) goes
    through :func:`_cell`."""
    scope: dict[str, Any] = {"_cell": _cell, "_float": float, "_int": int, "_str": str}

    def cell(value: str) -> str:
        return (f"('' if (v := {value}) is None else v if (c := v.__class__) is _str or c is _int "
                f"or (c is _float and (v - v == 0.0 or v != v)) else _cell(v))")

    items = []
    for name in CSV_COLUMNS:
        if name == "verdict":
            items.append(cell("None if (vd := r.verdict) is None else vd.kind"))
        elif name == "verdict_pct":
            items.append(cell("None if vd is None else vd.share"))
        else:
            items.append(cell(f"r.{name}"))
    exec(f"def cells(r):\n    return [{', '.join(items)}]\n", scope)  # noqa: S102 - the schema's own names
    compiled: Callable[[PerformanceRecord], list[Any]] = scope["cells"]
    return compiled


_cells = _compile_cells()


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
        self.columns: list[str] = []
        self._known: frozenset[str] = frozenset()
        self._standard = False  # the header starts with CSV_COLUMNS: rows come from the record's slots
        self._set_columns(_earlier_header(self.path) if append else [])
        self._writer: Any = None
        if self.columns:
            self._file = open_to_append(self.path, newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
        else:  # new, empty, or without one whole line (killed before its first row): started afresh
            self._file = open(self.path, "w", encoding="utf-8", newline="")  # noqa: SIM115 - owned

    def __call__(self, record: PerformanceRecord) -> None:
        self.write_many((record,))

    def write_many(self, records: Sequence[PerformanceRecord]) -> None:
        """Write the rows of ``records`` with one ``write`` and flush them (the writer thread hands
        over what it holds at once). A record that needs a wider header has the rows before it
        written first; a write that fails loses the rows of that write, and a widening that fails
        the record that needed it (the others are written and the first error is raised)."""
        if self._file is None:
            raise ValueError(f"{self!r} is closed")
        rows: list[list[Any]] = []
        failed: OSError | None = None
        for record in records:
            try:
                rows.append(self._row(record, rows))
            except OSError as exc:  # the header could not be widened: this record is lost
                failed = failed or exc
        if rows:
            self._write_rows(rows)
        if failed is not None:
            raise failed

    def _row(self, record: PerformanceRecord, before: list[list[Any]]) -> list[Any]:
        """``record``'s row under the header, widened first (``before``, the rows not yet written,
        written then) when the record brings new columns."""
        extra = record.extra
        if extra or (self.columns and not self._standard):  # rare: the general path
            row = record.to_dict(flat=True)
            new = [k for k in row if k not in self._known]
            if not self.columns:
                self._set_columns([*CSV_COLUMNS, *(k for k in row if k.startswith("gc."))])
                self._start()
            elif new:
                self._widen_after(before, new)
            return [_cell(row.get(k)) for k in self.columns]
        collectors: dict[str, Any] = {}
        for stat in record.gc:  # as to_dict(flat=True) names them: a repeated name keeps its last value
            collectors[f"gc.{stat.name}.count"] = stat.count
            collectors[f"gc.{stat.name}.ms"] = stat.ms
        if not self.columns:
            self._set_columns([*CSV_COLUMNS, *collectors])
            self._start()
        elif collectors:
            new = [k for k in collectors if k not in self._known]
            if new:
                self._widen_after(before, new)
        cells = _cells(record)
        if len(self.columns) > len(CSV_COLUMNS):
            cells += [_cell(collectors.get(k)) for k in self.columns[len(CSV_COLUMNS):]]
        return cells

    def _write_rows(self, rows: list[list[Any]]) -> None:
        assert self._file is not None
        try:
            self._writer.writer.writerows(rows)
            self._file.flush()
        except OSError:
            self._reopen()  # what the failed write left in the buffer is dropped with the rows
            raise

    def _widen_after(self, before: list[list[Any]], new: list[str]) -> None:
        if before:
            self._write_rows(before)
            before.clear()
        self._widen(new)

    def _set_columns(self, columns: list[str]) -> None:
        self.columns = columns
        self._known = frozenset(columns)
        self._standard = columns[: len(CSV_COLUMNS)] == list(CSV_COLUMNS)

    def _start(self) -> None:
        assert self._file is not None
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
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
        self._set_columns(columns)
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
