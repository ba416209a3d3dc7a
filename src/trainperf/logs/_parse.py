"""Read listener lines back: trainperf's own lines, its JSON lines files, and Deeplearning4j logs."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import IO, Any

from ..records import PerformanceRecord, flat_columns
from ._lines import (
    COLUMNS,
    CUT_LINE,
    INTEGER_COLUMNS,
    JSON_SPACE,
    TextRows,
    is_gc_ms,
    scan_lines,
    split_json_lines,
    to_float,
    written,
)

__all__ = ["ParsedLog", "parse_log"]

#: A line that starts a JSON object.
_JSON_LINE = re.compile(rf"^[{JSON_SPACE}]*\{{", re.MULTILINE)

#: Logs at least this long are read in bulk when pandas is installed (see ``_parse_bulk``).
BULK_MIN_BYTES = 1 << 20


class ParsedLog:
    """The listener lines of a log, column by column, and what was skipped.

    Attributes:
        skipped: lines that were not listener lines.
        truncated: listener lines that were cut off (their writer stopped mid-line, perhaps before
            more lines were written after a restart) and skipped.
    """

    def __init__(
        self, rows: TextRows | None = None, *, frame: Any = None, skipped: int = 0, truncated: int = 0,
        filled: Iterable[str] = (),
    ):
        self._text = rows if rows is not None or frame is not None else TextRows(raw={"iteration": []})
        self._frame = frame
        self._filled = frozenset(filled)  # columns of ``frame`` that no line has a value for
        self.skipped = skipped
        self.truncated = truncated

    @property
    def rows(self) -> int:
        return len(self._frame) if self._frame is not None else self._text.rows  # type: ignore[union-attr]

    def __len__(self) -> int:
        return self.rows

    def __repr__(self) -> str:
        return f"ParsedLog(rows={self.rows}, skipped={self.skipped}, truncated={self.truncated})"

    @property
    def columns(self) -> list[str]:
        """The columns that some line has: see :func:`parse_log`."""
        if self._frame is not None:
            return [str(c) for c in self._frame.columns if c not in self._filled]
        return list(self._text.raw)  # type: ignore[union-attr]

    def column(self, name: str) -> list[Any]:
        """One column: numbers as floats (``None`` where missing), ``verdict`` as text, ``warmup`` as bool."""
        if name not in self.columns:
            raise KeyError(f"no column {name!r}; columns are {self.columns}")
        if self._frame is None:
            return self._text.column(name)  # type: ignore[union-attr]
        values = self._frame[name].tolist()
        if name == "warmup":
            return [v is True for v in values]
        if name == "verdict":
            return [v if isinstance(v, str) and v else None for v in values]
        return list(map(to_float, values))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        converted = {name: self.column(name) for name in self.columns}
        for i in range(self.rows):
            yield {name: values[i] for name, values in converted.items()}

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` with one row per listener line, and a ``run`` column that counts up
        each time the iteration number goes back (several runs in one log)."""
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("to_pandas needs pandas: pip install 'trainperf[pandas]'") from exc
        with _no_cyclic_gc():
            frame = self._frame if self._frame is not None else _finish(self._text.to_frame(pd))  # type: ignore[union-attr]
            frame = frame.copy(deep=not _copies_on_write(pd))
            frame["run"] = number_runs(frame)
            return frame


def number_runs(frame: Any) -> Any:
    """:func:`run_numbers` of a DataFrame's ``iteration`` and ``rank``, as a column: for one rank (the
    common case) counted by numpy, one comparison per row; for several, row by row."""
    import numpy as np
    import pandas as pd

    ranks = frame["rank"].to_numpy() if "rank" in frame else None
    if ranks is None or (len(ranks) and ranks[0] == ranks[0] and bool((ranks == ranks[0]).all())):
        iterations = frame["iteration"].to_numpy()
        # a new run where the iteration is not above the one before (an infinite one starts none)
        restarts = (iterations[1:] <= iterations[:-1]) & (iterations[:-1] != math.inf)
        runs = np.concatenate(([0], np.cumsum(restarts, dtype=np.int64)))[: len(iterations)]
        return pd.Series(runs, index=frame.index, dtype="int64")
    return pd.Series(run_numbers(frame["iteration"].tolist(), ranks.tolist()), index=frame.index, dtype="int64")


