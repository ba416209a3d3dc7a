"""Read listener lines back: trainperf's own lines, its JSON lines files, and Deeplearning4j logs."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["ParsedLog", "parse_log"]

#: The fixed columns, in order; ``gc.<name>.count`` / ``gc.<name>.ms`` follow per collector.
COLUMNS = (
    "iteration", "etl_ms", "iteration_ms", "samples_per_sec", "batches_per_sec", "score", "device",
    "iteration_p50_ms", "iteration_p95_ms", "iteration_max_ms", "etl_max_ms", "epoch", "rank", "warmup",
    "verdict", "verdict_pct",
)
_NUMERIC = frozenset(COLUMNS) - {"verdict", "warmup"}

_NUM = r"([^ ;\n]*)"  # checked when converted: what is not a number becomes missing
# Every field but ``iteration N`` is optional, as either listener leaves out what it was told
# not to report.
_BODY = (
    r"iteration (\d+);"
    rf"(?: iteration time: {_NUM} ms;)?"
    rf"(?: samples/sec: {_NUM};)?"
    rf"(?: batches/sec: {_NUM};)?"
    rf"(?: score: {_NUM};)?"
    r"(?: GC: ((?:\[[^\]\n]*\](?:, )?)*);)?"
    rf"(?: iteration p50: {_NUM} ms;)?"
    rf"(?: p95: {_NUM} ms;)?"
    rf"(?: max: {_NUM} ms;)?"
    rf"(?: ETL max: {_NUM} ms;)?"
    r"(?: epoch: (\d+);)?"
    r"(?: rank: (\d+);)?"
    r"( warm-up;)?"
    r"(?: verdict: ([\w-]+) \((?:(\d+(?:\.\d+)?)%)?[^\n]*\);)?"
    r"[^\n]*"  # fields added after these are tolerated
)
# The fast pattern starts with a literal, which the engine finds with a plain substring search, so
# whatever stands before the fields (timestamps, levels, logger names) costs almost nothing. The
# optional ``Device: [n]; `` prefix is read with fixed-width look-behinds (up to 4 digits).
_DEVICE = "|".join(rf"(?<=Device: \[(\d{{{w}}})\]; ETL: )" for w in range(1, 5))
_FAST = re.compile(rf"ETL: (?:{_DEVICE})?{_NUM} ms; {_BODY}")
# The general pattern also reads lines without ``ETL`` (report_etl=False); it is slower, so it runs
# only when such lines exist.
_GENERAL = re.compile(rf"^[^\n]*?(?:Device: \[(\d+)\]; )?(?:ETL: {_NUM} ms; )?{_BODY}", re.MULTILINE)
_GROUPS = (
    "device", "etl_ms", "iteration", "iteration_ms", "samples_per_sec", "batches_per_sec", "score", "gc",
    "iteration_p50_ms", "iteration_p95_ms", "iteration_max_ms", "etl_max_ms", "epoch", "rank", "warmup",
    "verdict", "verdict_pct",
)
# ``[PS Scavenge: 2 (1ms)]``, ``[gen0: 3 (0.41ms)]``, ``[cuda_alloc_retries: 1]``; a newline marks a line's end.
_GC = re.compile(r"\[([^:\]\n]+): (\d+)(?: \(" + _NUM + r" ?ms\))?\]|(\n)")


def _to_float(text: Any) -> float | None:
    if text is None or text == "":
        return None
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return float(text)  # float() reads NaN, Infinity, inf
    except ValueError:
        return None


@dataclass
class ParsedLog:
    """Columns parsed from a log, one entry per listener line, and what was skipped.

    Values are kept as the text the log holds until asked for: :meth:`column` converts one column
    to numbers, :meth:`to_pandas` converts all of them at once, vectorised.
    """

    raw: dict[str, list[Any]] = field(default_factory=dict)
    rows: int = 0
    json_rows: int = 0
    skipped: int = 0
    truncated: int = 0

    def __len__(self) -> int:
        return self.rows

    @property
    def columns(self) -> list[str]:
        return list(self.raw)

    def column(self, name: str) -> list[Any]:
        """One column, numbers as floats (``None`` where missing), ``verdict`` as text."""
        if name not in self.raw:
            raise KeyError(f"no column {name!r}; columns are {self.columns}")
        values = self.raw[name]
        if name in ("verdict",):
            return [v or None for v in values]
        if name == "warmup":
            return [bool(v) for v in values]
        return [_to_float(v) for v in values]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        converted = {name: self.column(name) for name in self.raw}
        for i in range(self.rows):
            yield {name: values[i] for name, values in converted.items()}

    @staticmethod
    def _read(pd: Any, text: str, names: list[str], dtypes: dict[str, str]) -> Any:
        return pd.read_csv(
            io.StringIO(text), sep="\x1f", header=None, names=names, dtype=dtypes, quoting=3, engine="c"
        )

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` with one row per listener line.

        The text values go through pandas' C CSV reader in one pass, which is what makes this fast.
        """
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("to_pandas needs pandas: pip install 'trainperf[pandas]'") from exc
        with _no_cyclic_gc():
            return self._to_pandas(pd)

    def _to_pandas(self, pd: Any) -> Any:
        names = list(self.raw)
        if not self.rows:
            return pd.DataFrame({name: pd.Series(dtype="float64") for name in [*names, "run"]})
        columns = [self.raw[name] for name in names]
        cleaned = []
        for values in columns:
            if self.json_rows:
                head = ["" if v is None else ("1" if v is True else str(v)) for v in values[: self.json_rows]]
                values = head + values[self.json_rows :]
            cleaned.append(values)
        text = "\n".join(map("\x1f".join, zip(*cleaned, strict=True)))
        dtypes = {name: ("object" if name in ("verdict", "warmup") else "float64") for name in names}
        try:
            frame = self._read(pd, text, names, dtypes)
        except ValueError:
            # a stray non-number somewhere: read everything as text, then coerce column by column
            frame = self._read(pd, text, names, dict.fromkeys(names, "object"))
            for name in names:
                if dtypes[name] == "float64":
                    frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
        if "warmup" in frame:
            frame["warmup"] = frame["warmup"].notna()
        for name in ("iteration", "epoch", "rank", "device"):
            if name in frame and frame[name].notna().all():
                frame[name] = frame[name].astype("int64")
        # a log can hold several runs: a new one starts where the iteration count goes back
        frame["run"] = (frame["iteration"].diff() <= 0).cumsum().astype("int64")
        return frame


