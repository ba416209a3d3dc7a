"""The bulk reader: the lines of a long log nearly all share one layout and differ only in their numbers.

For each block of lines this reader takes away the digits and dots of every line, which leaves the
line's *shape* (its labels, units, collector names, logger prefix). Lines of one shape are read
together: learned once from one line of that shape (see :mod:`trainperf.logs._layout`), the layout
says which word holds which figure, and pandas' C reader turns the words into columns of numbers in
one pass. What does not fit (a shape seen too rarely, a word that is not a number, a label whose
digits differ) goes to the line patterns of :mod:`trainperf.logs._lines`, which read anything;
both give the same values.
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ._layout import NUMBER_CHARS, Layout, learn_layout
from ._lines import COLUMNS, CUT_LINE, TextRows, is_gc_ms, scan_lines, split_json_lines, written

__all__ = ["CHUNK_BYTES", "blocks", "read_bulk"]

#: Bytes per block that a log is cut into as it is read.
CHUNK_BYTES = 1 << 22
#: Bytes of one shape's lines read together: pandas' reader costs milliseconds per call.
READ_BYTES = 1 << 25
#: A shape is read in bulk once the log has shown this many of its lines; until then, and for rarer
#: shapes, the line patterns read them.
MIN_LINES = 128
#: Shapes counted while they are too rare to learn; past this many, new shapes are not counted.
MAX_COUNTED_SHAPES = 10_000
#: Longer shapes are never learned (learning probes every word): such lines take the line patterns.
MAX_SHAPE_BYTES = 4096
#: Rows read apart are put in line order by slices while each slice holds this many rows on average,
#: else by one ``take``: a slice costs about as much as a ``take`` of a thousand rows.
_ROWS_PER_SEGMENT = 1000


def blocks(data: bytes, size: int, end: int | None = None) -> Iterator[bytes]:
    """``data[:end]`` (whole lines) in blocks of about ``size`` bytes, each ending with a newline."""
    stop = len(data) if end is None else end
    start = 0
    while start < stop:
        cut = data.find(b"\n", min(start + size, stop) - 1, stop) + 1 or stop
        yield data[start:cut]
        start = cut


@dataclass
class _Pending:
    """Lines of one shape waiting to be read together: pieces of text with their line numbers."""

    pieces: list[tuple[Any, bytes]] = field(default_factory=list)
    lines: int = 0
    size: int = 0


#: The bytes that may end a whole listener line: its last ``;``, or white space after it (the
#: cut-line pattern's ``(?<![;\s])``).
_WHOLE_LINE_ENDS = b";" + string.whitespace.encode()
_NUMBER_BYTES = [bytes([c]) for c in NUMBER_CHARS]
#: The most bytes of a line's end that are looked for at the end of every line of its block.
_TAIL_BYTES = 16


def _cut_in_one_shape(block: bytes, shape: bytes, lines: int) -> int:
    """How many cut listener lines ``block`` holds (``lines`` lines, all of ``shape``), as
    :data:`CUT_LINE` counts them: a line with ``ETL: `` that does not end like a whole line, or
    with a second ``ETL: ``. The pattern runs only where the block may hold one: a line holds at most
    as many ``ETL: `` as its shape (taking digits away cannot break one), and when every line ends
    with the first line's last bytes after its last number, which end like a whole line (``;`` or
    white space), no line is cut."""
    if shape.count(b"ETL: ") == 1:
        first = block[: block.find(b"\n")][-_TAIL_BYTES:]
        tail = first[max(map(first.rfind, _NUMBER_BYTES)) + 1 :]
        # each match ends at its own newline: as many as the block has lines means every line ends so
        if tail and tail[-1] in _WHOLE_LINE_ENDS and block.count(tail + b"\n") == lines:
            return 0
    return len(CUT_LINE.findall(block))


def _cut_in_shapes(block: bytes, stops: Any, with_etl: dict[bytes, Any], np: Any) -> int:
    """How many cut listener lines ``block`` holds, as :data:`CUT_LINE` counts them, given where each
    of its lines ends (``stops``, one past its newline) and the lines of each shape with ``ETL: ``
    (``with_etl``, shape -> line indices): none when no such shape has two ``ETL: `` and every line
    of them ends like a whole line; else the pattern counts them."""
    if all(shape.count(b"ETL: ") == 1 for shape in with_etl):
        rows = np.concatenate([np.asarray(rows, dtype=np.int64) for rows in with_etl.values()])
        ends = np.frombuffer(block, dtype=np.uint8)[stops[rows] - 2]  # lines with a shape are not empty
        if np.isin(ends, np.frombuffer(_WHOLE_LINE_ENDS, dtype=np.uint8)).all():
            return 0
    return len(CUT_LINE.findall(block))


#: The most lines of a block that may differ from the shape of most of them (a rare float written
#: ``1e-05``) for the block to be grouped without splitting it into lines.
_MAX_ODD_LINES = 16
_Grouped = tuple[int, bytes, list[int], dict[bytes, list[int]]]


def _group_lines(shapes: bytes) -> _Grouped:
    """The lines of ``shapes`` (a block's lines without their digits and dots, each ending in a
    newline) grouped: how many there are, the shape most of them share, the indices of the other
    lines, and those lines by shape (in the order they first come)."""
    lines = shapes.split(b"\n")
    lines.pop()  # after the last newline
    # Most lines of a block share one shape: find it, then group only the other lines.
    common = lines[len(lines) // 2]
    odd = [i for i, shape in enumerate(lines) if shape != common]
    if 2 * len(odd) > len(lines):
        common = Counter(lines).most_common(1)[0][0]
        odd = [i for i, shape in enumerate(lines) if shape != common]
    groups: dict[bytes, list[int]] = {}
    for i in odd:
        groups.setdefault(lines[i], []).append(i)
    return len(lines), common, odd, groups


def _few_odd_lines(shapes: bytes, np: Any) -> _Grouped | None:
    """What :func:`_group_lines` gives, found without splitting ``shapes`` into lines, when at most
    :data:`_MAX_ODD_LINES` of them (and fewer than half) differ from the middle line's shape; else
    ``None``. Lines of another length differ; the others, in each stretch between those, are the
    middle line's shape when each of them is it, byte for byte."""
    text = np.frombuffer(shapes, dtype=np.uint8)
    ends = np.flatnonzero(text == ord("\n"))
    count = len(ends)
    starts = np.concatenate(([0], ends[:-1] + 1))
    middle = count // 2
    common = shapes[int(starts[middle]) : int(ends[middle]) + 1]
    odd = np.flatnonzero(ends - starts != len(common) - 1).tolist()
    if len(odd) > _MAX_ODD_LINES or 2 * len(odd) > count:
        return None
    expected = np.frombuffer(common, dtype=np.uint8)
    for after, before in zip([-1, *odd], [*odd, count], strict=True):
        if after + 1 < before:  # the lines between two odd ones, one row each
            stretch = text[int(starts[after + 1]) : int(ends[before - 1]) + 1].reshape(-1, len(common))
            if not (stretch == expected).all():
                return None
    groups: dict[bytes, list[int]] = {}
    for i in odd:
        groups.setdefault(shapes[int(starts[i]) : int(ends[i])], []).append(i)
    return count, common[:-1], odd, groups


