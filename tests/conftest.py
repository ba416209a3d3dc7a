from __future__ import annotations

import logging

import pytest


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _quiet_trainperf_logger():
    """Tests that want the default logging sink's output capture it themselves."""
    logger = logging.getLogger("trainperf")
    before = list(logger.handlers), logger.level, logger.propagate
    yield
    logger.handlers[:] = before[0]
    logger.setLevel(before[1])
    logger.propagate = before[2]
