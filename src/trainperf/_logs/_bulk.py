"""The bulk reader: the lines of a long log nearly all share one layout and differ only in their numbers.

For each block of lines this reader takes away the digits and dots of every line, which leaves the
line's *shape* (its labels, units, collector names, logger prefix). Lines of one shape are read
together: learned once from one line of that shape, the layout says which word (split at spaces,
and in JSON lines also at commas and colons) holds which figure; every other character but digits,
dots and newlines is then dropped, and pandas' C reader turns the remaining words into columns of
numbers in one pass. What does not fit
(a shape seen too rarely, a word that is not a number, a label whose digits differ) goes to the
line patterns of :mod:`trainperf._logs._lines`, which read anything; both give the same values.

A line is read by a layout when its text without digits and dots is the same as the layout's line
and every word that holds a figure there holds a number here. Digits inside labels (``gen0``,
``p95``) are checked word by word against the layout's, so collectors cannot be swapped.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ._lines import (
    COLUMNS,
    INTEGER_COLUMNS,
    JSON_SPACE,
    TEXT_COLUMNS,
    TextRows,
    is_gc_ms,
    parse_json_line,
    parse_line,
    scan_lines,
    split_json_lines,
    to_float,
    written,
)

__all__ = ["Layout", "learn_layout", "read_bulk"]

_NUMBER_CHARS = b"0123456789."
# What separates the words of a line: spaces, and in JSON lines (written without spaces) also
# the commas and colons between keys and values.
_TEXT_SEPARATORS = b" "
_JSON_SEPARATORS = b" ,:"
_RUN = re.compile(rb"[0-9.]+")
# Stand-ins written in place of one number of the layout's line to see which field it lands in;
# four digits, so that even the 4-digit ``Device: [n]`` look-behind of the line pattern takes them.
_PROBES = (b"8231", b"9472", b"7365")
_CHANGES_MORE = "\x00"  # the parse changed otherwise than one number column taking the stand-in
#: Bytes per block: big enough that pandas' per-call cost vanishes, small enough to stay in cache.
CHUNK_BYTES = 1 << 22
#: A shape is read in bulk once the log has shown this many of its lines; until then, and for rarer
#: shapes, the line patterns read them.
MIN_LINES = 128
#: Shapes counted while they are too rare to learn; past this many, new shapes are not counted.
MAX_COUNTED_SHAPES = 10_000
#: Longer shapes are never learned (learning probes every word): such lines take the line patterns.
MAX_SHAPE_BYTES = 4096


@dataclass(frozen=True)
class Layout:
    """Where the figures stand in the lines of one shape.

    Attributes:
        words: how many words a line of this shape has.
        values: word position -> column whose number that word holds.
        fixed: word position -> the exact digits that word holds in every line (``gen0``'s ``0``).
        constants: column -> value that every line of this shape has (``verdict``, ``warmup``, a
            ``NaN`` score), as the line patterns read it.
        separators: the characters between words: spaces, and commas and colons in JSON lines.
        order: the columns in the order the line patterns read them from the layout's line.
        empty: the words without digits or dots: a line whose digits stand elsewhere than the
            layout's (``iteration77 421;`` has the shape of ``iteration 77;``) does not fit.
    """

    words: int
    values: dict[int, str]
    fixed: dict[int, str]
    constants: dict[str, Any]
    separators: bytes = _TEXT_SEPARATORS
    empty: tuple[int, ...] = ()
    order: tuple[str, ...] = ()

    def read(self, block: bytes, lines: int, pd: Any) -> Any | None:
        """The figures of ``block`` (``lines`` lines of this shape, each ending in a newline) as a
        DataFrame, or ``None`` when some line does not fit after all (a word that is not a number)."""
        import numpy as np

        whole, decimal = np.dtype("int64"), np.dtype("float64")
        dtypes: dict[str, Any] = {
            f"w{at}": whole if column in INTEGER_COLUMNS else decimal for at, column in self.values.items()
        }
        dtypes.update({f"w{at}": str for at in self.fixed})
        names = [f"w{i}" for i in range(self.words)]
        numbers_text = _numbers_and_spaces(block, self.separators)
        if not _words_fit(numbers_text, lines, self, np):
            return None  # digits where the layout's line has none, or a number JSON does not allow
        try:
            found = pd.read_csv(
                io.BytesIO(numbers_text), sep=" ", header=None, names=names,
                usecols=list(dtypes), dtype=dtypes, engine="c", quoting=3, skip_blank_lines=False,
            )
        except (ValueError, OverflowError):  # a word that is not a number (pandas' ParserError is a ValueError)
            return None
        if len(found) != lines:
            return None
        for at, digits in self.fixed.items():
            if not (found[f"w{at}"] == digits).all():
                return None
        numbers = [f"w{at}" for at, column in self.values.items() if column not in INTEGER_COLUMNS]
        if numbers and not np.isfinite(found[numbers].to_numpy()).all():
            return None  # a word that holds a number in the layout is empty here, or too long for a float
        data: dict[str, Any] = {column: found[f"w{at}"].to_numpy() for at, column in self.values.items()}
        for column, value in self.constants.items():
            data[column] = np.full(lines, value, dtype=object if column in TEXT_COLUMNS else np.float64)
        return pd.DataFrame({column: data[column] for column in self.order if column in data})


def _translation(separators: bytes) -> tuple[bytes, bytes]:
    """The table that turns ``separators`` into spaces, and the bytes to drop (all but digits, dots,
    separators and newlines)."""
    return (
        bytes.maketrans(separators, b" " * len(separators)),
        bytes(c for c in range(256) if c not in _NUMBER_CHARS + separators + b"\n"),
    )


_TRANSLATIONS = {separators: _translation(separators) for separators in (_TEXT_SEPARATORS, _JSON_SEPARATORS)}


def _numbers_and_spaces(block: bytes, separators: bytes) -> bytes:
    """``block`` with separators turned into spaces and all but digits, dots and newlines dropped."""
    return block.translate(*_TRANSLATIONS[separators])


def _words_fit(numbers_text: bytes, lines: int, layout: Layout, np: Any) -> bool:
    """Whether every line of ``numbers_text`` (``lines`` lines of the layout's words, reduced to
    digits and dots) has nothing in the words where the layout's line has no digits, and, in JSON
    lines, no word that starts or ends with a dot or starts with a zero before a digit (``.5``,
    ``5.``, ``01``: JSON has no such numbers; a string such as ``"node01"`` looks like one too, and
    its block then takes the line patterns all the same). Found from where the separators stand,
    without reading the words."""
    # one byte more, so that the byte after a word's first one always exists
    text = np.frombuffer(numbers_text + b"\n", dtype=np.uint8)
    ends = np.flatnonzero(text[:-1] <= 32)  # each word ends at a space or the newline
    if len(ends) != lines * layout.words:
        return False
    ends = ends.reshape(lines, layout.words)
    starts = np.empty_like(ends)
    starts[:, 1:] = ends[:, :-1] + 1
    starts[0, 0] = 0
    starts[1:, 0] = ends[:-1, -1] + 1
    if layout.empty:
        at = list(layout.empty)
        if not (ends[:, at] == starts[:, at]).all():
            return False
    if layout.separators != _JSON_SEPARATORS:
        return True
    # An empty word's first byte is the separator after it and its last the one before it: neither
    # reads as a dot or a zero.
    at = [i for i in range(layout.words) if i not in layout.empty]
    begin, end = starts[:, at], ends[:, at]
    first, last = text[begin], text[end - 1]
    dot, zero = ord("."), ord("0")
    return not ((first == dot) | (last == dot) | ((first == zero) & (text[begin + 1] >= zero))).any()


def learn_layout(line: bytes) -> Layout | None:
    """The layout of ``line``'s shape, found by writing stand-in numbers into it one word at a time
    and reading it with the line patterns. ``None`` when the line is not a listener line or a word
    holds several numbers that matter (``1.0E-5``): lines of that shape take the line patterns."""
    base = _fields(line)
    if base is None:
        return None
    separators = _JSON_SEPARATORS if line.lstrip(JSON_SPACE.encode())[:1] == b"{" else _TEXT_SEPARATORS
    parts = re.split(b"([" + re.escape(separators) + b"])", line)  # words, and the separators between them
    words = parts[0::2]
    values: dict[int, str] = {}
    fixed: dict[int, str] = {}
    empty: list[int] = []
    for at, word in enumerate(words):
        runs = list(_RUN.finditer(word))
        if not runs:
            empty.append(at)
        effects = [_effect(parts, at, run, base) for run in runs]
        if not runs or all(effect is None for effect in effects):
            continue
        if len(runs) > 1:
            return None
        if effects[0] == _CHANGES_MORE:  # a label's digits (``gen0``, ``p95``): every line must have the same
            fixed[at] = runs[0].group().decode()
        else:
            values[at] = str(effects[0])
    if len(set(values.values())) != len(values):
        return None
    constants: dict[str, Any] = {}
    for column, text in base.items():
        if column in values.values():
            continue
        if column == "warmup":
            constants[column] = True
        elif column in TEXT_COLUMNS:
            constants[column] = text
        else:
            number = to_float(text)
            constants[column] = float("nan") if number is None else number
    return Layout(
        words=len(words), values=values, fixed=fixed, constants=constants, separators=separators,
        empty=tuple(empty), order=tuple(base),
    )


def _fields(line: bytes) -> dict[str, str] | None:
    """The fields of a line as text (JSON numbers too, so that ``NaN`` equals ``NaN``)."""
    text = line.decode("utf-8", errors="replace")
    fields = parse_json_line(text) if text.lstrip(JSON_SPACE)[:1] == "{" else parse_line(text)
    return None if fields is None else {name: str(value) for name, value in fields.items()}


def _effect(parts: list[bytes], at: int, run: re.Match[bytes], base: dict[str, str]) -> str | None:
    """What writing other numbers in place of ``run`` (in word ``at`` of the line split into words
    and separators) does to the parse: nothing (``None``), one number column takes them (its
    name), or anything else (``_CHANGES_MORE``)."""
    seen: set[str | None] = set()
    for probe in [p for p in _PROBES if p != run.group()][:2]:
        word = parts[2 * at]
        written = word[: run.start()] + probe + word[run.end() :]
        changed = _fields(b"".join([*parts[: 2 * at], written, *parts[2 * at + 1 :]]))
        if changed == base:
            seen.add(None)
            continue
        if changed is None or changed.keys() != base.keys():
            return _CHANGES_MORE
        differing = [column for column in base if changed[column] != base[column]]
        if len(differing) != 1 or differing[0] in TEXT_COLUMNS or changed[differing[0]] != probe.decode():
            return _CHANGES_MORE
        seen.add(differing[0])
    return seen.pop() if len(seen) == 1 else _CHANGES_MORE


def _blocks(data: bytes, size: int) -> Iterator[bytes]:
    """``data`` (whole lines) in blocks of about ``size`` bytes, each ending with a newline."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", min(start + size, len(data)) - 1) + 1 or len(data)
        yield data[start:end]
        start = end


