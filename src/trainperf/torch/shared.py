"""What the adapters built on PyTorch share (the plain-loop attachment, the Lightning and the Trainer
callbacks): one training's set-up and its undoing (:class:`TrainingSetup`), the process rank, loader
advice, batch sizes and tokens, whether FSDP shards a model, and the timing of a framework's own
collectives (:class:`BlockedCalls`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from ..core import PerformanceListener
from . import _loop_hooks as loop_hooks
from ._advice import loader_advisor, on_cuda_of, worker_pids
from ._batch import batch_size, batch_tokens
from ._collective import CollectiveTimer
from ._dist_calls import BlockedCalls
from ._flops import StepFlopCounter, batch_shape, step_format
from ._fsdp import find_fsdp
from ._registry import hooked_step_levels
from ._setup import Teardown, TrainingSetup, join_cluster, time_collectives, use_model_device

__all__ = [
    "BlockedCalls", "CollectiveTimer", "StepFlopCounter", "Teardown", "TrainingSetup", "hooked_step_levels",
    "loop_hooks", "step_format", "batch_shape", "batch_size", "find_fsdp", "join_cluster", "token_counter",
    "loader_advisor", "on_cuda_of",
    "process_rank", "time_collectives", "use_model_device", "worker_pids",
]


def token_counter(listener: PerformanceListener) -> Callable[[Any], int | None]:
    """How the adapters count a batch's real tokens: the listener's ``tokens=`` function, else
    :func:`~trainperf.torch._batch.batch_tokens`. A function that raises, or gives something other
    than a non-negative int or ``None``, is said once and counts nothing from then on: training goes on."""
    count = listener.options.tokens
    if count is None:
        return batch_tokens
    user: Callable[[Any], int | None] = count
    broken: list[str] = []

    def counted(batch: Any) -> int | None:
        if broken:
            return None
        try:
            n = user(batch)
        except Exception as exc:  # noqa: BLE001 - the user's function: said once, training goes on
            broken.append(f"raised {exc!r}")
        else:
            if n is None or (type(n) is int and n >= 0):
                return n
            broken.append(f"returned {n!r}, not a non-negative int or None")
        warnings.warn(f"trainperf: the tokens= function {broken[0]}; tokens are not counted from now on",
                      RuntimeWarning, stacklevel=2)
        return None

    return counted


def process_rank() -> int | None:
    """This process's rank in an initialised ``torch.distributed`` process group, else ``None``."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_rank())
    return None
