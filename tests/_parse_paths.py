"""Read one log on both of ``parse_log``'s paths: line by line, and in bulk (where every shape's
layout is learned from its first line), to compare them."""

from __future__ import annotations

import io
import math
from typing import Any

import trainperf.logs._bulk as bulk_module
import trainperf.logs._parse as parse_module
from trainperf import ParsedLog, parse_log


def both_paths(text: str | bytes) -> tuple[ParsedLog, ParsedLog]:
    """``text`` read line by line, and in bulk."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", errors="surrogatepass")
    saved = parse_module.BULK_MIN_BYTES, bulk_module.MIN_LINES
    try:
        parse_module.BULK_MIN_BYTES = 1 << 60
        by_line = parse_log(io.BytesIO(data))
        parse_module.BULK_MIN_BYTES, bulk_module.MIN_LINES = 0, 1
        in_bulk = parse_log(io.BytesIO(data))
    finally:
        parse_module.BULK_MIN_BYTES, bulk_module.MIN_LINES = saved
    return by_line, in_bulk


def same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def assert_agree(by_line: ParsedLog, in_bulk: ParsedLog) -> None:
    """The two paths read the same rows, columns (in the same order) and values, and give the same DataFrame."""
    import pandas as pd

    assert (by_line.rows, by_line.skipped, by_line.truncated) == (in_bulk.rows, in_bulk.skipped, in_bulk.truncated)
    assert by_line.columns == in_bulk.columns
    for name in by_line.columns:
        left, right = by_line.column(name), in_bulk.column(name)
        assert all(same(x, y) for x, y in zip(left, right, strict=True)), (name, left, right)
    pd.testing.assert_frame_equal(by_line.to_pandas(), in_bulk.to_pandas())


def read_both(text: str | bytes) -> ParsedLog:
    """``text`` read on both paths, which must agree; the line path's result."""
    by_line, in_bulk = both_paths(text)
    assert_agree(by_line, in_bulk)
    return by_line