@dataclass
class _Pending:
    """Lines of one shape waiting to be read together, with their line numbers."""

    numbers: list[Any]
    blocks: list[bytes]
    lines: int = 0
    size: int = 0


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

    def add(self, block: bytes) -> None:
        """Take the lines of ``block`` (ending in a newline)."""
        shapes = block.translate(None, _NUMBER_CHARS).split(b"\n")
        shapes.pop()  # after the last newline
        first, count = self.lines, len(shapes)
        self.lines += count
        if shapes.count(shapes[0]) == count:  # one shape only: no need to split the block
            if b"iteration" in shapes[0]:
                exemplar = block[: block.find(b"\n")]
                self._take(shapes[0], self.np.arange(first, first + count), [block], exemplar)
            return
        groups: dict[bytes, list[int]] = {}
        for i, shape in enumerate(shapes):
            groups.setdefault(shape, []).append(i)
        lines = block.split(b"\n")
        for shape, rows in groups.items():
            if b"iteration" in shape:  # else not a listener line, whatever its numbers
                numbers = self.np.asarray(rows, dtype=self.np.int64) + first
                self._take(shape, numbers, [b"\n".join([lines[i] for i in rows]), b"\n"], lines[rows[0]])

    def _take(self, shape: bytes, numbers: Any, blocks: list[bytes], exemplar: bytes) -> None:
        """Queue lines of one shape for a layout, or leave them to the line patterns."""
        layout = self._layout(shape, len(numbers), exemplar)
        if layout is None:
            self._leave(numbers, b"".join(blocks))
            return
        waiting = self.pending.setdefault(shape, _Pending(numbers=[], blocks=[]))
        waiting.numbers.append(numbers)
        waiting.blocks.extend(blocks)
        waiting.lines += len(numbers)
        waiting.size += sum(map(len, blocks))
        if waiting.size >= CHUNK_BYTES:
            self._flush(shape)

    def _layout(self, shape: bytes, lines: int, exemplar: bytes) -> Layout | None:
        """The layout of ``shape``, learned once the log has shown enough of its lines."""
        if len(shape) > MAX_SHAPE_BYTES:
            return None
        if shape in self.layouts:
            return self.layouts[shape]
        seen = self.counted.get(shape, 0) + lines
        if seen >= MIN_LINES:
            self.counted.pop(shape, None)
            layout = self.layouts[shape] = learn_layout(exemplar)
            return layout
        if shape in self.counted or len(self.counted) < MAX_COUNTED_SHAPES:
            self.counted[shape] = seen
        return None

    def _flush(self, shape: bytes) -> None:
        waiting = self.pending.pop(shape)
        layout = self.layouts[shape]
        assert layout is not None
        text = b"".join(waiting.blocks)
        numbers = self.np.concatenate(waiting.numbers)
        frame = layout.read(text, waiting.lines, self.pd)
        if frame is not None:
            self.pieces.append((numbers, frame, dict.fromkeys(frame.columns, int(numbers[0]))))
        else:
            self._leave(numbers, text)

    def _leave(self, numbers: Any, text: bytes) -> None:
        """Leave the lines of ``text`` (numbered by ``numbers``) to the line patterns."""
        self.leftovers.extend(zip(numbers.tolist(), text.split(b"\n"), strict=False))

    def result(self) -> Any:
        """All rows read, as one DataFrame in line order."""
        for shape in list(self.pending):
            self._flush(shape)
        if self.leftovers:
            self.pieces.extend(_read_leftovers(self.leftovers, self.pd, self.np))
        if not self.pieces:
            return TextRows(raw={"iteration": []}).to_frame(self.pd)
        pieces = sorted(self.pieces, key=lambda piece: int(piece[0][0]))  # often no interleaving is left
        numbers = self.np.concatenate([p[0] for p in pieces])
        frame = self.pd.concat([p[1] for p in pieces], ignore_index=True, sort=False)
        if not (self.np.diff(numbers) > 0).all():  # lines of several shapes, read apart
            frame = frame.take(self.np.argsort(numbers, kind="stable")).reset_index(drop=True)
        named = _as_named(pieces)
        fixed = [c for c in frame.columns if c in COLUMNS]
        return frame[fixed + [c for c in named if c in frame.columns]]


