"""Capturing the bad window: a ``torch.profiler`` trace of the iterations after a window that turned
bad (see ``docs/profiling.md``)."""

from ._rule import CaptureRule

__all__ = ["CaptureRule"]

# used by the other parts of trainperf
from ._capture import CLOSE_WAIT_S as CLOSE_WAIT_S
from ._capture import Capture as Capture