class _BulkReader:
    """Reads a log block by block; see :func:`read_bulk`."""

    def __init__(self, pd: Any, np: Any) -> None:
        self.pd, self.np = pd, np
        self.layouts: dict[bytes, Layout | None] = {}
        self.counted: dict[bytes, int] = {}  # lines seen of shapes still too rare to learn
        self.pending: dict[bytes, _Pending] = {}
        # (line numbers, frame, the line where each column is first written)
        self.pieces: list[tuple[Any, Any, dict[str, int]]] = []
        self.leftovers: list[tuple[int, bytes]] = []  # lines for the line patterns, with their numbers
        self.lines = 0
        self.cut = 0  # listener lines cut off in the middle

    def add(self, block: bytes) -> None:
        """Take the lines of ``block`` (ending in a newline)."""
        np = self.np
        shapes = block.translate(None, NUMBER_CHARS)
        end = shapes.find(b"\n") + 1
        first_line = self.lines
        if len(shapes) % end == 0 and shapes == shapes[:end] * (len(shapes) // end):
            # one shape only: no need to split the block
            shape = shapes[: end - 1]
            count = len(shapes) // end
            self.lines += count
            if b"ETL: " in shape:  # a line with ``ETL: `` keeps it when its digits are taken away
                self.cut += _cut_in_one_shape(block, shape, count)
            if b"iteration" in shape:
                self._take(shape, np.arange(first_line, first_line + count), block)
            return
        count, common, odd, groups = _few_odd_lines(shapes, np) or _group_lines(shapes)
        self.lines += count
        etl = b"ETL: " in common or any(b"ETL: " in shape for shape in groups)
        if not etl and b"iteration" not in common and not any(b"iteration" in shape for shape in groups):
            return  # not a listener line, whatever its numbers
        stops = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == ord("\n")) + 1
        common_rows = np.delete(np.arange(count), odd)
        if etl:
            with_etl = {shape: rows for shape, rows in groups.items() if b"ETL: " in shape}
            if b"ETL: " in common:
                with_etl[common] = common_rows
            self.cut += _cut_in_shapes(block, stops, with_etl, np)
        if b"iteration" not in common and not any(b"iteration" in shape for shape in groups):
            return
        starts = np.concatenate(([0], stops[:-1]))
        if b"iteration" in common:
            self._take_rows(common, common_rows, block, starts, stops, first_line)
        for shape, rows in groups.items():
            if b"iteration" in shape:
                self._take_rows(shape, np.asarray(rows, dtype=np.int64), block, starts, stops, first_line)

    def _take_rows(self, shape: bytes, rows: Any, block: bytes, starts: Any, stops: Any, first_line: int) -> None:
        """Take the lines ``rows`` of ``block`` (of one shape; ``starts`` and ``stops`` give where each
        line of the block starts and ends), cut out in stretches of consecutive lines."""
        np = self.np
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        begins = starts[rows[np.concatenate(([0], breaks))]].tolist()
        ends = stops[rows[np.concatenate((breaks - 1, [len(rows) - 1]))]].tolist()
        text = b"".join([block[b:e] for b, e in zip(begins, ends, strict=True)])
        self._take(shape, rows + first_line, text)

    def _take(self, shape: bytes, numbers: Any, text: bytes) -> None:
        """Queue lines of one shape for a layout, or leave them to the line patterns."""
        layout = self._layout(shape, len(numbers), text)
        if layout is None:
            self._leave(numbers, text)
            return
        waiting = self.pending.setdefault(shape, _Pending())
        waiting.pieces.append((numbers, text))
        waiting.lines += len(numbers)
        waiting.size += len(text)
        if waiting.size >= READ_BYTES:
            self._flush(shape)

    def _layout(self, shape: bytes, lines: int, text: bytes) -> Layout | None:
        """The layout of ``shape``, learned once the log has shown enough of its lines: from
        the first and the last line of ``text`` (lines of the shape), which must agree. A
        layout learned from one line takes its digits where they count for nothing there as
        meaningless; a line of the same shape whose digits count (``p9:`` against ``p95:``) would
        then be read differently from the line patterns, so such a shape is left to them."""
        if len(shape) > MAX_SHAPE_BYTES:
            return None
        if shape in self.layouts:
            return self.layouts[shape]
        seen = self.counted.get(shape, 0) + lines
        if seen >= MIN_LINES:
            self.counted.pop(shape, None)
            first = text[: text.find(b"\n")]
            last = text[text.rfind(b"\n", 0, len(text) - 1) + 1 : -1]
            layout = learn_layout(first)
            if layout is not None and last != first and not layout.agrees(learn_layout(last)):
                layout = None
            self.layouts[shape] = layout
            return layout
        if shape in self.counted or len(self.counted) < MAX_COUNTED_SHAPES:
            self.counted[shape] = seen
        return None

    def _flush(self, shape: bytes) -> None:
        """Read the queued lines of ``shape``: all at once, else (some line does not fit) piece by
        piece, leaving the pieces that do not fit to the line patterns."""
        waiting = self.pending.pop(shape)
        layout = self.layouts[shape]
        assert layout is not None
        texts = [piece for _, piece in waiting.pieces]
        frame = layout.read(texts[0] if len(texts) == 1 else texts, waiting.lines, self.pd)
        if frame is not None:
            numbers = self.np.concatenate([numbers for numbers, _ in waiting.pieces])
            self.pieces.append((numbers, frame, dict.fromkeys(frame.columns, int(numbers[0]))))
            return
        for numbers, piece in waiting.pieces:
            frame = layout.read(piece, len(numbers), self.pd) if len(waiting.pieces) > 1 else None
            if frame is not None:
                self.pieces.append((numbers, frame, dict.fromkeys(frame.columns, int(numbers[0]))))
            else:
                self._leave(numbers, piece)

    def _leave(self, numbers: Any, text: bytes) -> None:
        """Leave the lines of ``text`` (numbered by ``numbers``) to the line patterns."""
        self.leftovers.extend(zip(numbers.tolist(), text.split(b"\n"), strict=False))

    def result(self) -> Any:
        """All rows read, as one DataFrame in line order."""
        for shape in list(self.pending):
            self._flush(shape)
        if self.leftovers:
            pieces, cut = _read_leftovers(self.leftovers, self.pd, self.np)
            self.pieces.extend(pieces)
            self.cut += cut
        if not self.pieces:
            return TextRows(raw={"iteration": []}).to_frame(self.pd)
        pieces = sorted(self.pieces, key=lambda piece: int(piece[0][0]))  # often no interleaving is left
        frame = _in_line_order(pieces, self.pd, self.np)
        named = _as_named(pieces)
        fixed = [c for c in frame.columns if c in COLUMNS]
        return frame[fixed + [c for c in named if c in frame.columns]]