def run_numbers(iterations: Sequence[float], ranks: Sequence[float | None] | None = None) -> list[int]:
    """The run of each row: one per rank and per restart within a rank (the iteration number not
    above that rank's last), numbered from 0 in the order they first appear. Lines of several
    ranks interleaved in one log (``torchrun``) are each rank's run, not a new run at every switch;
    rows without a rank (``None`` or NaN) are one rank of their own.

    >>> run_numbers([10, 20, 10, 20])
    [0, 0, 1, 1]
    >>> run_numbers([10, 10, 20, 20, 10], ranks=[0, 1, 0, 1, 1])
    [0, 1, 0, 1, 2]
    """
    if ranks is None or (len(ranks) and ranks[0] == ranks[0] and ranks.count(ranks[0]) == len(ranks)):
        run, before, runs = 0, math.inf, []  # one rank: the common case, kept short
        for iteration in iterations:
            if iteration <= before and before != math.inf:
                run += 1
            before = iteration
            runs.append(run)
        return runs
    last: dict[Any, float] = {}
    attempts: dict[Any, int] = {}
    codes: dict[tuple[Any, int], int] = {}
    out = []
    for iteration, rank in zip(iterations, ranks, strict=True):
        if rank is not None and rank != rank:  # NaN: no rank
            rank = None
        previous = last.get(rank)
        if previous is not None and iteration <= previous:
            attempts[rank] = attempts.get(rank, 0) + 1
        last[rank] = iteration
        key = (rank, attempts.get(rank, 0))
        code = codes.get(key)
        if code is None:
            code = codes[key] = len(codes)
        out.append(code)
    return out


def _finish(frame: Any) -> Any:
    """Columns in their documented order (see :func:`ordered_columns`), whole numbers as integers where
    none is missing, ``warmup`` as bool. Whether each whole-number column fits is found for all of
    them at once: a JSON log has dozens."""
    import numpy as np

    frame = frame.reindex(columns=ordered_columns([str(c) for c in frame.columns]))
    if "warmup" in frame:
        frame["warmup"] = frame["warmup"].eq(True)
    whole = [c for c in frame.columns if c in _WHOLE_NUMBERS or (_is_gc_column(c) and c.endswith(".count"))]
    if not whole:
        return frame
    # Through a float first, as the line patterns read every number: beyond 2**53 both readers then
    # give the same (nearest) whole number.
    values = frame[whole].to_numpy(dtype=np.float64)
    # none missing, none too big, and no fraction (kept as written, never cut to a whole number)
    with np.errstate(invalid="ignore"):
        fits = (np.abs(values) < 2.0**63).all(axis=0) & (values == np.round(values)).all(axis=0) & (len(frame) > 0)
    for i, name in enumerate(whole):
        if fits[i]:
            frame[name] = values[:, i].astype(np.int64)
        elif frame[name].dtype != np.float64:
            frame[name] = values[:, i]
    return frame


#: Columns of whole numbers: the text lines' (``\d+`` in their pattern) and the record's integer fields
#: that JSON lines carry (``pid``, ``samples``, ``window_iterations``, ...).
WHOLE_NUMBERS = tuple(dict.fromkeys([
    *INTEGER_COLUMNS, *(f.name for f in fields(PerformanceRecord) if f.type in ("int", "int | None")),
]))
_WHOLE_NUMBERS = frozenset(WHOLE_NUMBERS)


#: The columns a record gives, in the order :func:`parse_log` gives them: a line's fields in the line's
#: order, then the record's other fields (JSON lines) in the schema's order, as the CSV sink writes them.
RECORD_COLUMNS = (*COLUMNS, *(name for name in flat_columns() if name not in COLUMNS))
_RECORD_COLUMNS = frozenset(RECORD_COLUMNS)


