"""Reading logs back: listener lines, JSON lines and Deeplearning4j logs into tables, and plots of them."""

from ._parse import ParsedLog, parse_log
from ._plot import plot

__all__ = ["ParsedLog", "parse_log", "plot"]

# used by the other parts of trainperf
from ._lines import read_number as read_number
from ._parse import WHOLE_NUMBERS as WHOLE_NUMBERS
from ._parse import ordered_columns as ordered_columns
from ._parse import run_numbers as run_numbers
