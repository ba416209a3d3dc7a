"""What the doctor reads and measures: the environment, and optionally a few steps of a model."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Environment", "Measurement", "batch_inputs", "collect_environment", "forward_loss", "measure", "to_device",
           "watch_concurrency"]


@dataclass
class Environment:
    """Facts about the machine and the framework; tests build one by hand."""

    cuda_available: bool = False
    mps_available: bool = False
    cudnn_available: bool = False
    cudnn_enabled: bool = True
    cudnn_benchmark: bool = False
    gpu_capability: tuple[int, int] | None = None
    float32_matmul_precision: str = "highest"
    default_dtype: str = "torch.float32"
    cpu_capability: str | None = None
    torch_threads: int = 1
    logical_cores: int = 1
    physical_cores: int = 1
    env: dict[str, str] = field(default_factory=dict)
    other_cpu_percent: float | None = None
    own_cpu_percent: float | None = None
    gpu_processes: list[dict[str, Any]] | None = None
    gpu_utilization: float | None = None
    tracked_objects: int = 0
    python_threads: int = 1


def collect_environment(*, sample_seconds: float = 0.3) -> Environment:
    """Read the facts the checks need from this process and machine."""
    import torch

    env = Environment()
    env.cuda_available = torch.cuda.is_available()
    env.mps_available = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    env.cudnn_available = bool(torch.backends.cudnn.is_available()) if env.cuda_available else False  # type: ignore[no-untyped-call]
    env.cudnn_enabled = bool(torch.backends.cudnn.enabled)
    env.cudnn_benchmark = bool(torch.backends.cudnn.benchmark)
    if env.cuda_available:
        env.gpu_capability = tuple(torch.cuda.get_device_capability())  # type: ignore[assignment]
    env.float32_matmul_precision = torch.get_float32_matmul_precision()
    env.default_dtype = str(torch.get_default_dtype())
    try:
        env.cpu_capability = torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001 - older torch
        env.cpu_capability = None
    env.torch_threads = torch.get_num_threads()
    env.logical_cores = os.cpu_count() or 1
    env.physical_cores = env.logical_cores
    env.env = {
        k: v
        for k, v in os.environ.items()
        if k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF",
                 "PYTORCH_ENABLE_MPS_FALLBACK", "CUDA_VISIBLE_DEVICES")
    }
    env.tracked_objects = len(gc.get_objects())
    env.python_threads = threading.active_count()
    try:
        import psutil

        env.physical_cores = psutil.cpu_count(logical=False) or env.logical_cores
        me = psutil.Process()
        me.cpu_percent(None)
        total_before = psutil.cpu_times()
        time.sleep(sample_seconds)
        own = me.cpu_percent(None)
        total_after = psutil.cpu_times()
        busy = (total_after.user + total_after.system + getattr(total_after, "nice", 0.0)) - (
            total_before.user + total_before.system + getattr(total_before, "nice", 0.0)
        )
        all_pct = 100.0 * busy / sample_seconds
        env.own_cpu_percent = own
        env.other_cpu_percent = max(0.0, all_pct - own)
    except ImportError:
        pass
    if env.cuda_available:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            env.gpu_utilization = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            env.gpu_processes = [
                {"pid": p.pid, "used_memory": p.usedGpuMemory}
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            ]
        except Exception:  # noqa: BLE001 - no NVML, no driver, no permission
            env.gpu_processes = None
    return env


@dataclass
class Measurement:
    """What a few real steps of the user's model and loader showed."""

    batches: int = 0
    etl_s: float = 0.0
    step_s: float = 0.0
    gc_s: float = 0.0
    gc_collections: int = 0
    batch_size: int | None = None
    input_shape: tuple[int, ...] | None = None
    input_dtypes: list[str] = field(default_factory=list)
    input_devices: list[str] = field(default_factory=list)
    alloc_retries: int = 0
    max_concurrent_forwards: int = 0


