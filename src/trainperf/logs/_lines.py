"""The line patterns: read listener fields out of any text, line by line, whatever stands around them.

This is the reader that accepts every layout (missing fields, other collectors, odd values); the bulk
reader in :mod:`trainperf.logs._bulk` handles the regular majority of a large log faster and hands
the rest to this one.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..records import DL4J_FIELDS, TRAINPERF_FIELDS, LineField

__all__ = [
    "COLUMNS", "CUT_LINE", "INTEGER_COLUMNS", "TextRows", "parse_json_line", "parse_line", "scan_lines",
    "split_json_lines", "to_float",
]

#: The fixed columns, in order; ``gc.<name>.count`` / ``gc.<name>.ms`` follow per collector.
COLUMNS = (
    "iteration",
    *(f.name for f in DL4J_FIELDS if f.name != "iteration"),
    "device",
    *(f.name for f in TRAINPERF_FIELDS),
    "warmup",
    "verdict",
    "verdict_pct",
)
#: Columns whose values are whole numbers: a DataFrame holds them as integers where none is missing.
INTEGER_COLUMNS = (*(f.name for f in (*DL4J_FIELDS, *TRAINPERF_FIELDS) if f.integer), "device")
TEXT_COLUMNS = ("verdict", "warmup")
_NUMERIC = frozenset(COLUMNS) - set(TEXT_COLUMNS)

#: A listener line cut in the middle: it has the ``ETL:`` field but does not end with ``;``, or
#: another line's ``ETL:`` follows on the same line (a crashed writer's cut line, then what the
#: restarted one wrote, with no newline between them).
CUT_LINE = re.compile(rb"ETL: [^\nE]*+(?:E(?!TL: )[^\nE]*+)*+(?:(?<![;\s])(?:\n|\Z)|(?=ETL: ))")  # one pass a line

_NUM = r"([^ ;\n]*)"  # checked when converted: what is not a number becomes missing
#: A line naming more collectors than this is not a listener line (no runtime has so many; reading
#: them would only cost memory).
MAX_COLLECTORS = 64


def _optional(f: LineField) -> str:
    value = r"(\d+)" if f.integer else _NUM
    return f"(?: {re.escape(f.label)}{value}{re.escape(f.unit)};)?"


def _free_text(excluded: str = "") -> str:
    """A pattern for a field's free text: anything on its line but ``excluded`` and the start of
    another listener line (``ETL: ``, or ``iteration N;`` where lines have no ``ETL``). Such a start
    is a restarted run's line glued to the line that its crashed run left cut, never part of a field:
    the cut line's fields end there, so the cut line is no record and the restarted one is read.
    Written as runs of plain characters between the letters that may start a line, so that it gives
    back one character at a time, never tries every way to split a run."""
    plain = rf"[^\n{re.escape(excluded)}Ei]*"
    return rf"{plain}(?:(?:E(?!TL: )|i(?!teration \d+;)){plain})*"


_ETL, _ITERATION, *_DL4J_REST = DL4J_FIELDS
# Every field but ``iteration N`` is optional, as either listener leaves out what it was told
# not to report.
_BODY = (
    rf"{re.escape(_ITERATION.label)}(\d+);"
    + "".join(map(_optional, _DL4J_REST))
    + rf"(?: GC: ((?:\[{_free_text(']')}\](?:, )?){{0,{MAX_COLLECTORS}}}+);)?"
    + "".join(map(_optional, TRAINPERF_FIELDS))
    + r"( warm-up;)?"
    + rf"(?: verdict: ([\w-]+) \((?:(\d+(?:\.\d+)?)%)?{_free_text()}\);)?"
    # Fields added after these are tolerated when they have a field's shape, ``label: value;``, so
    # that a line is a record only when everything after ``iteration N;`` is fields: another
    # logger's ``iteration 500; loss 0.2;`` is not one, and neither is a listener line that a
    # logger prefix holds (the real line's ``iteration N;`` that follows is not such a field).
    + rf"(?: (?!GC: )[^;\n:]+: {_free_text(';')};)*+"
    + r"[ \t\r]*(?=\n|\Z)"  # a line is whole when it ends with the ``;`` after its last field
)
# The fast pattern starts with a literal, which the engine finds with a plain substring search, so
# whatever stands before the fields (timestamps, levels, logger names) costs almost nothing. The
# optional ``Device: [n]; `` prefix is read with fixed-width look-behinds (up to 4 digits).
_DEVICE = "|".join(rf"(?<=Device: \[(\d{{{w}}})\]; ETL: )" for w in range(1, 5))
_FAST = re.compile(rf"ETL: (?:{_DEVICE})?{_NUM} ms; {_BODY}", re.ASCII)
# The general pattern also reads lines without ``ETL`` (report_etl=False); it is slower, so it runs
# only when such lines exist.
_GENERAL = re.compile(rf"^[^\n]*?(?:Device: \[(\d+)\]; )?(?:ETL: {_NUM} ms; )?{_BODY}", re.MULTILINE | re.ASCII)
#: The fast pattern's device groups (one per look-behind width); the general pattern has one.
_DEVICE_GROUPS = 4
_GROUPS = (
    "device", _ETL.name, _ITERATION.name, *(f.name for f in _DL4J_REST), "gc", *(f.name for f in TRAINPERF_FIELDS),
    "warmup", "verdict", "verdict_pct",
)
# ``[PS Scavenge: 2 (1ms)]``, ``[gen0: 3 (0.41ms)]``, ``[cuda_alloc_retries: 1]``; a newline marks a line's end.
_GC = re.compile(r"\[([^:\]\n]+): (\d+)(?: \(" + _NUM + r" ?ms\))?\]|(\n)", re.ASCII)


#: What a field's text can be for it to be a number: decimals (with an exponent, as Java writes
#: ``1.0E-5``), and ``NaN``/``Infinity`` as Deeplearning4j writes them or ``nan``/``inf`` as Python does.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:Infinity|inf|Inf)|NaN|nan", re.ASCII)


_INF = float("inf")


def to_float(text: Any) -> float | None:
    """A number from a field's text or a JSON value; ``None`` for anything else, and for ``NaN``
    (which a DataFrame cannot tell from a missing value, so neither view does)."""
    value = read_number(text)
    return None if value is None or value != value else value


def read_number(text: Any) -> float | None:
    """A number from a field's text or a JSON value, ``NaN`` included; ``None`` for anything else."""
    if text is None or isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text)
    if not isinstance(text, str) or not _NUMBER.fullmatch(text):
        return None
    value = float(text)
    if value in (_INF, -_INF) and text[-1].isdigit():
        return None  # digits past what a float holds are not infinity
    return value


