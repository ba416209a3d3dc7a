"""The tables ``trainperf parse`` writes, with the standard library alone (the core needs no pandas):
a log's listener lines, or a ``CsvSink`` file's rows, as CSV or JSON lines."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from typing import IO, Any

from ..logs import WHOLE_NUMBERS, ParsedLog, ordered_columns, read_number, run_numbers

__all__: list[str] = []


class Table:
    """Columns and rows (each a list of values in column order: numbers, text, booleans or ``None``)."""

    def __init__(self, columns: list[str], rows: list[list[Any]]) -> None:
        self.columns, self.rows = columns, rows

    def __len__(self) -> int:
        return len(self.rows)


def log_table(log: ParsedLog) -> Table:
    """The listener lines of ``log``: its columns (whole numbers as integers where they are whole),
    then ``run``, as :meth:`ParsedLog.to_pandas` numbers them."""
    columns = ordered_columns(log.columns)
    present = set(log.columns)
    values: list[list[Any]] = [log.column(name) if name in present else [None] * len(log) for name in columns]
    for name, column in zip(columns, values, strict=True):
        if name in WHOLE_NUMBERS or (name.startswith("gc.") and name.endswith(".count")):
            column[:] = [_whole(v) for v in column]
    ranks = values[columns.index("rank")] if "rank" in columns else None
    runs = run_numbers(values[0], ranks)
    rows = [list(row) + [run] for row, run in zip(zip(*values, strict=True), runs, strict=True)]
    return Table([*columns, "run"], rows)


def csv_table(file: IO[str], name: str) -> Table:
    """The rows of a CSV file a ``CsvSink`` (or ``trainperf parse``) wrote: numbers read as numbers."""
    reader = csv.reader(file)
    header = next(reader, None)
    if not header or "iteration" not in header:
        raise ValueError(f"{name}: no 'iteration' column, so no listener records")
    rows = []
    for row in reader:
        if len(row) != len(header):
            continue  # a row cut by a crash
        rows.append([_cell(text) for text in row])
    return Table(header, rows)


def write_csv(table: Table, file: IO[str]) -> None:
    writer = csv.writer(file, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.rows:
        writer.writerow(["" if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in row])


def write_json_lines(table: Table, file: IO[str]) -> None:
    for row in _records(table):
        file.write(json.dumps(row, allow_nan=False, default=str, separators=(",", ":")) + "\n")


def _records(table: Table) -> Iterator[dict[str, Any]]:
    for row in table.rows:
        yield {name: _json_value(v) for name, v in zip(table.columns, row, strict=True)}


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2.0**63:
        return int(value)
    return value


def _cell(text: str) -> Any:
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    number = read_number(text)
    if number is None:
        return text
    return _whole(number) if "." not in text and "e" not in text.lower() else number
