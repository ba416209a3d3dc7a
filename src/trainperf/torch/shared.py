"""What the adapters built on PyTorch share (the plain-loop attachment and the Lightning callback):
setting a listener up for the model's device, the process rank, loader advice and batch sizes."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ..core import PerformanceListener
from ..records import DeviceTimeline
from . import _loop_hooks as loop_hooks
from ._advice import loader_advisor, on_cuda_of, worker_pids
from ._batch import batch_size, batch_tokens
from ._cluster import Cluster
from ._collective import CollectiveTimer, find_ddp
from ._cuda import AllocatorCounters, CudaTimeline, alloc_retries_reader, memory_probe
from ._flops import StepFlopCounter, step_format
from ._nvml import nvml_probe
from ._registry import hooked_step_levels
from ._tap import tap_of, untap

__all__ = [
    "CollectiveTimer", "StepFlopCounter", "hooked_step_levels", "loop_hooks", "step_format",
    "batch_size", "join_cluster", "token_counter", "loader_advisor", "on_cuda_of", "process_rank", "time_collectives",
    "use_model_device", "worker_pids",
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


def use_model_device(
    listener: PerformanceListener,
    device: torch.device,
    timeline_factory: Callable[[torch.device], DeviceTimeline] | None = None,
) -> None:
    """Set ``listener`` up for a model on ``device``.

    On CUDA the records carry the device index, iteration times and the device's idle time come
    from CUDA events (a :class:`CudaTimeline`, or ``timeline_factory``'s), the caching allocator's
    retries are reported beside Python's GC, and, unless the listener has ``report_hardware=False``,
    its memory peaks and NVML's utilisation with every record. Elsewhere only a given
    ``timeline_factory`` is used.

    Args:
        listener: the listener to set up.
        device: the device of the model's parameters.
        timeline_factory: builds the device timeline (tests pass a fake).
    """
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        listener.use_device(device.index, (timeline_factory or CudaTimeline)(device))
        counters = AllocatorCounters(device)  # one read per report serves both
        listener.add_collector(*alloc_retries_reader(device, counters))
        if listener.options.report_hardware:
            listener.add_probe(memory_probe(device, counters))
            nvml = nvml_probe(device)
            if nvml is not None:
                listener.add_probe(nvml)
    elif timeline_factory is not None:
        listener.set_timeline(timeline_factory(device))


def join_cluster(listener: PerformanceListener) -> bool:
    """In a ``torch.distributed`` run of more than one process, link ``listener`` to the other ranks
    (see :class:`trainperf.torch._cluster.Cluster`); whether the run is one. Once per listener; a
    rank without a listener, or one that links late, never blocks the others."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return False
    if not any(isinstance(sink, Cluster) for sink in listener.sinks):
        options = listener.options
        cluster = Cluster(listener, rank=dist.get_rank(), world=dist.get_world_size(), every=options.cluster_every,
                          timeout_s=options.cluster_timeout_s, wall_clock=listener.wall_clock)
        listener.add_sink(cluster)
    return True


def time_collectives(listener: PerformanceListener, model: torch.nn.Module, ddp: Any = None) -> CollectiveTimer:
    """Time ``model``'s training forward passes and, when it runs under ``ddp`` (a
    ``DistributedDataParallel``, found when ``model``'s forward is running inside it), the
    collectives around them (see :class:`trainperf.torch._collective.CollectiveTimer`). The timing
    stops when the listener closes."""
    if ddp is None:
        ddp = find_ddp(model)
    inner: torch.nn.Module = ddp.module if ddp is not None and model is ddp else model  # type: ignore[assignment]
    timer = CollectiveTimer(ddp, listener.add_time, listener.add_sample, listener.clock)
    tap = tap_of(inner)
    before, after = timer.before_forward, timer.after_forward
    # new lists, not changed in place: this may run from one of the tap's own callbacks
    tap.callbacks = [before, *tap.callbacks]
    tap.after = [*tap.after, after]

    def untime() -> None:
        timer.stop()
        tap.after = [a for a in tap.after if a != after]
        untap(inner, before)  # the last one out gives the model its own forward back

    listener.on_close(untime)
    return timer


def process_rank() -> int | None:
    """This process's rank in an initialised ``torch.distributed`` process group, else ``None``."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_rank())
    return None
