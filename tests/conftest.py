from __future__ import annotations

import importlib
import logging
import os

import pytest

#: The modules of the ``test`` extra that tests skip without. In CI (``TRAINPERF_REQUIRE_TEST_DEPS=1``,
#: set by ``.ci/run``) a missing one is an error: a test that skips there is a test that never runs.
#: The goodput jobs' scripts run as child processes of tests/test_goodput_jobs.py, never imported by a test
#: run (their module-level code reads the job's environment).
collect_ignore = ["goodput_jobs"]

TEST_MODULES = ("torch", "pytorch_lightning", "lightning", "hypothesis", "pandas", "matplotlib", "perfetto",
                "psutil", "tensorboard", "tqdm", "pynvml", "wandb", "mlflow", "ray")

#: The heavy packages of the ``test-integrations`` extra (Spark, the Hugging Face Trainer, trace analysis): the
#: README's test command leaves them out, and their tests skip saying so (``tests/_needs.py``). With
#: ``TRAINPERF_REQUIRE_INTEGRATION_DEPS=1`` (the integration command in ``.ci/run``) a missing one is an error.
INTEGRATION_MODULES = ("pyspark", "transformers", "accelerate", "hta")


def _missing(names: tuple[str, ...]) -> list[str]:
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def pytest_sessionstart(session: pytest.Session) -> None:
    required = [("test", TEST_MODULES, "TRAINPERF_REQUIRE_TEST_DEPS"),
                ("test-integrations", INTEGRATION_MODULES, "TRAINPERF_REQUIRE_INTEGRATION_DEPS")]
    for extra, names, variable in required:
        if os.environ.get(variable) != "1":
            continue
        missing = _missing(names)
        if missing:
            raise pytest.UsageError(f"test dependencies missing (install the {extra} extra): {', '.join(missing)}")


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