def _in_line_order(pieces: list[tuple[Any, Any, dict[str, int]]], pd: Any, np: Any) -> Any:
    """The rows of ``pieces`` (each in line order, sorted by their first line) as one DataFrame in
    line order: where the pieces interleave, they are cut into stretches of rows that follow each
    other in the log, and the stretches put together in order."""
    frames = [frame for _, frame, _ in pieces]
    numbers = np.concatenate([numbers for numbers, _, _ in pieces])
    if len(frames) == 1 or (np.diff(numbers) > 0).all():
        return pd.concat(frames, ignore_index=True, sort=False)
    order = np.argsort(numbers, kind="stable")
    offsets = np.cumsum([0] + [len(frame) for frame in frames])
    piece_start = np.zeros(len(numbers), dtype=bool)
    piece_start[offsets[:-1]] = True
    heads = np.flatnonzero(np.concatenate(([True], (np.diff(order) != 1) | piece_start[order[1:]])))
    if len(heads) * _ROWS_PER_SEGMENT > len(order):
        frame = pd.concat(frames, ignore_index=True, sort=False)
        return frame.take(order).reset_index(drop=True)
    sizes = np.diff(np.append(heads, len(order))).tolist()
    rows = order[heads]
    which = (np.searchsorted(offsets, rows, side="right") - 1).tolist()
    starts = (rows - offsets[which]).tolist()
    stretches = [frames[p].iloc[s : s + n] for p, s, n in zip(which, starts, sizes, strict=True)]
    return pd.concat(stretches, ignore_index=True, sort=False)