def _read_text(source: str | os.PathLike[str] | IO[Any] | Iterable[str]) -> tuple[str, bool]:
    """The text and whether its last line was complete (ended by a newline)."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise OSError(f"cannot read log {str(path)!r}: {exc.strerror or exc}") from exc
        text = data.decode("utf-8", errors="replace")
        return text, text.endswith("\n") or not text
    if hasattr(source, "read"):
        content = source.read()
        text = content.decode("utf-8", errors="replace") if isinstance(content, bytes) else str(content)
        return text, text.endswith("\n") or not text
    if isinstance(source, Iterable):
        lines = [ln.decode("utf-8", errors="replace") if isinstance(ln, bytes) else str(ln) for ln in source]
        return "".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines), True
    raise TypeError(f"source must be a path, a file object or lines, got {type(source).__name__}")


def parse_log(source: str | os.PathLike[str] | IO[Any] | Iterable[str]) -> ParsedLog:
    """Parse listener lines from a log.

    Reads trainperf's lines (whatever logging prefix stands before them), trainperf's JSON lines
    files, and Deeplearning4j ``PerformanceListener`` lines, with their logger prefix, the optional
    ``Device: [n]; `` prefix, ``NaN``/``Infinity`` and collectors such as ``PS Scavenge``. Other
    lines are skipped and counted in :attr:`ParsedLog.skipped`; a cut-off last line (a file whose
    writer crashed) is skipped and counted in :attr:`ParsedLog.truncated`. Nothing in the text
    makes it raise.

    Args:
        source: a path, a text or binary file object, or an iterable of lines.

    Raises:
        OSError: the path cannot be read (the message names it).
    """
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
    text, complete = _read_text(source)
    truncated = 0
    if not complete:
        text = text[: text.rfind("\n") + 1]
        truncated = 1
    total_lines = text.count("\n")
    json_raw: dict[str, list[Any]] = {}
    json_rows = 0
    if text.lstrip()[:1] == "{" or "\n{" in text:
        json_raw, json_rows, text = _split_json_lines(text)
    matches, shift = _find(text)
    n = json_rows + len(matches)
    columns: dict[str, list[Any]] = {}
    for i, name in enumerate(_GROUPS):
        if name == "gc":
            continue
        if name == "device" and shift:
            found = [m[0] or m[1] or m[2] or m[3] for m in matches] if "Device: [" in text else [""] * len(matches)
        else:
            at = i + shift
            found = [m[at] for m in matches]
        columns[name] = json_raw.get(name, [None] * json_rows) + found
    gc_columns = {k: v + [""] * len(matches) for k, v in json_raw.items() if k.startswith("gc.")}
    gc_at = _GROUPS.index("gc") + shift
    _parse_gc([m[gc_at] for m in matches], json_rows, n, gc_columns)
    raw = {name: columns[name] for name in COLUMNS if name == "iteration" or any(columns[name])}
    raw.update(gc_columns)
    return ParsedLog(raw=raw, rows=n, json_rows=json_rows, skipped=total_lines - n, truncated=truncated)


def _find(text: str) -> tuple[list[tuple[str, ...]], int]:
    """The listener lines' captured fields and the offset of ``device`` in each tuple: the fast
    pattern holds four device groups (0-3, of which one at most matched), the general one holds one."""
    # Every listener line has an ETL field unless ``iteration N;`` stands without ``ms; `` before it.
    numbered = text.count("iteration ") - text.count("iteration time") - text.count("iteration p50")
    if numbered == text.count(" ms; iteration "):
        return _FAST.findall(text), 3
    return _GENERAL.findall(text), 0


def _parse_gc(texts: list[str], start: int, n: int, out: dict[str, list[Any]]) -> None:
    """Fill ``gc.<name>.count`` / ``gc.<name>.ms`` columns for rows ``start`` to ``n`` from GC fields."""
    if not any(texts):
        return
    if _parse_gc_uniform(texts, start, n, out):
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


def _parse_gc_uniform(texts: list[str], start: int, n: int, out: dict[str, list[Any]]) -> bool:
    """The common case, every line naming the same collectors in the same order: one pattern built
    for that layout reads all lines in a single pass. Returns False when the layout varies."""
    names = [m[0] for m in _GC.findall(texts[0]) if m[0]]
    if not names or any(f"gc.{name}.count" in out for name in names):
        return False
    layout = re.compile(
        "^"
        + ", ".join(rf"\[{re.escape(name)}: (\d+)(?: \({_NUM} ?ms\))?\]" for name in names)
        + "$",
        re.MULTILINE,
    )
    found = layout.findall("\n".join(texts))
    if len(found) != len(texts):
        return False
    for i, name in enumerate(names):
        out[f"gc.{name}.count"] = [None] * start + [m[2 * i] for m in found]
        out[f"gc.{name}.ms"] = [None] * start + [m[2 * i + 1] for m in found]
    return True


def _split_json_lines(text: str) -> tuple[dict[str, list[Any]], int, str]:
    """Columns of the JSON lines in ``text``, their count, and the other lines."""
    rest: list[str] = []
    raw: dict[str, list[Any]] = {}
    rows = 0
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped.startswith("{"):
            rest.append(line)
            continue
        try:
            obj = json.loads(stripped)
        except ValueError:
            continue
        if not isinstance(obj, dict) or "iteration" not in obj:
            continue
        for key, value in _flatten_json(obj).items():
            raw.setdefault(key, [None] * rows).append(value)
        rows += 1
        for values in raw.values():
            if len(values) < rows:
                values.append(None)
    return raw, rows, "\n".join(rest)


def _flatten_json(obj: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "gc" and isinstance(value, dict):
            for name, stat in value.items():
                if isinstance(stat, dict):
                    flat[f"gc.{name}.count"] = stat.get("count")
                    flat[f"gc.{name}.ms"] = stat.get("ms")
        elif key == "verdict":
            flat["verdict"] = value.get("kind") if isinstance(value, dict) else value
            flat["verdict_pct"] = value.get("share") if isinstance(value, dict) else None
        elif key == "warmup":
            flat["warmup"] = "1" if value else ""
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[key] = value
        elif key in _NUMERIC:
            flat[key] = value
    return flat
