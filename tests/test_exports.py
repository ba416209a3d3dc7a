from __future__ import annotations

import importlib
import subprocess
import sys
from types import ModuleType

import pytest

import trainperf

PACKAGES = ["trainperf", "trainperf.torch", "trainperf.data", "trainperf.sinks", "trainperf.lightning", "trainperf.ray"]


@pytest.mark.parametrize("package_name", PACKAGES)
def test_all_lists_exactly_the_public_members(package_name):
    """As httpx checks it: ``__all__`` is the package's public members (subpackages aside)."""
    package = importlib.import_module(package_name)
    public = [
        name for name, value in vars(package).items() if not name.startswith("_") and not isinstance(value, ModuleType)
    ]
    lazy = [name for name in package.__all__ if name not in public]  # imported on first use (module __getattr__)
    assert all(getattr(package, name) is not None for name in lazy)
    assert set(package.__all__) <= set(dir(package))  # dir() lists them before their first use too
    public = [
        name for name, value in vars(package).items() if not name.startswith("_") and not isinstance(value, ModuleType)
    ]
    assert sorted(package.__all__) == sorted(public)  # once used, each is the package's own


def test_a_lazy_name_is_listed_before_its_first_use_and_an_unknown_one_is_refused():
    code = ("import trainperf; names = dir(trainperf); "
            "assert all(n in names for n in trainperf.__all__), names; "
            "import sys; assert 'trainperf.diagnosis' not in sys.modules; "
            "assert trainperf.doctor.__module__ == 'trainperf.diagnosis'; "
            "assert 'trainperf.diagnosis' in sys.modules; "
            "assert trainperf.sinks.RunDirSink is trainperf.RunDirSink\n"
            "try:\n    trainperf.no_such_name\nexcept AttributeError as exc:\n    print(exc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "module 'trainperf' has no attribute 'no_such_name'"


def test_trainperf_ray_imports_ray_only_when_its_callback_is_used_or_a_report_made():
    code = ("import sys, trainperf, trainperf.torch, trainperf.ray; print('ray' in sys.modules); "
            "trainperf.ray.PerformanceCallback; print('ray.train' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


def test_core_imports_no_framework():
    code = "import sys, trainperf; print('torch' in sys.modules, 'lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_version():
    assert trainperf.__version__.count(".") == 2
