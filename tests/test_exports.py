from __future__ import annotations

import importlib
import pkgutil

import trainperf


def test_all_is_complete_and_importable():
    """Every public name of a private module is re-exported from its package."""
    for package_name in ["trainperf", "trainperf.torch", "trainperf.data", "trainperf.sinks", "trainperf.lightning"]:
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_") or info.name.startswith("__"):
                continue
            module = importlib.import_module(f"{package_name}.{info.name}")
            for name in getattr(module, "__all__", []):
                if package_name == "trainperf" and info.name in {
                    "_cli", "_demo", "_bench", "_stats", "_gc", "_doctor", "_parse_lines", "_parse_bulk"
                }:
                    continue
                if name in {"judge", "INPUT_BOUND_SHARE", "GC_BOUND_SHARE", "DEFAULT_FIXES", "build_summary",
                            "LOGGER_NAME", "format_number", "loader_advisor", "alloc_retries_reader",
                            "ForwardTap", "AttachmentList", "tap_of", "untap", "callback_bases"}:
                    continue
                assert name in package.__all__, f"{package_name}.{info.name}.{name} is not in {package_name}.__all__"
        for name in package.__all__:
            assert hasattr(package, name), f"{package_name}.__all__ names {name}, which does not exist"


def test_core_imports_no_framework():
    import subprocess
    import sys

    code = "import sys, trainperf; print('torch' in sys.modules, 'lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_version():
    assert trainperf.__version__.count(".") == 2
