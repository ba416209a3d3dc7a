"""What the other parts of trainperf use of the sinks' machinery: the fan-out and its failure
policy, how a sink is named in a message, which thread trains, and the ``trainperf`` logger."""

from __future__ import annotations

from ._base import FanOut, Sink, SinkError, describe, on_training_thread
from ._logging import LOGGER_NAME, ensure_visible

__all__ = ["FanOut", "LOGGER_NAME", "Sink", "SinkError", "describe", "ensure_visible", "on_training_thread"]
