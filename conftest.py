"""Collection rules for the whole suite (``tests/`` and the docstring examples in ``src/trainperf``)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
_TRAINER_ADAPTER = HERE / "src" / "trainperf" / "transformers"
_RAY_CALLBACK = HERE / "src" / "trainperf" / "ray" / "_callback.py"

# Hundreds of tests start a Python process that imports trainperf: with PYTHONDONTWRITEBYTECODE set, each
# would compile every module again. The suite writes bytecode caches, for itself and its children.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    """Leave out what is not a test module: the helpers in ``tests/_*.py`` (scripts and shared code
    that ``--doctest-modules`` would otherwise import) and, without transformers or ray, the Trainer
    adapter's docstrings and Ray Train's callback (their modules import them); ``None`` lets pytest decide
    the rest."""
    if collection_path.suffix == ".py" and collection_path.name.startswith("_") \
            and collection_path.parent == HERE / "tests":
        return True
    if collection_path.is_relative_to(_TRAINER_ADAPTER) and importlib.util.find_spec("transformers") is None:
        return True
    if collection_path == _RAY_CALLBACK and importlib.util.find_spec("ray") is None:
        return True
    return None
