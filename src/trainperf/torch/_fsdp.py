"""FSDP found at set-up, and said once: its collectives are not timed, nor the forward pass.

Under FSDP (FSDP2's ``fully_shard``, FSDP1's ``FullyShardedDataParallel``, Lightning's
``FSDPStrategy``) a rank's forward pass holds the all-gather of the parameters it is about to use,
and its backward pass re-gathers them and reduce-scatters the gradients. A rank whose batch comes
late makes the *other* ranks' forward pass long, so a timed forward pass would name one of them.

FSDP waits for those collectives inside its own hooks. On FSDP2 the time from a forward pre-hook
registered first (``prepend=True``) to one registered last holds the forward's all-gather wait,
but the backward's waits run in FSDP's autograd hooks and its end-of-backward callback, which only
its private classes expose, and FSDP1 runs all of them inside its wrapper's own methods. A wait
with the backward's half missing would name a rank from half the evidence; so under FSDP nothing
of the step is timed. The analysis then compares what precedes the collectives (data wait, host
time after the step, GC): a late forward pass, backward pass or optimizer step names no rank,
rather than a wrong one. The set-up says so once: a warning, and ``collectives_untimed`` in the
rank's ``meta.json``, which the report repeats.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import torch

from ..base import user_stacklevel
from ..core import PerformanceListener
from ..ranks import RunDirSink
from ._collective import wrapper_on_stack

__all__ = ["FSDP1", "FSDP2", "find_fsdp", "say_untimed"]

#: How the run directory names FSDP2 (``fully_shard``) and FSDP1 (the wrapper class).
FSDP2 = "FSDP2: fully_shard"
FSDP1 = "FSDP: FullyShardedDataParallel"


def find_fsdp(*modules: Any) -> str | None:
    """How FSDP shards one of ``modules`` (the module or one of its submodules is an FSDP module, or
    the first one's forward is running inside an FSDP1 wrapper's, seen in the calling frames):
    :data:`FSDP2` or :data:`FSDP1`; ``None`` when FSDP shards none of them (or was never imported:
    then nothing can be sharded with it). Once per training: it walks every submodule.

    Args:
        modules: the model, and any wrapper a framework holds around it; ``None`` entries are skipped.
    """
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is None:
        return None
    kinds = [(cls, name) for cls, name in ((getattr(fsdp, "FSDPModule", None), FSDP2),
                                           (getattr(fsdp, "FullyShardedDataParallel", None), FSDP1))
             if isinstance(cls, type)]
    for module in modules:
        if isinstance(module, torch.nn.Module):
            for sub in module.modules():
                for cls, name in kinds:
                    if isinstance(sub, cls):
                        return name
    wrapper = getattr(fsdp, "FullyShardedDataParallel", None)
    first = modules[0] if modules else None
    if isinstance(wrapper, type) and isinstance(first, torch.nn.Module):
        if wrapper_on_stack(first, wrapper, sys._getframe(1)) is not None:
            return FSDP1
    return None


def say_untimed(listener: PerformanceListener, why: str) -> None:
    """Say once that this rank's collectives are not timed, because of ``why`` (how FSDP shards the
    model): a ``RuntimeWarning``, and ``collectives_untimed`` in the meta data of each run
    directory the listener writes."""
    warnings.warn(f"trainperf: the model is sharded with {why}; its collectives are not timed, nor the forward "
                  "pass that holds its all-gather: stragglers are named only from what precedes the collectives "
                  "(data wait, host time after the step, GC), and a late forward pass, backward pass or optimizer "
                  "step names no rank", RuntimeWarning, stacklevel=user_stacklevel())
    for sink in listener.sinks:
        if isinstance(sink, RunDirSink) and not sink.closed:
            sink.set_collectives_untimed(why)