@dataclass
class TextRows:
    """Field texts of listener lines, column by column, as the line patterns found them.

    Values stay text until asked for (JSON rows hold numbers); :meth:`to_frame` converts every
    column at once through pandas' C reader. ``lines`` numbers each row's line when asked for.
    """

    raw: dict[str, list[Any]] = field(default_factory=dict)
    rows: int = 0
    lines: list[int] | None = None
    #: JSON records cut in the middle with another one written right after them on the same line
    cut: int = 0

    def column(self, name: str) -> list[Any]:
        """One column: numbers as floats (``None`` where missing), ``verdict`` as text, ``warmup`` as bool."""
        values = self.raw[name]
        if name == "verdict":
            return [v or None for v in values]
        if name == "warmup":
            return [bool(v) for v in values]
        return list(map(to_float, values))

    def to_frame(self, pd: Any) -> Any:
        """A DataFrame: numbers as float64, ``verdict`` as text, ``warmup`` as bool; every value as
        :meth:`column` reads it, so the two views cannot disagree."""
        import numpy as np

        data: dict[str, Any] = {}
        for name in self.raw:
            values = self.column(name)
            if name in TEXT_COLUMNS:
                data[name] = np.asarray(values, dtype=object if name == "verdict" else bool)
            else:
                data[name] = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
        return pd.DataFrame(data, index=pd.RangeIndex(self.rows))


def scan_lines(text: str, *, numbered: bool = False) -> TextRows:
    """The listener lines in ``text`` (lines that are not listener lines are passed over).

    With ``numbered``, :attr:`TextRows.lines` gives each row's line number in ``text`` (from 0).
    """
    matches, starts = _find(text, numbered)
    columns: dict[str, list[Any]] = {}
    for i, name in enumerate(_GROUPS):
        if name == "gc":
            continue
        if name == "device":
            found = [m[0] or m[1] or m[2] or m[3] for m in matches] if "Device: [" in text else [""] * len(matches)
        else:
            at = i + _DEVICE_GROUPS - 1
            found = [m[at] for m in matches]
        columns[name] = found
    gc_columns: dict[str, list[Any]] = {}
    gc_at = _GROUPS.index("gc") + _DEVICE_GROUPS - 1
    _parse_gc([m[gc_at] for m in matches], 0, len(matches), gc_columns)
    raw = {name: columns[name] for name in COLUMNS if name == "iteration" or any(columns[name])}
    raw.update(gc_columns)
    lines = None
    if numbered:
        lines = _line_numbers(text, starts)
    return TextRows(raw=raw, rows=len(matches), lines=lines)


