"""Argument checks shared by the public calls: each names the argument and the value it got."""

from __future__ import annotations

import math
import operator
from typing import Any

__all__: list[str] = []


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


def is_int(value: object) -> bool:
    """An integer in the ``operator.index`` sense (numpy and 0-d tensor integers too), not a bool."""
    if isinstance(value, (bool, float)):
        return False
    try:
        operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def check_int(name: str, value: object, *, minimum: int | None = 0, optional: bool = False) -> Any:
    """``value`` as an int at least ``minimum``; ``None`` passes when ``optional``."""
    if value is None and optional:
        return None
    if not is_int(value):
        what = "an int" if minimum is None else f"an int >= {minimum}"
        raise TypeError(f"{name} must be {what}{' or None' if optional else ''}, got {value!r}")
    number = operator.index(value)  # type: ignore[arg-type]
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return number


def check_seconds(name: str, value: object) -> float:
    """A finite, non-negative number of seconds."""
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}") from None
    if not (math.isfinite(seconds) and seconds >= 0.0):
        raise ValueError(f"{name} must be a finite, non-negative number of seconds, got {value!r}")
    return seconds


def check_callable(name: str, value: object, what: str = "callable") -> Any:
    if not callable(value):
        raise TypeError(f"{name} must be {what}, got {value!r}")
    return value


def check_str(name: str, value: object, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {value!r}")
    if not empty and not value:
        raise ValueError(f"{name} must be a non-empty str, got {value!r}")
    return value


def check_part(name: str, seconds: float) -> None:
    """A named part's name and seconds (one chained test when they are fine: adapters call this per iteration)."""
    if type(name) is not str or not name:
        check_str("name", name, empty=False)
    try:
        if 0.0 <= seconds < math.inf:
            return
    except TypeError:
        pass
    check_seconds("seconds", seconds)


def check_clock(reading: object) -> float:
    """A clock's first reading is a finite number: a clock that gives NaN or infinity would make
    every figure NaN; said at once, naming the argument."""
    if isinstance(reading, bool) or not isinstance(reading, (int, float)) or not math.isfinite(reading):
        raise ValueError(f"clock must return finite seconds (a monotonic clock), got {reading!r}")
    return reading
