"""The rows :meth:`~trainperf.ranks.RunDirSink.spans` takes, checked: an error names the row and the figure."""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["checked_span_row"]


def checked_span_row(k: int, row: Any) -> tuple[Any, ...]:
    """Row ``k`` of :meth:`RunDirSink.spans` as ``(iteration, start_wall_s, etl_s, compute_s, other_s[,
    phases])`` of an int and floats (a mapping of str to floats), or an error naming it."""
    if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) or len(row) not in (5, 6):
        raise TypeError(f"rows[{k}] must be (iteration, start_wall_s, etl_s, compute_s, other_s[, phases]), "
                        f"got {row!r}")
    try:
        iteration = -1 if isinstance(row[0], bool) else operator.index(row[0])
    except TypeError:
        iteration = -1
    if iteration < 0:
        raise ValueError(f"rows[{k}]: the iteration must be a non-negative int, got {row[0]!r}")
    start = _finite(k, "start_wall_s", row[1])
    times = [_finite(k, name, value, non_negative=True)
             for name, value in zip(("etl_s", "compute_s", "other_s"), row[2:5], strict=True)]
    if len(row) == 5:
        return (iteration, start, *times)
    phases = row[5]
    if not isinstance(phases, Mapping):
        raise TypeError(f"rows[{k}]: the phases must be a mapping of names to seconds, got {phases!r}")
    finer = {str(name): _finite(k, str(name), value, non_negative=True) for name, value in phases.items()}
    return (iteration, start, *times, finer)


def _finite(k: int, name: str, value: Any, *, non_negative: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"rows[{k}]: {name} must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or (non_negative and seconds < 0.0):
        kind = "finite, non-negative" if non_negative else "finite"
        raise ValueError(f"rows[{k}]: {name} must be a {kind} number of seconds, got {value!r}")
    return seconds
