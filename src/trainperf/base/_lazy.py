"""Names a package exports but imports on first use, so that ``import trainperf`` loads only what the
listener needs: the report, the doctor, the log reader and the profiler capture wait until asked for."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__: list[str] = []


def lazy_names(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module-level ``__getattr__`` and ``__dir__`` for names imported on first use.

    Args:
        package: the package's ``__name__``.
        names: each lazy name and the module, relative to ``package``, that defines it
            (``{"doctor": ".diagnosis"}``).

    Returns:
        ``(__getattr__, __dir__)``: the first imports the name's module once, keeps the value in the
        package (later look-ups find it there) and returns it; an unknown name raises
        ``AttributeError`` as usual. The second lists the lazy names beside those already loaded.

    Example:
        >>> __getattr__, __dir__ = lazy_names(__name__, {"doctor": ".diagnosis"})  # doctest: +SKIP
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
