"""A run directory's lines decoded, and the checks every figure read back from them passes: for the
report and the goodput ledger's reader alike (apart from the report, whose package a listener never
loads)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_FIGURE", "MAX_WALL_S", "num", "parse", "wall", "whole"]

_decode = json.JSONDecoder().decode

#: Figures at or beyond this size are not a run's (a millisecond figure of 30,000 years): read as
#: missing, so that no sum, mean or product of the report can overflow.
MAX_FIGURE = 1e15
#: Wall times are seconds since 1970 below this (the year 5138): anything later is not a real time.
MAX_WALL_S = 1e11


def num(value: Any) -> float | None:
    """``value`` as a finite float below :data:`MAX_FIGURE` in size, else ``None`` (bools, strings,
    NaN, infinities and integers too large for a float included)."""
    if type(value) is float:  # what JSON gives most: one comparison (NaN fails it too)
        return value if -MAX_FIGURE < value < MAX_FIGURE else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return f if -MAX_FIGURE < f < MAX_FIGURE else None


def wall(value: Any) -> float | None:
    """``value`` as a wall time (seconds since 1970, not negative, before :data:`MAX_WALL_S`), else ``None``."""
    f = num(value)
    return f if f is not None and 0.0 <= f < MAX_WALL_S else None


def whole(value: Any) -> int | None:
    """``value`` as a whole number from 0 to 2**62, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**62:
        return None
    return value


def parse(line: bytes | str) -> Any:
    """The JSON value of ``line`` (UTF-8, as every run writes); ``ValueError`` for what is not JSON, not
    UTF-8, or nested deeper than the interpreter can read (a hostile line)."""
    try:
        return _decode(line.decode("utf-8") if isinstance(line, bytes) else line)
    except RecursionError:
        raise ValueError("nested too deeply") from None
