"""The one-line text form of a record, in Deeplearning4j's field names and order: its fields' table and
how each kind of figure is written (:mod:`._compiled_line` compiles the line from them)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["LineField", "capture_text", "format_number"]


#: Milliseconds are written with two decimals (10 us), rates with one: the same precision on every
#: line, so columns of figures line up and nothing reads like ``0.000862 ms``. A rate too small for
#: its decimals is the exception (see :func:`format_rate`).
MS_DECIMALS = 2
RATE_DECIMALS = 1


def format_fixed(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` decimals; non-finite values as :func:`format_number` writes them."""
    if not math.isfinite(value):
        return format_number(value)
    return f"{value:.{decimals}f}"


def format_rate(value: float, decimals: int) -> str:
    """A rate with ``decimals`` decimals, unless those would show it with fewer than two significant
    digits: then with three (:func:`format_number`), so that a measured rate never reads as ``0.00``
    (a model on the CPU does some 1e-5 TFLOP/s) nor as a figure off by half (``0.01`` for 0.0149).
    Zero stays ``0`` with its decimals: it was measured.

    >>> format_rate(1285.14, 1), format_rate(0.0000048762, 2), format_rate(0.0149, 2), format_rate(0.0, 2)
    ('1285.1', '0.00000488', '0.0149', '0.00')
    """
    if value != 0 and math.isfinite(value) and abs(value) < 10.0 ** (1 - decimals):
        return format_number(value)
    return format_fixed(value, decimals)


@dataclass(frozen=True)
class LineField:
    """One ``label value unit;`` field of the line; the parser's patterns are built from the same table.

    Args:
        name: the record field, and the column :func:`trainperf.parse_log` reads it into.
        label: the text before the value, with its trailing space.
        unit: the text after the value (`` ms`` or nothing).
        integer: the value is a whole number, written as it is.
        hide_zero: a zero is left out of the line.
        decimals: written with this many decimals (``None``: :func:`format_number`'s three
            significant digits).
        rate: a rate, written by :func:`format_rate`: never rounded to zero.
        padded_only: written only when the window computed padding (``padding_share`` above 0):
            a line without padding stays as it was.
    """

    name: str
    label: str
    unit: str = ""
    integer: bool = False
    hide_zero: bool = False
    decimals: int | None = None
    rate: bool = False
    padded_only: bool = False

    def render(self, value: float) -> str:
        if self.integer:
            text = str(int(value))
        elif self.rate and self.decimals is not None:
            text = format_rate(value, self.decimals)
        elif self.decimals is not None:
            text = format_fixed(value, self.decimals)
        else:
            text = format_number(value)
        return f"{self.label}{text}{self.unit}"


#: Deeplearning4j's fields, in its order; the ``GC:`` field follows them.
DL4J_FIELDS = (
    LineField("etl_ms", "ETL: ", " ms", decimals=MS_DECIMALS),
    LineField("iteration", "iteration ", integer=True),
    LineField("iteration_ms", "iteration time: ", " ms", decimals=MS_DECIMALS),
    LineField("samples_per_sec", "samples/sec: ", decimals=RATE_DECIMALS, rate=True),
    LineField("batches_per_sec", "batches/sec: ", decimals=RATE_DECIMALS, rate=True),
    LineField("score", "score: "),
)
#: trainperf's own fields after ``GC:``; ``warm-up`` and ``verdict: kind (reason)`` close the line.
TRAINPERF_FIELDS = (
    LineField("tokens_per_sec", "tokens/sec: ", decimals=RATE_DECIMALS, rate=True),
    LineField("tokens", "real tokens: ", integer=True, padded_only=True),
    LineField("tokens_padded", "padded tokens: ", integer=True, padded_only=True),
    LineField("tokens_loss", "loss tokens: ", integer=True, padded_only=True),
    LineField("padding_share", "padding: ", decimals=3, padded_only=True),
    LineField("tflops_per_sec", "TFLOP/s: ", decimals=MS_DECIMALS, rate=True),
    LineField("mfu", "MFU: ", decimals=3, rate=True),
    LineField("mfu_real", "MFU real: ", decimals=3, rate=True, padded_only=True),
    LineField("iteration_p50_ms", "iteration p50: ", " ms", decimals=MS_DECIMALS),
    LineField("iteration_p95_ms", "p95: ", " ms", decimals=MS_DECIMALS),
    LineField("iteration_max_ms", "max: ", " ms", decimals=MS_DECIMALS),
    LineField("etl_max_ms", "ETL max: ", " ms", decimals=MS_DECIMALS),
    LineField("other_ms", "other: ", " ms", hide_zero=True, decimals=MS_DECIMALS),
    LineField("device_idle_ms", "GPU idle: ", " ms", decimals=MS_DECIMALS),
    LineField("speedup_if_data_free", "free data: ", "x faster", decimals=MS_DECIMALS),
    LineField("goodput", "goodput: ", decimals=3),
    LineField("skipped_steps", "skipped steps: ", integer=True, hide_zero=True),
    LineField("epoch", "epoch: ", integer=True),
    LineField("rank", "rank: ", integer=True),
)


def format_number(value: float) -> str:
    """At least three significant digits and at most one decimal above 100.

    Sub-millisecond times stay readable (``0.0412``) and large rates stay short (``1285.1``).
    ``NaN`` and infinities are written as Deeplearning4j writes them (``NaN``, ``Infinity``).
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = 1 if magnitude >= 2 else 2 - magnitude
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".") if magnitude < 2 else text
    return text


#: What a name cannot hold in a line: line breaks and control characters (they would split it) and
#: the characters of the GC field's grammar (they would end the name or the field early).
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\u2028\u2029;:\[\]()]")


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless one: ``1 rank``, ``2 ranks``, ``1,204 other lines``.

    >>> counted(1, "rank"), counted(0, "other line"), counted(12345, "window")
    ('1 rank', '0 other lines', '12,345 windows')
    """
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def safe_name(name: str) -> str:
    """``name`` as a line can carry it: every character that could break the line's grammar
    becomes ``_``, so a collector's name never splits a line or reads back as another field."""
    return _UNSAFE.sub("_", name) or "_"


def capture_text(path: str) -> str:
    """A trace's path as the line can hold it: its file name when the path holds what would end the
    field (``;``) or the line."""
    return path if not _UNSAFE_IN_PATH.search(path) else safe_name(path.replace("\\", "/").rsplit("/", 1)[-1])


_UNSAFE_IN_PATH = re.compile(r"[\x00-\x1f\x7f\u2028\u2029;]")
