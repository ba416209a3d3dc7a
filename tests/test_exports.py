from __future__ import annotations

import importlib
import subprocess
import sys
from types import ModuleType

import pytest

import trainperf

PACKAGES = ["trainperf", "trainperf.torch", "trainperf.data", "trainperf.sinks", "trainperf.lightning"]


@pytest.mark.parametrize("package_name", PACKAGES)
def test_all_lists_exactly_the_public_members(package_name):
    """As httpx checks it: ``__all__`` is the package's public members (subpackages aside)."""
    package = importlib.import_module(package_name)
    public = [
        name for name, value in vars(package).items() if not name.startswith("_") and not isinstance(value, ModuleType)
    ]
    lazy = [name for name in package.__all__ if name not in public]  # found on first use (module __getattr__)
    assert all(getattr(package, name) is not None for name in lazy)
    assert lazy in ([], ["RunDirSink"])
    assert sorted(package.__all__) == sorted(public + lazy)


def test_core_imports_no_framework():
    code = "import sys, trainperf; print('torch' in sys.modules, 'lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_version():
    assert trainperf.__version__.count(".") == 2