def _as_named(pieces: list[tuple[Any, Any, dict[str, int]]]) -> list[str]:
    """The columns beyond the fixed ones in the order the log first gives them a value (as a line
    names them where several start on one line), each collector's count before its ms."""
    first: dict[str, tuple[int, int]] = {}
    for _, frame, written_from in pieces:
        for at, column in enumerate(frame.columns):
            if column in COLUMNS or is_gc_ms(column):
                continue
            key = (written_from.get(column, 1 << 62), at)
            if column not in first or key < first[column]:
                first[column] = key
    order: list[str] = []
    for name in sorted(first, key=first.__getitem__):
        order.append(name)
        if name.startswith("gc.") and name.endswith(".count"):
            order.append(name[:-5] + "ms")
    return order


def read_bulk(data: bytes, pd: Any) -> tuple[Any, int]:
    """The figures of every listener line in ``data`` (whole lines, each ending in a newline) as a
    DataFrame in line order (numbers as float64, int64 for whole-number columns read in bulk,
    ``verdict`` as text, ``warmup`` as bool where present), and how many lines ``data`` has."""
    import numpy as np

    reader = _BulkReader(pd, np)
    for block in _blocks(data, CHUNK_BYTES):
        reader.add(block)
    return reader.result(), reader.lines


def _read_leftovers(leftovers: list[tuple[int, bytes]], pd: Any, np: Any) -> list[tuple[Any, Any, dict[str, int]]]:
    """The rows of the lines no layout read, by the line patterns (and the JSON reader), with their
    line numbers."""
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
    return pieces
