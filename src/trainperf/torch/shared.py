"""What the adapters built on PyTorch share (the plain-loop attachment and the Lightning callback):
setting a listener up for the model's device, the process rank, loader advice and batch sizes."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._listener import IterationTimer, PerformanceListener
from ._advice import loader_advisor
from ._batch import batch_size
from ._cuda import CudaEventTimer, alloc_retries_reader

__all__ = ["batch_size", "loader_advisor", "process_rank", "use_model_device"]


def use_model_device(
    listener: PerformanceListener,
    device: torch.device,
    timer_factory: Callable[[torch.device], IterationTimer] | None = None,
) -> None:
    """Set ``listener`` up for a model on ``device``.

    On CUDA the records carry the device index, iteration times come from CUDA events (or from
    ``timer_factory``) and the caching allocator's retries are reported beside Python's GC.
    Elsewhere only a given ``timer_factory`` is used.
    """
    if device.type == "cuda":
        listener.use_device(device.index, (timer_factory or CudaEventTimer)(device))
        listener.add_collector(*alloc_retries_reader(device))
    elif timer_factory is not None:
        listener.set_timer(timer_factory(device))


def process_rank() -> int | None:
    """This process's rank in an initialised ``torch.distributed`` process group, else ``None``."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_rank())
    return None
