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
from ._batch import NOT_COUNTED, TokenCounts, batch_size, batch_token_counts
from ._collective import CollectiveTimer
from ._dist_calls import BlockedCalls
from ._flops import StepFlopCounter, batch_shape, step_format
from ._fsdp import find_fsdp
from ._registry import hooked_step_levels
from ._setup import Teardown, TrainingSetup, join_cluster, time_collectives, use_model_device
from ._tap import attachments_of, is_listened

__all__ = [
    "BlockedCalls", "CollectiveTimer", "StepFlopCounter", "Teardown", "TrainingSetup", "hooked_step_levels",
    "loop_hooks", "step_format", "batch_shape", "batch_size", "find_fsdp", "join_cluster", "token_counter",
    "loader_advisor", "on_cuda_of", "NOT_COUNTED", "TokenCounts",
    "process_rank", "time_collectives", "use_model_device", "worker_pids", "listeners_of",
]


def token_counter(listener: PerformanceListener) -> Callable[[Any], TokenCounts]:
    """How the adapters count a batch's padded, real and loss tokens: :func:`~trainperf.torch._batch.
    batch_token_counts`, the real ones from the listener's ``tokens=`` function when it was given. A
    function that raises, or gives something other than a non-negative int or ``None``, is said once
    and counts no real tokens from then on: training goes on. A batch whose attention mask is already
    on a device is said once too: its real and loss tokens are not counted (reading a count there
    would wait for the device), its padded ones are (the shape)."""
    count = listener.options.tokens
    said_device: list[bool] = []

    def on_device(counts: TokenCounts) -> TokenCounts:
        if counts.real is None and counts.padded is not None and not said_device:
            said_device.append(True)
            warnings.warn("trainperf: the batches' attention mask is on a device when the loader gives them: "
                          "their real and loss tokens are not counted (that would wait for the device), their "
                          "padded tokens are; count the real ones with the tokens= option", RuntimeWarning,
                          stacklevel=3)
        return counts

    if count is None:
        def counts_of(batch: Any) -> TokenCounts:
            counts = batch_token_counts(batch)
            return counts if counts.real is not None or counts is NOT_COUNTED else on_device(counts)

        return counts_of
    user: Callable[[Any], int | None] = count
    broken: list[str] = []

    def counted(batch: Any) -> TokenCounts:
        counts = batch_token_counts(batch)
        if broken:
            return counts._replace(real=None)
        try:
            n = user(batch)
        except Exception as exc:  # noqa: BLE001 - the user's function: said once, training goes on
            broken.append(f"raised {exc!r}")
        else:
            if n is None or (type(n) is int and n >= 0):
                return counts._replace(real=n)
            broken.append(f"returned {n!r}, not a non-negative int or None")
        warnings.warn(f"trainperf: the tokens= function {broken[0]}; tokens are not counted from now on",
                      RuntimeWarning, stacklevel=2)
        return counts._replace(real=None)

    return counted


def process_rank() -> int | None:
    """This process's rank in an initialised ``torch.distributed`` process group, else ``None``."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_rank())
    return None


def listeners_of(targets: tuple[Any, ...]) -> list[PerformanceListener]:
    """The listeners ``targets`` stand for, as :func:`~trainperf.torch.timed` reads them: each listener
    given, and those attached to each listened-to model given.

    Raises:
        TypeError: a target is neither (named).
    """
    out: list[PerformanceListener] = []
    for target in targets:
        if isinstance(target, PerformanceListener):
            out.append(target)
        elif is_listened(target):
            out.extend(a.listener for a in attachments_of(target))
        else:
            raise TypeError(f"targets must be PerformanceListener objects or listened-to models, got {target!r}")
    return out
