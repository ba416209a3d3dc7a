"""The ``trainperf`` command line and its demo."""

from ._main import main

__all__ = ["main"]
