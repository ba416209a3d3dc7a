"""Capturing the bad window: a ``torch.profiler`` trace of the iterations after a window that turned
bad (see ``docs/profiling.md``). The capture itself is imported when a listener is given a
``profile_dir``."""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..base import lazy_names as _lazy_names
from ._rule import CaptureRule

if _TYPE_CHECKING:
    from ._capture import Capture as Capture

__all__ = ["CaptureRule"]

# used by the other parts of trainperf
if not _TYPE_CHECKING:  # mypy reads the imports above, so a misspelt name stays an error
    __getattr__, __dir__ = _lazy_names(__name__, {"Capture": "._capture"})
