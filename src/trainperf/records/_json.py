"""One strict JSON encoder for every line trainperf writes (the JSON-lines sink, a run directory):
no NaN or Infinity, which many readers reject, and compact."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__: list[str] = []


def json_default(value: Any) -> Any:
    return str(value)


#: How non-finite numbers are written: strict JSON has no NaN or Infinity, and many readers (Node,
#: DuckDB, log pipelines) reject the extension; :func:`trainperf.parse_log` reads these back as floats.
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def strict(value: Any) -> Any:
    """``value`` with every non-finite float replaced by its name as a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return NON_FINITE[repr(value)]
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
