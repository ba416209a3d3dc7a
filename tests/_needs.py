"""Skips for the tests of the heavy integrations, with a reason CI's output shows.

The README's test command installs the ``test`` extra only; Spark, the Hugging Face Trainer and
HolisticTraceAnalysis come with ``test-integrations`` (tests/README.md gives the command).
"""

from __future__ import annotations

from types import ModuleType

import pytest

PACKAGES = {"pyspark": "pyspark", "transformers": "transformers", "accelerate": "accelerate",
            "hta": "HolisticTraceAnalysis"}


def integration(module: str) -> ModuleType:
    """``module``, or skip: it belongs to the integration tests (``pip install -e ".[test-integrations]"``)."""
    top = module.split(".")[0]
    package = PACKAGES.get(top, top)
    return pytest.importorskip(
        module, reason=f"needs {package}, an integration test: pip install -e \".[test-integrations]\"")
