"""Layouts of listener lines: which word of a line holds which figure, learned once per shape.

A line's *shape* is the line without its digits and dots (its labels, units, collector names,
logger prefix). A layout is learned from one line of a shape by writing other numbers in place of
each of its numbers and seeing which field the line patterns of :mod:`trainperf.logs._lines` then
read differently. :meth:`Layout.read` reads many lines of the shape at once with pandas' C reader.

A line is read by a layout when it is the layout's line with other digits and dots in place of each
of its numbers: the same text without digits and dots (its shape), digits and dots exactly where the
layout's line has them (not moved past a unit, a quote or a bracket), none missing, labels' digits
(``gen0``, ``p95``) as the layout's, and each number in the form that the line patterns (or JSON)
accept there: whole numbers without a dot, JSON numbers without leading zeros or bare dots.
"""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ._lines import INTEGER_COLUMNS, JSON_SPACE, TEXT_COLUMNS, parse_json_line, parse_line, to_float

__all__ = ["NUMBER_CHARS", "Layout", "learn_layout"]

#: The characters a number is written with; a line without them is its shape.
NUMBER_CHARS = b"0123456789."
# What separates the words of a line: spaces, and in JSON lines (written without spaces) also
# the commas and colons between keys and values.
_TEXT_SEPARATORS = b" "
_JSON_SEPARATORS = b" ,:"
_RUN = re.compile(rb"[0-9.]+")
# Stand-ins written in place of one number of the layout's line to see which field it lands in;
# four digits, so that even the 4-digit ``Device: [n]`` look-behind of the line pattern takes them.
_PROBES = (b"8231", b"9472", b"7365")
_CHANGES_MORE = "\x00"  # the parse changed otherwise than one number column taking the stand-in
#: The most digits of a ``Device: [n]`` that the text lines' pattern reads.
_DEVICE_DIGITS = 4
#: The longest JSON number read in bulk: shorter whole numbers are all below 2**1023, which a JSON
#: line's number must be to count.
_JSON_DIGITS = 300
#: The text lines' columns of whole numbers (``\d+`` in their pattern), besides ``INTEGER_COLUMNS``.
_GC_COUNT = re.compile(r"gc\..+\.count")
#: Where a character of a JSON line stands (see ``_json_places``).
_OUTSIDE, _IN_VALUE, _IN_KEY = 0, 1, 2


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
        fixed_at: word position -> where each digit of ``fixed`` stands in the word.
        around: word position -> the characters before and after its number, for the other words
            with one number (``(`` and ``ms)];`` of ``(0.41ms)];``) where there are any.
        loose: words with several numbers that do not matter to the line patterns (a timestamp in a
            text line's logger prefix): their digits are not checked.
        dropped: word position -> how many characters of the words before it the numbers text drops.
        dropped_per_line: how many characters of a line the numbers text drops.
        whole_numbers: words whose number must be digits only, without leading zeros.
        json_numbers: words whose number must have JSON's form: no leading zero, no bare dot.
        decimals: words whose number must not start or end with a dot.
        longest: word position -> how many digits and dots its number may have.
        checked: words whose number counts for nothing but must be a number (in JSON lines).
    """

    words: int
    values: dict[int, str]
    fixed: dict[int, str]
    constants: dict[str, Any]
    separators: bytes = _TEXT_SEPARATORS
    empty: tuple[int, ...] = ()
    order: tuple[str, ...] = ()
    fixed_at: dict[int, tuple[int, ...]] = field(default_factory=dict)
    around: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    loose: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    dropped_per_line: int = 0
    whole_numbers: tuple[int, ...] = ()
    json_numbers: tuple[int, ...] = ()
    decimals: tuple[int, ...] = ()
    longest: dict[int, int] = field(default_factory=dict)
    checked: tuple[int, ...] = ()

    def agrees(self, other: Layout | None) -> bool:
        """Whether ``other`` (learned from another line of the shape) reads lines as this one does;
        a ``NaN`` constant agrees with a ``NaN``."""
        if other is None:
            return False
        if self.constants.keys() != other.constants.keys() or any(
            not (a == b or (a != a and b != b)) for a, b in ((v, other.constants[k]) for k, v in self.constants.items())
        ):
            return False
        return dataclasses.replace(self, constants={}) == dataclasses.replace(other, constants={})

    def read(self, block: bytes | list[bytes], lines: int, pd: Any) -> Any | None:
        """The figures of ``block`` (``lines`` lines of this shape, each ending in a newline; or
        those lines in pieces) as a DataFrame, or ``None`` when some line does not fit after all (a
        word that is not a number)."""
        import numpy as np

        texts: list[bytes] = []
        counted: list[Any] = []  # the length of each word of ``whole_numbers``, one row per line
        numbered = [at for at in range(self.words) if at not in self.empty]
        whole_numbers = [numbered.index(at) for at in self.whole_numbers]
        for piece in [block] if isinstance(block, bytes) else block:
            numbers_text = _numbers_and_spaces(piece, self.separators)
            found = _fit(piece, numbers_text, self, np)
            if found is None:
                return None  # digits where the layout's line has none, or a number of the wrong form
            texts.append(numbers_text)
            counted.append(found[1][:, whole_numbers])
        if sum(map(len, counted)) != lines:
            return None
        whole, decimal = np.dtype("int64"), np.dtype("float64")
        dtypes: dict[str, Any] = {
            f"w{at}": whole if column in INTEGER_COLUMNS else decimal for at, column in self.values.items()
        }
        dtypes.update({f"w{at}": decimal for at in self.checked})
        names = [f"w{i}" for i in range(self.words)]
        try:
            found = pd.read_csv(
                io.BytesIO(b"".join(texts)), sep=" ", header=None, names=names,
                usecols=list(dtypes), dtype=dtypes, engine="c", quoting=3, skip_blank_lines=False,
            )
        except (ValueError, OverflowError):  # a word that is not a number (pandas' ParserError is a ValueError)
            return None
        if len(found) != lines:
            return None
        numbers = [f"w{at}" for at, column in self.values.items() if column not in INTEGER_COLUMNS]
        if numbers and not np.isfinite(found[numbers].to_numpy()).all():
            return None  # a word that holds a number in the layout is empty here, or too long for a float
        lengths = np.concatenate(counted)
        for i, at in enumerate(self.whole_numbers):
            if not _digits_only(found[f"w{at}"].to_numpy(), lengths[:, i], np):
                return None
        data: dict[str, Any] = {column: found[f"w{at}"].to_numpy() for at, column in self.values.items()}
        for column, value in self.constants.items():
            data[column] = np.full(lines, value, dtype=object if column in TEXT_COLUMNS else np.float64)
        return pd.DataFrame({column: data[column] for column in self.order if column in data})


def _translation(separators: bytes) -> tuple[bytes, bytes]:
    """The table that turns ``separators`` into spaces, and the bytes to drop (all but digits, dots,
    separators and newlines)."""
    return (
        bytes.maketrans(separators, b" " * len(separators)),
        bytes(c for c in range(256) if c not in NUMBER_CHARS + separators + b"\n"),
    )


_TRANSLATIONS = {separators: _translation(separators) for separators in (_TEXT_SEPARATORS, _JSON_SEPARATORS)}


def _numbers_and_spaces(block: bytes, separators: bytes) -> bytes:
    """``block`` with separators turned into spaces and all but digits, dots and newlines dropped."""
    return block.translate(*_TRANSLATIONS[separators])


def _fit(block: bytes, numbers_text: bytes, layout: Layout, np: Any) -> tuple[Any, Any] | None:
    """Where each number of ``numbers_text`` (``block``, lines of the layout's shape, reduced to
    digits, dots and spaces) starts in it and how long it is, one row per line and one column per word of the
    layout's line that has a number, when every line fits the layout before its numbers are read,
    else ``None``: digits and dots exactly where the layout's line has them, in words of the form the
    layout asks for. Found from where the runs of digits and dots stand and how many separators
    stand between them, and for words with more than their number, from the characters around the
    number in ``block``."""
    text = np.frombuffer(numbers_text, dtype=np.uint8)
    digit = np.empty(len(text) + 1, dtype=bool)  # with no digit before the text
    digit[0] = False
    np.greater(text, 32, out=digit[1:])
    # where a run of digits and dots begins or stops, in turn: found in one pass
    edges = np.flatnonzero(digit[1:] != digit[:-1])
    if len(edges) % 2:
        return None  # the last run does not stop (the text does not end with a newline)
    begin, stop = edges[0::2], edges[1::2]
    words = [at for at in range(layout.words) if at not in layout.empty]
    lines = len(begin) // len(words)
    if not lines or len(begin) != lines * len(words):
        return None
    # Between two runs there are only separators, one per word boundary: as many as the layout's
    # line has between the words that hold them, on every line. With the count of separators per
    # line, this puts every run in its word, and leaves no digits in the words without a number.
    begin = begin.reshape(lines, len(words))
    stop = stop.reshape(lines, len(words))
    if begin[0, 0] != words[0] or len(text) - stop[-1, -1] != layout.words - words[-1]:
        return None
    if (stop - begin).sum() + lines * layout.words != len(text):
        return None
    steps = np.diff(np.asarray(words, dtype=np.int64))
    if len(steps) and not (begin[:, 1:] - stop[:, :-1] == steps).all():
        return None
    if lines > 1 and not (begin[1:, 0] - stop[:-1, -1] == layout.words - words[-1] + words[0]).all():
        return None
    lengths = stop - begin
    shortest = np.asarray([len(layout.fixed.get(at, "0")) for at in words], dtype=np.int64)
    longest = np.asarray([len(layout.fixed[at]) if at in layout.fixed else layout.longest.get(at, len(text))
                          for at in words], dtype=np.int64)
    if (lengths < shortest).any() or (lengths > longest).any():
        return None  # the digits of a label are not the layout's, or a number is too long
    json = np.isin(words, layout.json_numbers)
    if not _forms_fit(text, begin, stop, json, np.isin(words, layout.decimals), np):
        return None
    column = {at: i for i, at in enumerate(words)}
    return (begin, lengths) if _around_fits(block, begin, lengths, column, layout, np) else None


def _bytes_fit(data: Any, checks: list[tuple[Any, Iterable[int], bytes]], np: Any) -> bool:
    """Whether, for each ``(bases, offsets, expected)`` of ``checks``, ``data`` holds the bytes of
    ``expected`` at those ``offsets`` from each of ``bases`` (one base per row)."""
    furthest = max(max(offsets) for _, offsets, _ in checks)
    if min(int(bases.min()) for bases, _, _ in checks) < 0:
        return False
    if max(int(bases.max()) for bases, _, _ in checks) + furthest >= len(data):
        return False
    # one byte of every row at a time: a gather of one small array each, not of rows x bytes at once
    for bases, offsets, expected in checks:
        for offset, byte in zip(offsets, expected, strict=True):
            if not (data[bases + offset] == byte).all():
                return False
    return True


def _around_fits(block: bytes, begin: Any, lengths: Any, column: dict[int, int], layout: Layout, np: Any) -> bool:
    """Whether each number stands where the layout's line has it within its word, and the words of
    ``fixed`` hold the layout's digits where its line has them. Where a word starts in ``block``
    follows from where its number starts in the numbers text and how many characters that drops
    before it, the same on every line of the shape; as the shape fixes the characters that are not
    digits or dots, a word with them where the layout's has them is the layout's."""
    if not layout.around and not layout.fixed:
        return True
    shift = np.arange(len(begin), dtype=np.int64) * layout.dropped_per_line
    checks: list[tuple[Any, Iterable[int], bytes]] = []
    for at, (before, after) in layout.around.items():
        start = begin[:, column[at]] + shift + layout.dropped[at]
        if before:
            checks.append((start, range(len(before)), before))
        if after:
            checks.append((start + len(before) + lengths[:, column[at]], range(len(after)), after))
    for at, digits in layout.fixed.items():
        checks.append((begin[:, column[at]] + shift + layout.dropped[at], layout.fixed_at[at], digits.encode()))
    return _bytes_fit(np.frombuffer(block, dtype=np.uint8), checks, np)


def _forms_fit(text: Any, begin: Any, stop: Any, json: Any, decimal: Any, np: Any) -> bool:
    """Whether the numbers in the columns of ``begin`` / ``stop`` that ``json`` or ``decimal`` mark
    neither start nor end with a dot, and those that ``json`` marks have no zero before another digit
    at their start (``.5``, ``5.``, ``01``: JSON has no such numbers)."""
    marked = json | decimal
    if not marked.any():
        return True
    if 2 * marked.sum() <= len(marked):  # few columns (a text line's verdict_pct): only those are looked at
        begin, stop, json = begin[:, marked], stop[:, marked], json[marked]
        marked = marked[marked]
    first = text[begin]
    dot, zero = ord("."), ord("0")
    if (((first == dot) | (text[stop - 1] == dot)) & marked).any():
        return False
    zeros = (first == zero) & json
    return not zeros.any() or not (text[begin[zeros] + 1] >= zero).any()


_TENS = [10**k for k in range(1, 19)]


def _digits_only(values: Any, lengths: Any, np: Any) -> bool:
    """Whether each of ``values`` (read from words of ``lengths`` characters) was written with
    digits only and no leading zero: then it has as many digits as its word has characters."""
    if values.dtype.kind == "f":
        if not (values < 2.0**53).all():  # beyond where every whole number is a float
            return False
        digits = np.searchsorted(np.asarray(_TENS, dtype=np.float64), values, side="right") + 1
    else:
        digits = np.searchsorted(np.asarray(_TENS, dtype=np.int64), values, side="right") + 1
    return bool((digits == lengths).all())


def learn_layout(line: bytes) -> Layout | None:
    """The layout of ``line``'s shape, found by writing stand-in numbers into it one word at a time
    and reading it with the line patterns. ``None`` when the line is not a listener line or a word
    holds several numbers that matter (``1.0E-5``): lines of that shape take the line patterns."""
    base = _fields(line)
    if base is None:
        return None
    is_json = line.lstrip(JSON_SPACE.encode())[:1] == b"{"
    separators = _JSON_SEPARATORS if is_json else _TEXT_SEPARATORS
    parts = re.split(b"([" + re.escape(separators) + b"])", line)  # words, and the separators between them
    words = parts[0::2]
    places = _json_places(line) if is_json else b""
    values: dict[int, str] = {}
    fixed: dict[int, str] = {}
    fixed_at: dict[int, tuple[int, ...]] = {}
    around: dict[int, tuple[bytes, bytes]] = {}
    longest: dict[int, int] = {}
    empty: list[int] = []
    loose: list[int] = []
    whole_numbers: list[int] = []
    json_numbers: list[int] = []
    decimals: list[int] = []
    checked: list[int] = []
    dropped: list[int] = []
    dropped_so_far = 0
    start = 0  # where the word starts in the line
    for at, word in enumerate(words):
        runs = list(_RUN.finditer(word))
        dropped.append(dropped_so_far)
        dropped_so_far += len(word) - sum(len(run.group()) for run in runs)
        where = {places[start + run.start()] for run in runs} if is_json else {_OUTSIDE}
        start += len(word) + 1
        if not runs:
            empty.append(at)
            continue
        effects = [_effect(parts, at, run, base) for run in runs]
        digits = b"".join(run.group() for run in runs).decode()
        if all(effect is None for effect in effects):  # digits that count for nothing
            if is_json and (len(runs) > 1 or _IN_KEY in where):
                fixed[at], fixed_at[at] = digits, _places(runs)  # a key's digits, or several numbers in one word
            elif len(runs) > 1:
                loose.append(at)
            else:
                run = runs[0]
                if run.start() or run.end() < len(word):
                    around[at] = (word[: run.start()], word[run.end() :])
                if is_json and _OUTSIDE in where:
                    checked.append(at)
                    json_numbers.append(at)
                    longest[at] = _JSON_DIGITS
            continue
        if len(runs) > 1:
            return None
        if effects[0] == _CHANGES_MORE:  # a label's digits (``gen0``, ``p95``): every line must have the same
            fixed[at], fixed_at[at] = digits, _places(runs)
            continue
        if is_json and where != {_OUTSIDE}:
            return None
        run = runs[0]
        column = values[at] = str(effects[0])
        if run.start() or run.end() < len(word):
            around[at] = (word[: run.start()], word[run.end() :])
        if is_json:
            json_numbers.append(at)
            longest[at] = _JSON_DIGITS
            if column == "iteration":  # a JSON line's iteration is a whole number
                whole_numbers.append(at)
        elif column in INTEGER_COLUMNS or _GC_COUNT.fullmatch(column):  # ``\d+`` in the line pattern
            whole_numbers.append(at)
            if column == "device":
                longest[at] = _DEVICE_DIGITS
        elif column == "verdict_pct":  # ``\d+(?:\.\d+)?`` in the line pattern
            decimals.append(at)
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
        empty=tuple(empty), order=tuple(base), fixed_at=fixed_at, around=around, loose=tuple(loose),
        dropped=tuple(dropped), dropped_per_line=dropped_so_far, whole_numbers=tuple(whole_numbers),
        json_numbers=tuple(json_numbers), decimals=tuple(decimals), longest=longest, checked=tuple(checked),
    )


def _places(runs: list[re.Match[bytes]]) -> tuple[int, ...]:
    """Where each digit or dot of ``runs`` stands in their word."""
    return tuple(at for run in runs for at in range(run.start(), run.end()))


def _json_places(line: bytes) -> bytes:
    """For each byte of ``line`` (a JSON object), whether it stands outside strings, in a string
    value or in a key (``_OUTSIDE``, ``_IN_VALUE``, ``_IN_KEY``)."""
    places = bytearray(len(line))
    at = line.find(b'"')
    while at >= 0:
        end = at + 1
        while end < len(line) and line[end] != ord('"'):
            end += 2 if line[end] == ord("\\") else 1
        end = min(end, len(line) - 1)
        kind = _IN_KEY if line[end + 1 :].lstrip(b" \t\r\n")[:1] == b":" else _IN_VALUE
        places[at : end + 1] = bytes([kind]) * (end + 1 - at)
        at = line.find(b'"', end + 1)
    return bytes(places)


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
