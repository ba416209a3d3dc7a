"""The run directory's files read line by line, and the checks every figure read from them passes:
nothing in a file can raise, block the report or hold more than a line's worth of memory at once."""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._values import MAX_FIGURE as MAX_FIGURE
from .._values import MAX_WALL_S as MAX_WALL_S
from .._values import num as num
from .._values import parse as parse
from .._values import wall as wall
from .._values import whole as whole

__all__: list[str] = []

#: Lines longer than this are not a run's (a window's line is about a kilobyte): skipped, and never
#: read whole into memory.
MAX_LINE_BYTES = 1 << 20


def rounded(value: float | None, digits: int = 3) -> float | None:
    """A figure for the report: rounded to ``digits``, ``None`` when missing or not finite (never -0.0)."""
    return None if value is None or not math.isfinite(value) else round(value, digits) + 0.0


def significant(value: float | None, digits: int = 4) -> float | None:
    """A rate for the report, rounded to ``digits`` significant digits rather than decimals, so that a
    small rate (0.0001 TFLOP/s on a CPU) keeps its digits; ``None`` when missing or not finite.

    Example:
        >>> significant(0.000123456), significant(1234.56), significant(0.0)
        (0.0001235, 1235.0, 0.0)
    """
    if value is None or not math.isfinite(value):
        return None
    if value == 0:
        return 0.0
    return round(value, digits - 1 - math.floor(math.log10(abs(value)))) + 0.0


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def text(value: Any, limit: int = 200) -> str | None:
    """``value`` cut at ``limit`` characters when it is text (lone surrogates as ``?``, see
    :func:`writable`), else ``None``."""
    return writable(value[:limit]) if isinstance(value, str) else None


def writable(words: str) -> str:
    """``words`` without lone surrogates (JSON and file names hold them, UTF-8 cannot write them):
    each becomes ``?``."""
    return words.encode("utf-8", "replace").decode("utf-8")


class Unreadable:
    """The files of one rank's folder that could not be read, with the reason (said in the report)."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}


def readable(path: Path, unreadable: Unreadable) -> bool:
    """Whether ``path`` is a regular file to read; a FIFO or a device file named like a run file (which
    would block the report or never end) and a file that cannot be opened are noted, not read."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        unreadable.files[path.name] = exc.strerror or type(exc).__name__
        return False
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        unreadable.files[path.name] = f"{kind}, not read"
        return False
    return True


def lines(path: Path, unreadable: Unreadable | None = None) -> Iterator[bytes | None]:
    """The non-empty lines of ``path``, one at a time (``None`` for a line too long to be a run's)."""
    if not readable(path, unreadable if unreadable is not None else Unreadable()):
        return
    try:
        with open(path, "rb") as f:
            while True:
                line = f.readline(MAX_LINE_BYTES)
                if not line:
                    return
                if len(line) == MAX_LINE_BYTES and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # the rest of it, never held whole
                        line = f.readline(MAX_LINE_BYTES)
                    yield None
                    continue
                line = line.strip()
                if line:
                    yield line
    except OSError as exc:
        if unreadable is not None:
            unreadable.files[path.name] = exc.strerror or type(exc).__name__


def objects(path: Path, unreadable: Unreadable | None = None) -> Iterator[dict[str, Any] | None]:
    """The JSON objects of a JSON-lines file, one at a time, ``None`` for each line that is not one
    (cut, invalid, too long, not an object): the caller keeps what it needs of each, so a file of
    any size costs one line's memory."""
    for line in lines(path, unreadable):
        try:
            obj = parse(line) if line is not None else None
        except ValueError:
            obj = None
        yield obj if isinstance(obj, dict) else None
