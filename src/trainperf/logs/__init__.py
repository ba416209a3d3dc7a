"""Reading logs back: listener lines, JSON lines and Deeplearning4j logs into tables, and plots of them.
Each name is imported on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..base import lazy_names as _lazy_names

if _TYPE_CHECKING:
    from ._lines import read_number as read_number
    from ._parse import WHOLE_NUMBERS as WHOLE_NUMBERS
    from ._parse import ParsedLog, parse_log
    from ._parse import ordered_columns as ordered_columns
    from ._parse import run_numbers as run_numbers
    from ._plot import plot

__all__ = ["ParsedLog", "parse_log", "plot"]

if not _TYPE_CHECKING:  # mypy reads the imports above, so a misspelt name stays an error
    __getattr__, __dir__ = _lazy_names(__name__, {
        "ParsedLog": "._parse", "parse_log": "._parse", "plot": "._plot",
        # used by the other parts of trainperf
        "read_number": "._lines", "WHOLE_NUMBERS": "._parse", "ordered_columns": "._parse", "run_numbers": "._parse",
    })