def ordered_columns(columns: list[str]) -> list[str]:
    """``columns`` in the order both readers give them: :data:`RECORD_COLUMNS`, names the record does
    not have (in the order of ``columns``, the order the log first gives them), then each collector's
    count and ms (both, even where the log names only one), collectors in the order the log first names them."""
    present = set(columns)
    collectors = {column[3 : column.rfind(".")]: None for column in columns if _is_gc_column(column)}
    names = [c for c in RECORD_COLUMNS if c in present]
    names += [c for c in columns if c not in _RECORD_COLUMNS and not _is_gc_column(c)]
    for name in collectors:  # both readers give them in the order the log names them
        names += [f"gc.{name}.count", f"gc.{name}.ms"]
    return names


def _is_gc_column(column: str) -> bool:
    return column.startswith("gc.") and column.endswith((".count", ".ms"))


def _check_source(source: object) -> None:
    if isinstance(source, (bytes, bytearray, memoryview)):
        raise TypeError(
            "source must be a path (str or os.PathLike), a file object or an iterable of lines, got "
            f"{type(source).__name__}: give a path as str (os.fsdecode(path)), or a log's content as "
            "io.BytesIO(content)"
        )


def _read_bytes(source: str | os.PathLike[str] | IO[Any] | Iterable[str]) -> tuple[bytes, bool]:
    """The log's bytes as UTF-8 (see :func:`as_utf8`) and whether its last line was complete (ended by
    a newline)."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            data = as_utf8(path.read_bytes())
        except OSError as exc:
            raise _unreadable(path, exc) from exc
        return data, data.endswith(b"\n") or not data
    if hasattr(source, "read"):
        content = source.read()
        data = content if isinstance(content, bytes) else str(content).encode("utf-8", errors="surrogatepass")
        data = as_utf8(data)
        return data, data.endswith(b"\n") or not data
    if isinstance(source, Iterable):
        lines = [ln if isinstance(ln, bytes) else str(ln).encode("utf-8", errors="surrogatepass") for ln in source]
        return as_utf8(b"".join(ln if ln.endswith(b"\n") else ln + b"\n" for ln in lines)), True
    raise TypeError(f"source must be a path, a file object or lines, got {type(source).__name__}")


_UTF8_MARK = b"\xef\xbb\xbf"


def utf16_of(head: bytes) -> str | None:
    """The UTF-16 codec a log starting with ``head`` is written in (as Windows tools such as
    PowerShell's ``>`` write text), else ``None``: its byte-order mark, or, without one, a NUL in
    every other byte of its first line (no UTF-8 text holds NULs like that)."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"  # the codec reads the mark and drops it
    sample = head[: 2 * (len(head) // 2)][:512]
    if len(sample) < 8:
        return None
    even, odd = sample[0::2], sample[1::2]
    if odd.count(0) == len(odd) and even.count(0) == 0:
        return "utf-16-le"
    if even.count(0) == len(even) and odd.count(0) == 0:
        return "utf-16-be"
    return None


def as_utf8(data: bytes) -> bytes:
    """``data`` as UTF-8 bytes: a UTF-8 byte-order mark left out (it would cut the first line's
    record), UTF-16 decoded (it reads as no lines at all)."""
    if data.startswith(_UTF8_MARK):
        return data[len(_UTF8_MARK) :]
    codec = utf16_of(data[:512])
    if codec is None:
        return data
    return data.decode(codec, errors="replace").encode("utf-8", errors="surrogatepass")


def parse_log(source: str | os.PathLike[str] | IO[Any] | Iterable[str]) -> ParsedLog:
    """Parse listener lines from a log.

    Reads trainperf's lines (whatever logging prefix stands before them), trainperf's JSON lines
    files, and Deeplearning4j ``PerformanceListener`` lines, with their logger prefix, the optional
    ``Device: [n]; `` prefix, ``NaN``/``Infinity`` and collectors such as ``PS Scavenge``. Other
    lines are skipped and counted in :attr:`ParsedLog.skipped`; a cut-off last line (a file whose
    writer crashed) is skipped and counted in :attr:`ParsedLog.truncated`. Nothing in the text
    makes it raise.

    Columns, each only when some line has it, in this order whichever reader reads the log (line by
    line, or in bulk for large logs): ``iteration``, ``etl_ms``, ``iteration_ms``,
    ``samples_per_sec``, ``batches_per_sec``, ``score``, ``device``, then trainperf's fields in its
    line's order (``iteration_p95_ms``, ``epoch``, ``rank``, ...), ``warmup``, ``verdict``,
    ``verdict_pct``; a JSON line's other record fields in the schema's order (as the CSV sink writes
    them); other names in the order the log first gives them; and ``gc.<name>.count`` /
    ``gc.<name>.ms`` per collector, in the order the log first names them.

    Args:
        source: a path, a text or binary file object, or an iterable of lines.

    Raises:
        OSError: the path cannot be read (the message names it).
    """
    _check_source(source)
    with _no_cyclic_gc():
        return _parse(source)


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Parsing allocates millions of tuples and strings that all survive, which only makes the
    cyclic collector walk them again and again (it roughly doubles the time); none of them can
    form a cycle, so collection waits until the end."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse(source: str | os.PathLike[str] | IO[Any] | Iterable[str]) -> ParsedLog:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise _unreadable(path, exc) from exc
        pd = _pandas() if size >= BULK_MIN_BYTES else None
        if pd is not None and not _is_utf16(path):  # UTF-16 is read whole, as UTF-8
            file_lines = _FileLines(path)
            return _parse_bulk(file_lines, pd, file_lines)
    data, complete = _read_bytes(source)
    truncated = 0
    end = len(data)
    if not complete:
        end = data.rfind(b"\n") + 1
        truncated = 1
    pd = _pandas() if end >= BULK_MIN_BYTES else None
    if pd is not None:
        from ._bulk import CHUNK_BYTES, blocks

        return _parse_bulk(blocks(data, CHUNK_BYTES, end), pd, truncated=truncated)
    if end < len(data):
        data = data[:end]
    truncated += len(CUT_LINE.findall(data))
    lines = data.count(b"\n")
    text = data.decode("utf-8", errors="replace")
    if _JSON_LINE.search(text) is None:
        rows = scan_lines(text)
    else:  # JSON lines, perhaps among other lines: both kinds in the order of the log
        json_rows, rest, rest_lines = split_json_lines(text)
        truncated += json_rows.cut
        text_rows = scan_lines(rest, numbered=True)
        rows = _merge(json_rows, json_rows.lines or [], text_rows, [rest_lines[i] for i in text_rows.lines or []])
    rows = _as_named(rows)
    in_order = {name: rows.raw[name] for name in ordered_columns(list(rows.raw)) if name in rows.raw}
    return ParsedLog(TextRows(raw=in_order, rows=rows.rows), skipped=lines - rows.rows, truncated=truncated)


def _is_utf16(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return utf16_of(file.read(512)) is not None
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def _unreadable(path: Path, exc: OSError) -> OSError:
    """The error for a log that cannot be read, naming it."""
    return OSError(f"cannot read log {str(path)!r}: {exc.strerror or exc}")


def _parse_bulk(blocks: Iterable[bytes], pd: Any, file: _FileLines | None = None, truncated: int = 0) -> ParsedLog:
    """``blocks`` (whole lines) read by the bulk reader; ``file``, when they come from one, tells
    afterwards whether its last line was cut off."""
    from ._bulk import read_bulk

    frame, lines, cut = read_bulk(blocks, pd)
    read = set(frame.columns)
    frame = _finish(frame)
    truncated += cut + int(file is not None and file.cut_off)
    # as on the line path, a collector's ms is a column wherever its count is, not the other way round
    filled = [column for column in frame.columns if column not in read and column.endswith(".count")]
    return ParsedLog(frame=frame, skipped=lines - len(frame), truncated=truncated, filled=filled)


class _FileLines:
    """The whole lines of a file in blocks, read as they are asked for, without the file's whole
    text in memory at once. ``cut_off`` tells, once they have all been read, whether the file ends
    in the middle of a line (which is left out)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cut_off = False

    def __iter__(self) -> Iterator[bytes]:
        from ._bulk import CHUNK_BYTES

        try:
            with self.path.open("rb") as file:
                if file.read(len(_UTF8_MARK)) != _UTF8_MARK:
                    file.seek(0)
                tail: list[bytes] = []  # a line begun in earlier reads
                while chunk := file.read(CHUNK_BYTES):
                    end = chunk.rfind(b"\n") + 1
                    if not end:
                        tail.append(chunk)
                        continue
                    yield b"".join([*tail, memoryview(chunk)[:end]]) if tail or end < len(chunk) else chunk
                    tail = [chunk[end:]] if end < len(chunk) else []
        except OSError as exc:
            raise _unreadable(self.path, exc) from exc
        self.cut_off = bool(tail)


def _as_named(rows: TextRows, named_at: Callable[[str, int], int] | None = None) -> TextRows:
    """``rows`` with the columns beyond the fixed ones in the order the log first gives them a
    value, and as that line names them where several start on one line: the bulk reader's order
    too. ``named_at(column, row)`` is where ``row``'s line names ``column`` (default: the order of
    ``rows.raw``, right when the rows come from one reader)."""
    named = list(rows.raw)

    def first_written(name: str) -> tuple[int, int]:
        row = next((i for i, value in enumerate(rows.raw[name]) if written(value)), rows.rows)
        return row, named.index(name) if named_at is None or row == rows.rows else named_at(name, row)

    extras = sorted((n for n in named if n not in COLUMNS and not is_gc_ms(n)), key=first_written)
    order = [n for n in named if n in COLUMNS]
    for name in extras:
        order.append(name)
        if name.startswith("gc.") and name.endswith(".count") and name[:-5] + "ms" in rows.raw:
            order.append(name[:-5] + "ms")
    order += [n for n in named if n not in order]
    return TextRows(raw={n: rows.raw[n] for n in order}, rows=rows.rows, lines=rows.lines)


def _merge(first: TextRows, first_lines: list[int], second: TextRows, second_lines: list[int]) -> TextRows:
    """The rows of ``first`` and ``second`` together, in the order of their line numbers."""
    if not first.rows and not second.rows:
        return TextRows(raw={"iteration": []})
    if not second.rows:
        return first
    if not first.rows:
        return second
    names = [c for c in COLUMNS if c in first.raw or c in second.raw]
    names += [c for c in [*first.raw, *second.raw] if c not in COLUMNS and c not in names]
    order = sorted(range(first.rows + second.rows), key=[*first_lines, *second_lines].__getitem__)
    raw = {}
    for name in dict.fromkeys(names):
        values = first.raw.get(name, [None] * first.rows) + second.raw.get(name, [None] * second.rows)
        raw[name] = [values[i] for i in order]
    sources = ({n: i for i, n in enumerate(first.raw)}, {n: i for i, n in enumerate(second.raw)})

    def named_at(name: str, row: int) -> int:  # a row's line names its columns as its reader holds them
        return sources[order[row] >= first.rows].get(name, len(names))

    return _as_named(TextRows(raw=raw, rows=first.rows + second.rows), named_at)


def _copies_on_write(pd: Any) -> bool:
    """Whether pandas copies a frame's data only when one of its copies is written to (pandas 3)."""
    return int(pd.__version__.split(".")[0]) >= 3 or bool(getattr(pd.options.mode, "copy_on_write", False) is True)


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:
        return None
    return pd
