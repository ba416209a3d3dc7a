"""Deeplearning4j-style lines through :mod:`logging`."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from ..records import PerformanceRecord, line_of

__all__ = ["LoggingSink"]

LOGGER_NAME = "trainperf"


class _FallbackHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Prints to stderr only while the application has configured no logging at all,
    so a user who never called ``logging.basicConfig`` still sees the lines, and one who did
    sees them once, through their own handlers."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s - %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        self.stream = sys.stderr  # follow redirection (pytest's capsys, notebooks)
        super().emit(record)


def ensure_visible(logger: logging.Logger) -> None:
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not any(isinstance(h, _FallbackHandler) for h in logger.handlers):
        logger.addHandler(_FallbackHandler())


class LoggingSink:
    """Writes each record as one Deeplearning4j-style line through :mod:`logging`.

    The ``"trainperf"`` logger gets a fallback handler that prints to stderr while the application
    has configured no logging at all; any other logger is used as it is, with its own handlers.

    Args:
        logger: a logger or its name (default ``"trainperf"``).
        level: the level of the lines (default ``INFO``).
    """

    def __init__(self, logger: logging.Logger | str = LOGGER_NAME, level: int = logging.INFO) -> None:
        if not isinstance(logger, (str, logging.Logger)):
            raise TypeError(f"logger must be a logging.Logger or a logger name, got {logger!r}")
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        if isinstance(level, bool) or not isinstance(level, int):
            raise TypeError(f"level must be a logging level int, got {level!r}")
        self.level = level
        if self.logger.name == LOGGER_NAME:  # ours; a logger of the user's is left as they set it up
            ensure_visible(self.logger)

    def __call__(self, record: PerformanceRecord) -> None:
        if self.logger.isEnabledFor(self.level):
            self.logger.log(self.level, "%s", line_of(record))

    def write_many(self, records: Sequence[PerformanceRecord]) -> None:
        """One line per record, as one by one; the lines are all made first (the writer thread hands
        over what it holds): made between two calls into logging, each costs a third more."""
        logger, level = self.logger, self.level
        if logger.isEnabledFor(level):
            for line in [line_of(record) for record in records]:
                logger.log(level, "%s", line)