def is_gc_ms(column: str) -> bool:
    """Whether ``column`` is a collector's milliseconds (which follow its count)."""
    return column.startswith("gc.") and column.endswith(".ms")


def written(value: Any) -> bool:
    """Whether a field's raw value says something (``NaN`` does; a missing field does not)."""
    return value is not None and value != ""


def _line_numbers(text: str, starts: list[int]) -> list[int]:
    """The line number (from 0) of each offset in ``starts``."""
    newlines = [m.start() for m in re.finditer("\n", text)]
    return [bisect.bisect_left(newlines, start) for start in starts]


def parse_line(line: str) -> dict[str, Any] | None:
    """The fields of one line as text (``None`` if it is not a listener line)."""
    rows = scan_lines(line)
    if rows.rows != 1:
        return None
    return {name: values[0] for name, values in rows.raw.items() if values[0] not in ("", None)}


def _find(text: str, numbered: bool) -> tuple[list[tuple[str, ...]], list[int]]:
    """The listener lines' captured fields, in the fast pattern's layout (four device groups, of
    which one at most matched), and, when ``numbered`` or when both patterns ran, where each match
    starts.

    The fast pattern reads the lines that have an ``ETL`` field. Only when the text holds more
    ``iteration N`` than the fast pattern found does the general one read the lines it left, as
    some of them may be listener lines without ``ETL`` (``report_etl=False``)."""
    candidates = text.count("iteration ") - text.count("iteration time") - text.count("iteration p50")
    if not numbered:
        fast = _FAST.findall(text)
        if len(fast) >= candidates:
            return fast, []
    found = [(m.start(), m.groups("")) for m in _FAST.finditer(text)]
    if len(found) < candidates:
        found = _add_lines_without_etl(text, found)
    return [groups for _, groups in found], [start for start, _ in found]


def _add_lines_without_etl(text: str, found: list[tuple[int, tuple[str, ...]]]) -> list[tuple[int, tuple[str, ...]]]:
    """``found`` (the fast pattern's matches with their offsets) and the general pattern's matches on
    the lines that the fast pattern did not read, in the order of the text."""
    taken = {text.rfind("\n", 0, start) for start, _ in found}  # each read line, by the newline before it
    more = [
        (m.start(), (m.group(1) or "", "", "", "", *m.groups("")[1:]))
        for m in _GENERAL.finditer(text)
        if text.rfind("\n", 0, m.start()) not in taken
    ]
    return sorted(found + more, key=lambda item: item[0]) if more else found


def _parse_gc(texts: list[str], start: int, n: int, out: dict[str, list[Any]]) -> None:
    """Fill ``gc.<name>.count`` / ``gc.<name>.ms`` columns for rows ``start`` to ``n`` from GC fields."""
    if not any(texts):
        return
    if _parse_gc_uniform(texts, start, out):
        return
    row = start
    for name, count, ms, newline in _GC.findall("\n".join(texts) + "\n"):
        if newline:
            row += 1
            continue
        counts = out.get(f"gc.{name}.count")
        if counts is None:
            counts = out[f"gc.{name}.count"] = [None] * start + [""] * (n - start)
            out[f"gc.{name}.ms"] = [None] * start + [""] * (n - start)
        counts[row] = count
        out[f"gc.{name}.ms"][row] = ms


def _parse_gc_uniform(texts: list[str], start: int, out: dict[str, list[Any]]) -> bool:
    """The common case, every line naming the same collectors in the same order: one pattern built
    for that layout reads all lines in a single pass. Returns False when the layout varies."""
    names = [m[0] for m in _GC.findall(texts[0]) if m[0]]
    if not names or any(f"gc.{name}.count" in out for name in names):
        return False
    layout = re.compile(
        "^"
        + ", ".join(rf"\[{re.escape(name)}: (\d+)(?: \({_NUM} ?ms\))?\]" for name in names)
        + "$",
        re.MULTILINE | re.ASCII,
    )
    found = layout.findall("\n".join(texts))
    if len(found) != len(texts):
        return False
    for i, name in enumerate(names):
        out[f"gc.{name}.count"] = [None] * start + [m[2 * i] for m in found]
        out[f"gc.{name}.ms"] = [None] * start + [m[2 * i + 1] for m in found]
    return True


