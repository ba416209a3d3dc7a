"""The adapter for plain PyTorch loops: ``ListenerModule``, ``attach`` and ``timed``."""

from ._attach import Attachment, attach, detach
from ._batch import batch_size, map_tensors
from ._cuda import CudaTimeline
from ._loader import TimedLoader, timed
from ._module import ListenerModule

__all__ = [
    "Attachment", "CudaTimeline", "ListenerModule", "TimedLoader", "attach", "batch_size", "detach", "map_tensors",
    "timed",
]
