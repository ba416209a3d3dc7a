"""The text line compiled from its field table: :func:`format_line` as one function that reads each
field from the record's slot and writes it with the f-string its format calls for, instead of
walking the table and dispatching on each field's format for every record (a third of the time).
It is compiled at the first line, not at import (a few milliseconds).

What the compiled code does not expect (a NaN, an integer in a float field, a rate too small for
its decimals) is written by the field's own :meth:`LineField.render`, so the line is the same, byte
for byte, as the table describes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._format import (
    DL4J_FIELDS,
    MS_DECIMALS,
    TRAINPERF_FIELDS,
    LineField,
    capture_text,
    format_fixed,
    format_number,
    safe_name,
)
from ._record import PerformanceRecord

__all__ = ["format_line"]


def _field_code(f: LineField, scope: dict[str, Any], indent: str) -> list[str]:
    """The statements that append ``f``'s text to ``parts`` when the record has it."""
    render = f"_render_{f.name}"
    scope[render] = f.render
    label, unit = f.label.replace("{", "{{").replace("}", "}}"), f.unit
    if f.integer:
        text = f"{label!r} + _str(_int(v)) + {unit!r}" if unit else f"{label!r} + _str(_int(v))"
    elif f.decimals is None:
        text = f"{render}(v)"
    else:
        fast = repr(f"{label}{{v:.{f.decimals}f}}{unit}")
        finite = "v.__class__ is _float and v - v == 0.0"
        if f.rate:  # a rate below 10 ** (1 - decimals) but not zero keeps its significant digits
            edge = 10.0 ** (1 - f.decimals)
            finite += f" and (v >= {edge!r} or v <= {-edge!r} or v == 0.0)"
        text = f"f{fast} if {finite} else {render}(v)"
    condition = f"(v := r.{f.name}) is not None"
    if f.hide_zero:
        condition += " and v != 0"
    return [f"{indent}if {condition}:", f"{indent}    append({text})"]


def _compile() -> Callable[[PerformanceRecord], str]:
    scope: dict[str, Any] = {
        "_record": PerformanceRecord, "_str": str, "_int": int, "_float": float, "_safe": safe_name,
        "_fixed": format_fixed, "_number": format_number, "_capture": capture_text, "_ms": MS_DECIMALS,
    }
    body = ["def format_line(record):",
            "    if not isinstance(record, _record):",
            "        raise TypeError(f'record must be a PerformanceRecord, got {record!r}')",
            "    r = record",
            "    parts = []",
            "    append = parts.append"]
    for f in DL4J_FIELDS:
        body += _field_code(f, scope, "    ")
    body += [
        "    if r.gc:",
        "        append('GC: ' + ', '.join(f'[{_safe(s.name)}: {s.count} ({_fixed(s.ms, _ms)}ms)]' if s.ms is not None",
        "                                   else f'[{_safe(s.name)}: {s.count}]' for s in r.gc))",
        "    padded = bool(r.padding_share)",
    ]
    for i, f in enumerate(TRAINPERF_FIELDS):
        if f.padded_only:  # a run of them under one test
            if not (i and TRAINPERF_FIELDS[i - 1].padded_only):
                body.append("    if padded:")
            body += _field_code(f, scope, "        ")
        else:
            body += _field_code(f, scope, "    ")
    body += [
        "    if r.warmup:",
        "        append('warm-up')",
        "    verdict = r.verdict",
        "    if verdict is not None:",
        "        share = f'{verdict.share:.0f}% at most: ' if verdict.kind == 'fine' else ''",
        "        append(f'verdict: {verdict.kind} ({share}{verdict.reason})')",
        "    if r.capture is not None:",
        "        append(f'capture: {_capture(r.capture)}')",
        "    return '; '.join(parts) + ';'",
    ]
    exec("\n".join(body), scope)  # noqa: S102 - built from the line's own field table
    compiled: Callable[[PerformanceRecord], str] = scope["format_line"]
    return compiled


_compiled: list[Callable[[PerformanceRecord], str]] = []  # compiled at the first line, not at import


def format_line(record: PerformanceRecord) -> str:
    """``ETL: …; iteration N; iteration time: …; samples/sec: …; batches/sec: …; score: …; GC: …;``

    followed by trainperf's own fields (window percentiles, ETL max, epoch, warm-up, verdict).
    Fields that are ``None`` are left out, as Deeplearning4j leaves out what it was told not to report.

    Raises:
        TypeError: ``record`` is not a :class:`PerformanceRecord`.
    """
    if not _compiled:
        _compiled.append(_compile())
    return _compiled[0](record)