def _tensors(obj: Any) -> Iterable[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def batch_inputs(batch: Any) -> Any:
    """What goes into the model: the first of an ``(inputs, targets)`` pair, else the whole batch."""
    return batch[0] if isinstance(batch, (list, tuple)) and len(batch) == 2 else batch


def to_device(batch: Any, device: Any) -> Any:
    """``batch`` with every tensor in it on ``device`` (the same tensors where they are there already)."""
    from ..torch import map_tensors

    return map_tensors(batch, lambda t: t.to(device))


def forward_loss(model: Any, batch: Any, loss_fn: Any = None) -> Any:
    """The loss the doctor back-propagates for ``batch`` (already on the model's device).

    ``loss_fn(outputs, targets)`` for an ``(inputs, targets)`` batch when given; otherwise the sum of
    the means of the floating-point outputs.
    """
    inputs = batch_inputs(batch)
    if isinstance(inputs, dict):
        out = model(**inputs)
    else:
        out = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    if loss_fn is not None and isinstance(batch, (list, tuple)) and len(batch) == 2:
        return loss_fn(out, batch[1])
    return sum(t.float().mean() for t in _tensors(out) if t.is_floating_point())


def watch_concurrency(model: Any, seconds: float) -> int:
    """The most forward passes of ``model`` seen running at once, from any thread, over ``seconds``."""
    state = {"active": 0, "max": 0}
    lock = threading.Lock()
    had = "forward" in model.__dict__
    inner = model.forward

    def counting(*args: Any, **kwargs: Any) -> Any:
        with lock:
            state["active"] += 1
            state["max"] = max(state["max"], state["active"])
        try:
            return inner(*args, **kwargs)
        finally:
            with lock:
                state["active"] -= 1

    model.__dict__["forward"] = counting
    try:
        time.sleep(seconds)
    finally:
        if had:
            model.__dict__["forward"] = inner
        else:
            model.__dict__.pop("forward", None)
    return state["max"]


def measure(model: Any, loader: Any, *, steps: int = 5, loss_fn: Any = None) -> Measurement:
    """Time ``steps`` batches: the wait in ``next()`` and a forward and backward pass on each.

    The model's weights are not changed: no optimizer steps, and gradients are cleared afterwards.
    """
    import torch

    from ..core import GCMonitor
    from ..torch import batch_size

    result = Measurement()
    param = next(model.parameters(), None) if model is not None else None
    device = param.device if param is not None else torch.device("cpu")
    monitor = GCMonitor()
    monitor.install()
    retries_before = torch.cuda.memory_stats(device).get("num_alloc_retries", 0) if device.type == "cuda" else 0
    try:
        iterator = iter(loader)
        for _ in range(steps + 1):  # the first batch warms up and is not counted
            started = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            waited = time.perf_counter() - started
            inputs = batch_inputs(batch)
            if result.batch_size is None:
                result.batch_size = batch_size(batch)
                tensors = list(_tensors(inputs))
                result.input_dtypes = sorted({str(t.dtype) for t in tensors})
                result.input_devices = sorted({str(t.device) for t in tensors})
                if tensors:
                    result.input_shape = tuple(tensors[0].shape)
                gc_before = monitor.snapshot()
                continue_warm = True
            else:
                continue_warm = False
            step_started = time.perf_counter()
            if model is not None:
                with torch.enable_grad():
                    loss = forward_loss(model, to_device(batch, device), loss_fn)
                    if isinstance(loss, torch.Tensor) and loss.requires_grad:
                        loss.backward()  # type: ignore[no-untyped-call]
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            if continue_warm:
                continue
            result.step_s += time.perf_counter() - step_started
            result.etl_s += waited
            result.batches += 1
        counts, seconds = monitor.snapshot()
        if result.batches:
            result.gc_s = sum(seconds) - sum(gc_before[1])
            result.gc_collections = sum(counts) - sum(gc_before[0])
    finally:
        monitor.uninstall()
        if model is not None:
            model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        result.alloc_retries = torch.cuda.memory_stats(device).get("num_alloc_retries", 0) - retries_before
    return result