#: What may stand around a JSON line's object: JSON's own whitespace, less the newline that ends it.
JSON_SPACE = " \t\r"


def split_json_lines(text: str) -> tuple[TextRows, str, list[int]]:
    """The rows of the JSON lines in ``text`` (:attr:`TextRows.lines` numbering their lines), the
    other lines, and the line number of each of those."""
    rest: list[str] = []
    rest_lines: list[int] = []
    json_lines: list[int] = []
    raw: dict[str, list[Any]] = {}
    rows = 0
    cut = 0
    for number, line in enumerate(text.split("\n")):
        stripped = line.strip(JSON_SPACE)
        if not stripped.startswith("{"):
            rest.append(line)
            rest_lines.append(number)
            continue
        fields = _json_fields(stripped)
        if fields is None and (after := stripped.rfind(_JSON_START, 1)) > 0:
            # a record cut in the middle (its writer crashed), then the restarted writer's record
            fields = _json_fields(stripped[after:])
            cut += fields is not None
        if fields is None:  # not a JSON record: perhaps a listener line behind a logger prefix with a ``{``
            rest.append(line)
            rest_lines.append(number)
            continue
        for key, value in fields.items():
            values = raw.get(key)
            if values is None:
                if value is None or value == "":
                    continue  # a column starts where a line first gives it a value
                values = raw[key] = [None] * rows
            values.append(value)
        rows += 1
        json_lines.append(number)
        for values in raw.values():
            if len(values) < rows:
                values.append(None)
    # a column is there when some line has a value for it, as with the other kinds of line
    ordered = {
        name: raw[name]
        for name in itertools.chain(COLUMNS, raw)
        if name in raw and (name == "iteration" or any(v is not None and v != "" for v in raw[name]))
    }
    for name in [name for name in raw if name.startswith("gc.") and name.endswith(".count") and name in ordered]:
        ordered[name[:-5] + "ms"] = raw.get(name[:-5] + "ms", [None] * rows)  # a collector's columns go together
    return TextRows(raw=ordered, rows=rows, lines=json_lines, cut=cut), "\n".join(rest), rest_lines


#: How a JSON record starts as trainperf writes it (its first key).
_JSON_START = '{"iteration":'


def parse_json_line(line: str) -> dict[str, Any] | None:
    """The fields of one JSON line (``None`` if it is not a record)."""
    fields = _json_fields(line.strip(JSON_SPACE))
    if fields is None:
        return None
    return {name: value for name, value in fields.items() if value is not None and value != ""}


def _json_fields(line: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the interpreter allows
        return None
    if not isinstance(obj, dict):
        return None
    iteration = obj.get("iteration")
    if isinstance(iteration, bool) or not isinstance(iteration, int) or not 0 <= iteration < 2**63:
        return None  # an iteration is a whole number, as the text lines' ``iteration N;`` is
    gc = obj.get("gc")
    if isinstance(gc, dict) and len(gc) > MAX_COLLECTORS:
        return None
    return _flatten_json(obj)


#: Characters that cannot stand in a name or a text field: they would split a row in text form.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")
#: What a verdict's kind can be.
_KIND = re.compile(r"[a-z][a-z-]{0,31}")


def _json_number(value: Any) -> int | float | None:
    """A JSON value as a record's number: as written when it is a number a float can hold, the
    float of a number written as text (``"NaN"``); ``None`` for booleans, other types and integers
    too big for a float."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2.0**1023 else None
    if isinstance(value, str):
        return read_number(value)
    return None


def _flatten_json(obj: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in obj.items():
        if not isinstance(key, str) or _CONTROL.search(key):
            continue
        if key == "gc" and isinstance(value, dict):
            for name, stat in value.items():
                if isinstance(stat, dict) and isinstance(name, str) and name and not _CONTROL.search(name):
                    flat[f"gc.{name}.count"] = _json_number(stat.get("count"))
                    flat[f"gc.{name}.ms"] = _json_number(stat.get("ms"))
        elif key == "verdict":
            kind = value.get("kind") if isinstance(value, dict) else value
            flat["verdict"] = kind if isinstance(kind, str) and _KIND.fullmatch(kind) else None
            flat["verdict_pct"] = _json_number(value.get("share")) if isinstance(value, dict) else None
        elif key == "warmup":
            flat["warmup"] = "1" if value is True else ""
        elif key in _NUMERIC or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            flat[key] = _json_number(value)
    return flat
