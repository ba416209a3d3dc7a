"""What the callback reads from Lightning's trainer and module: how to count a batch's samples, the
DDP model or the FSDP that shards it, FLOPs per step and the number format."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..torch.shared import batch_size, find_fsdp, step_format

__all__ = ["ddp_of", "fsdp_of", "lightning_flops", "number_format", "samples_reader"]

#: How the run directory names Lightning's FSDP strategy.
LIGHTNING_FSDP = "FSDP: Lightning's FSDPStrategy"


def samples_reader(combined: Any) -> Callable[[Any], int | None]:
    """How to count a training batch's samples: the first tensor's rows, or, when a ``CombinedLoader``
    zips several loaders into one batch (a dict or list of their batches), the sum over them."""
    loaders = getattr(combined, "flattened", None) or []
    if len(loaders) < 2 or getattr(combined, "_mode", None) == "sequential":
        return batch_size

    def per_loader(batch: Any) -> int | None:
        parts = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else [batch]
        total = 0
        for part in parts:
            n = batch_size(part)
            if n is None:
                return None
            total += n
        return total

    return per_loader


def ddp_of(trainer: Any) -> Any:
    """The trainer's ``DistributedDataParallel`` model, else ``None`` (FSDP, a single device)."""
    model = getattr(getattr(trainer, "strategy", None), "model", None)
    return model if isinstance(model, torch.nn.parallel.DistributedDataParallel) else None


def fsdp_of(trainer: Any, pl_module: Any = None) -> str | None:
    """How FSDP shards the trainer's model: Lightning's ``FSDPStrategy`` (of either package, or a
    subclass), else what :func:`trainperf.torch.shared.find_fsdp` finds in the strategy's model or
    ``pl_module`` (FSDP2 applied in ``configure_model``); ``None`` without FSDP."""
    strategy = getattr(trainer, "strategy", None)
    if any(cls.__name__ == "FSDPStrategy" for cls in type(strategy).__mro__):
        return LIGHTNING_FSDP
    return find_fsdp(pl_module, getattr(strategy, "model", None))


def lightning_flops(trainer: Any, pl_module: Any) -> float | None:
    """FLOPs per optimizer step from Lightning's own convention, a module's ``flops_per_batch`` (as
    ``ThroughputMonitor`` reads it: one batch's forward and backward), times the batches per step."""
    per_batch = getattr(pl_module, "flops_per_batch", None)
    if isinstance(per_batch, bool) or not isinstance(per_batch, (int, float)) or not 0 < per_batch < float("inf"):
        return None
    accumulate = getattr(trainer, "accumulate_grad_batches", 1)
    return float(per_batch) * (accumulate if isinstance(accumulate, int) and accumulate > 0 else 1)


def number_format(trainer: Any, pl_module: Any, device: Any) -> str | None:
    """What a step computes in: Lightning's precision setting, else the parameters' dtype."""
    precision = str(getattr(trainer, "precision", ""))
    mixed = "bf16" if precision.startswith("bf16") else "fp16" if precision.startswith("16") else None
    return step_format(mixed, pl_module, device)
