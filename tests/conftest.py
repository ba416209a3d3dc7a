from __future__ import annotations

import importlib
import logging
import os

import pytest

#: The modules of the ``test`` extra that tests skip without. In CI (``TRAINPERF_REQUIRE_TEST_DEPS=1``,
#: set by ``.ci/run``) a missing one is an error: a test that skips there is a test that never runs.
TEST_MODULES = ("torch", "pytorch_lightning", "lightning", "hypothesis", "pandas", "matplotlib", "pyspark",
                "perfetto", "psutil", "tensorboard", "tqdm", "pynvml", "transformers", "accelerate",
                "hta")


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("TRAINPERF_REQUIRE_TEST_DEPS") != "1":
        return
    missing = []
    for name in TEST_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise pytest.UsageError(f"test dependencies missing (install the test extra): {', '.join(missing)}")


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
