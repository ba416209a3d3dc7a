"""One strict JSON encoder for every line trainperf writes (the JSON-lines sink, a run directory):
no NaN or Infinity, which many readers reject, and compact."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from ._record import PerformanceRecord

__all__: list[str] = []


def json_default(value: Any) -> Any:
    return str(value)


#: How non-finite numbers are written: strict JSON has no NaN or Infinity, and many readers (Node,
#: DuckDB, log pipelines) reject the extension; :func:`trainperf.parse_log` reads these back as floats.
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def strict(value: Any) -> Any:
    """``value`` with every non-finite float replaced by its name as a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return NON_FINITE[float.__repr__(value)]  # a float subclass (numpy) has a repr of its own
    if isinstance(value, dict):
        return {key: strict(item) for key, item in value.items()}
    return value


def json_line(obj: Mapping[str, Any]) -> str:
    """``obj`` as one compact, strict JSON line, newline included.

    Example:
        >>> json_line({"loss": float("nan"), "gc": {"ms": float("inf")}, "n": 3})
        '{"loss":"NaN","gc":{"ms":"Infinity"},"n":3}\\n'
    """
    return json.dumps(strict(dict(obj)), default=json_default, separators=(",", ":"), allow_nan=False) + "\n"


def _compile_record_json() -> Callable[[PerformanceRecord], str]:
    """``json_line(record.to_dict())``, written straight from the record's slots: each field's JSON
    text is made by the code its type calls for (a finite float's ``repr``, a str's JSON string), with
    no dict of the whole record and no walk over it. A value the fast code does not expect (a NaN, a
    numpy number, a subclass) is encoded alone by the same encoder as :func:`json_line`, so the line
    is the same, byte for byte, whatever the record holds."""
    encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=json_default).encode

    def any_value(value: Any) -> str:
        return encode(strict(value))

    def gc_text(stats: tuple[Any, ...]) -> str:
        if not stats:
            return "{}"
        return any_value({s.name: {"count": s.count, "ms": s.ms} for s in stats})  # as to_dict builds it

    def verdict_text(verdict: Any) -> str:
        if verdict is None:
            return "null"
        kind, share, reason = verdict.kind, verdict.share, verdict.reason
        if type(kind) is str and type(share) is float and share - share == 0.0 and type(reason) is str:
            return f'{{"kind":{as_string(kind)},"share":{float_repr(share)},"reason":{as_string(reason)}}}'
        return any_value(dataclasses.asdict(verdict))

    scope: dict[str, Any] = {
        "_any": any_value, "_gc": gc_text, "_verdict": verdict_text, "_float": float, "_int": int, "_str": str,
        "_frepr": float_repr, "_irepr": int.__repr__, "_string": as_string, "_join": "".join,
    }
    by_type = {
        "float": "_frepr(v) if v.__class__ is _float and v - v == 0.0 else _any(v)",
        "int": "_irepr(v) if v.__class__ is _int else _any(v)",
        "str": "_string(v) if v.__class__ is _str else _any(v)",
    }
    pieces = []
    for i, f in enumerate(dataclasses.fields(PerformanceRecord)):
        key = ("{" if i == 0 else ",") + json.dumps(f.name) + ":"
        kind = str(f.type).replace(" | None", "")
        if f.name == "gc":
            value = "_gc(r.gc)"
        elif f.name == "verdict":
            value = "_verdict(r.verdict)"
        elif kind in by_type:
            value = f"('null' if (v := r.{f.name}) is None else {by_type[kind]})"
        else:  # bool, dict: rare enough, or cheap enough, for the encoder
            value = f"_any(r.{f.name})"
        pieces += [repr(key), value]
    source = f"def record_json(r):\n    return _join(({', '.join(pieces)}, '}}\\n'))\n"
    exec(source, scope)  # noqa: S102 - built from the dataclass's own field names
    compiled: Callable[[PerformanceRecord], str] = scope["record_json"]
    return compiled


float_repr: Callable[[float], str] = float.__repr__
as_string: Callable[[str], str] = json.encoder.encode_basestring_ascii

_compiled: list[Callable[[PerformanceRecord], str]] = []  # compiled at the first record, not at import


def record_json(record: PerformanceRecord) -> str:
    """``json_line(record.to_dict())``, the record's JSON line, newline included, in a third of the
    time (see :func:`_compile_record_json`; compiled at the first call, not at import)."""
    if not _compiled:
        _compiled.append(_compile_record_json())
    return _compiled[0](record)
