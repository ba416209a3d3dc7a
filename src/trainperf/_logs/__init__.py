"""Reading logs back: listener lines, JSON lines and Deeplearning4j logs into tables, and plots of them."""

from ._parse import ParsedLog, parse_log
from ._plot import plot

__all__ = ["ParsedLog", "parse_log", "plot"]