def _as_named(pieces: list[tuple[Any, Any, dict[str, int]]]) -> list[str]:
    """The columns beyond the fixed ones in the order the log first gives them a value (as a line
    names them where several start on one line), each collector's count before its ms; the ms of
    collectors without a count come last, in that order too."""
    first: dict[str, tuple[int, int]] = {}
    for _, frame, written_from in pieces:
        for at, column in enumerate(frame.columns):
            if column in COLUMNS:
                continue
            key = (written_from.get(column, 1 << 62), at)
            if column not in first or key < first[column]:
                first[column] = key
    order: list[str] = []
    for name in sorted(first, key=first.__getitem__):
        if is_gc_ms(name):
            continue
        order.append(name)
        if name.startswith("gc.") and name.endswith(".count"):
            order.append(name[:-5] + "ms")
    order += sorted((name for name in first if name not in order), key=first.__getitem__)
    return order


def read_bulk(data: Iterable[bytes], pd: Any) -> tuple[Any, int, int]:
    """The figures of every listener line in ``data`` (blocks of whole lines, each ending in a
    newline) as a DataFrame in line order (numbers as float64, int64 for whole-number columns read
    in bulk, ``verdict`` as text, ``warmup`` as bool where present), how many lines ``data`` has,
    and how many of its listener lines were cut off in the middle."""
    import numpy as np

    reader = _BulkReader(pd, np)
    for block in data:
        reader.add(block)
    return reader.result(), reader.lines, reader.cut


def _read_leftovers(
    leftovers: list[tuple[int, bytes]], pd: Any, np: Any,
) -> tuple[list[tuple[Any, Any, dict[str, int]]], int]:
    """The rows of the lines no layout read, by the line patterns (and the JSON reader), with their
    line numbers; and how many JSON records among them were cut off with another written after them."""
    leftovers = sorted(leftovers, key=lambda item: item[0])  # in the order of the log, as the line path reads them
    text = b"\n".join(line for _, line in leftovers).decode("utf-8", errors="replace")
    json_rows, rest, rest_lines = split_json_lines(text)
    rows = scan_lines(rest, numbered=True)
    assert rows.lines is not None and json_rows.lines is not None
    pieces = []
    for found, lines in ((json_rows, json_rows.lines), (rows, [rest_lines[i] for i in rows.lines])):
        if found.rows:
            numbers = [leftovers[i][0] for i in lines]
            written_from = {
                name: numbers[next((i for i, v in enumerate(values) if written(v)), 0)]
                for name, values in found.raw.items()
            }
            pieces.append((np.asarray(numbers, dtype=np.int64), found.to_frame(pd), written_from))
    return pieces, json_rows.cut
