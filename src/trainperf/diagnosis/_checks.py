"""The guide's 13 checks, in PyTorch terms. Each is a pure function of a :class:`Context`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..records import INPUT_BOUND_SHARE, dataloader_tips
from ._probe import Environment, Measurement
from ._report import Check

__all__ = ["Context", "CHECKS", "INPUT_MODERATE_SHARE"]

#: Data-wait shares of a step for "moderately" and "highly" input-bound, as TensorFlow's profiler
#: judges an input pipeline (5% and 20%).
INPUT_MODERATE_SHARE = 5.0
#: The guide's rough object counts for garbage-collection trouble (500k noticeable, 10M severe).
OBJECTS_WARN, OBJECTS_FAIL = 500_000, 10_000_000


@dataclass
class Context:
    env: Environment
    model: Any = None
    loader: Any = None
    optimizer: Any = None
    measurement: Measurement | None = None
    max_concurrent_forwards: int | None = None


def _params(model: Any) -> list[Any]:
    return list(model.parameters()) if model is not None else []


def _model_devices(model: Any) -> set[str]:
    return {p.device.type for p in _params(model)}


def _on_gpu(ctx: Context) -> bool:
    return "cuda" in _model_devices(ctx.model) or (
        ctx.model is None and ctx.env.cuda_available
    )


def backend(ctx: Context) -> Check:
    env, devices = ctx.env, _model_devices(ctx.model)
    accel = "cuda" if env.cuda_available else "mps" if env.mps_available else None
    inputs = ctx.measurement.input_devices if ctx.measurement else []
    evidence = {"cuda_available": env.cuda_available, "mps_available": env.mps_available,
                "model_devices": sorted(devices), "input_devices": inputs}
    title = "accelerator in use"
    if accel is None:
        return Check(1, "backend", title, "ok", evidence, reason="no CUDA or MPS device: the CPU is the backend")
    if ctx.model is None:
        return Check(1, "backend", title, "ok", evidence, reason=f"{accel} is available (no model given to check)")
    if devices == {"cpu"} or (inputs and all(d.startswith("cpu") for d in inputs) and accel not in devices):
        return Check(1, "backend", title, "fail", evidence,
                     fix=f"model.to('{accel}') and move each batch with .to('{accel}', non_blocking=True)",
                     reason=f"{accel} is available but the model runs on the CPU")
    return Check(1, "backend", title, "ok", evidence, reason=f"model on {', '.join(sorted(devices))}")


def cudnn(ctx: Context) -> Check:
    env = ctx.env
    title = "cuDNN"
    if not env.cuda_available:
        return Check(2, "cudnn", title, "skip", {"cuda_available": False}, reason="no CUDA device")
    convs = _count(ctx.model, ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d"))
    evidence = {"available": env.cudnn_available, "enabled": env.cudnn_enabled, "benchmark": env.cudnn_benchmark,
                "conv_layers": convs}
    if not env.cudnn_available or not env.cudnn_enabled:
        return Check(2, "cudnn", title, "fail", evidence, fix="install a CUDA build of torch with cuDNN and keep "
                     "torch.backends.cudnn.enabled = True", reason="cuDNN is unavailable or disabled")
    if convs and not env.cudnn_benchmark:
        return Check(2, "cudnn", title, "warn", evidence, fix="torch.backends.cudnn.benchmark = True (input shapes "
                     "fixed), so cuDNN picks the fastest convolution algorithms",
                     reason=f"{convs} convolution layers and cudnn.benchmark is off")
    return Check(2, "cudnn", title, "ok", evidence, reason="cuDNN enabled")


def data_loading(ctx: Context) -> Check:
    import torch

    loader, m = ctx.loader, ctx.measurement
    title = "data loading (ETL)"
    if loader is None:
        return Check(3, "data_loading", title, "skip", reason="no loader given")
    evidence: dict[str, Any] = {}
    tips: list[str] = []
    if isinstance(loader, torch.utils.data.DataLoader):
        evidence.update(num_workers=loader.num_workers, pin_memory=loader.pin_memory,
                        persistent_workers=loader.persistent_workers, prefetch_factor=loader.prefetch_factor)
        tips = dataloader_tips(
            num_workers=loader.num_workers, persistent_workers=loader.persistent_workers,
            prefetch_factor=loader.prefetch_factor, pin_memory=loader.pin_memory, cuda=ctx.env.cuda_available,
        )
    share = None
    if m is not None and m.batches:
        total = m.etl_s + m.step_s
        share = 100.0 * m.etl_s / total if total > 0 else 0.0
        evidence.update(batches=m.batches, etl_ms=1000 * m.etl_s / m.batches,
                        step_ms=1000 * m.step_s / m.batches, etl_pct=round(share, 1))
    fix = "; ".join(tips + ["or trainperf.data.prefetch(loader) / trainperf.data.presave(...)"])
    if share is not None and share >= INPUT_BOUND_SHARE:
        return Check(3, "data_loading", title, "fail", evidence, fix=fix,
                     reason=f"highly input-bound: {share:.0f}% of each step waits for data")
    if share is not None and share >= INPUT_MODERATE_SHARE:
        return Check(3, "data_loading", title, "warn", evidence, fix=fix,
                     reason=f"moderately input-bound: {share:.0f}% of each step waits for data")
    if share is None and tips:
        return Check(3, "data_loading", title, "warn", evidence, fix=fix, reason="loader settings leave speed unused")
    return Check(3, "data_loading", title, "ok", evidence,
                 reason="data wait is small" if share is not None else "loader settings look right")


def garbage_collection(ctx: Context) -> Check:
    env, m = ctx.env, ctx.measurement
    evidence: dict[str, Any] = {"tracked_objects": env.tracked_objects}
    share = None
    if m is not None and m.batches:
        total = m.etl_s + m.step_s
        share = 100.0 * m.gc_s / total if total > 0 else 0.0
        evidence.update(gc_pause_ms=1000 * m.gc_s, collections=m.gc_collections, gc_pct=round(share, 1))
    fix = ("gc.freeze() once the model and data are built (long-lived objects leave the collector's view); "
           "gc.set_threshold(50_000, 50, 100) for fewer young collections; keep fewer Python objects per step")
    title = "garbage collection"
    found = f"{env.tracked_objects:,} tracked objects" + (f", GC {share:.1f}% of steps" if share else "")
    if env.tracked_objects >= OBJECTS_FAIL or (share is not None and share >= 10):
        return Check(4, "garbage_collection", title, "fail", evidence, fix=fix, reason=found)
    if env.tracked_objects >= OBJECTS_WARN or (share is not None and share >= 2):
        return Check(4, "garbage_collection", title, "warn", evidence, fix=fix, reason=found)
    return Check(4, "garbage_collection", title, "ok", evidence, reason=f"{env.tracked_objects:,} tracked objects")


def batch_size(ctx: Context) -> Check:
    m = ctx.measurement
    title = "batch size"
    if m is None or m.batch_size is None:
        return Check(5, "batch_size", title, "skip", reason="no loader given, or its batch size cannot be read")
    n = m.batch_size
    evidence: dict[str, Any] = {"batch_size": n}
    if n == 1:
        return Check(5, "batch_size", title, "fail", evidence, fix="batch_size=32 to 128 where memory allows",
                     reason="batch size 1 leaves the hardware idle")
    if n < 16:
        return Check(5, "batch_size", title, "warn", evidence, fix="batch_size=32 to 128 where memory allows",
                     reason=f"batch size {n} is small")
    return Check(5, "batch_size", title, "ok", evidence, reason=f"batch size {n}")


def threads_sharing_model(ctx: Context) -> Check:
    title = "one model used from several threads"
    if ctx.model is None or ctx.max_concurrent_forwards is None:
        return Check(6, "shared_model", title, "skip", reason="no model given")
    seen = ctx.max_concurrent_forwards
    evidence = {"max_concurrent_forwards": seen, "python_threads": ctx.env.python_threads}
    if seen > 1:
        return Check(6, "shared_model", title, "fail", evidence,
                     fix="give each thread its own copy (copy.deepcopy(model)), or batch requests in one thread",
                     reason=f"{seen} forward passes of one model ran at once")
    return Check(6, "shared_model", title, "ok", evidence, reason="no concurrent forward passes seen")


def dtypes(ctx: Context) -> Check:
    env, m = ctx.env, ctx.measurement
    param_dtypes = sorted({str(p.dtype) for p in _params(ctx.model)})
    inputs = m.input_dtypes if m else []
    evidence = {"default_dtype": env.default_dtype, "parameter_dtypes": param_dtypes, "input_dtypes": inputs,
                "float32_matmul_precision": env.float32_matmul_precision}
    title = "data types"
    doubles = [d for d in [env.default_dtype, *param_dtypes, *inputs] if d == "torch.float64"]
    if doubles:
        return Check(7, "dtypes", title, "fail", evidence,
                     fix="model.float(), batches .float(), torch.set_default_dtype(torch.float32)",
                     reason="float64 in use: half the speed or worse, twice the memory")
    tensor_cores = env.gpu_capability is not None and env.gpu_capability >= (7, 0) and _on_gpu(ctx)
    if tensor_cores and env.float32_matmul_precision == "highest":
        return Check(7, "dtypes", title, "warn", evidence,
                     fix="torch.set_float32_matmul_precision('high') (TF32), or torch.autocast('cuda', torch.bfloat16)",
                     reason="tensor cores idle: float32 matmuls at full precision")
    return Check(7, "dtypes", title, "ok", evidence, reason="float32 or lower")


def memory(ctx: Context) -> Check:
    import torch

    env, m = ctx.env, ctx.measurement
    evidence: dict[str, Any] = {k: v for k, v in env.env.items() if k.startswith("PYTORCH_")}
    title = "memory management"
    if ctx.model is not None and not ctx.model.training and torch.is_grad_enabled():
        return Check(8, "memory", title, "warn", {**evidence, "model_training": False, "grad_enabled": True},
                     fix="run inference under torch.inference_mode()",
                     reason="model in eval mode with autograd on: graphs are built and kept for nothing")
    if not env.cuda_available:
        return Check(8, "memory", title, "ok", evidence, reason="CPU: the allocator needs no tuning")
    if env.env.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
        return Check(8, "memory", title, "fail", evidence, fix="unset PYTORCH_NO_CUDA_MEMORY_CACHING",
                     reason="the CUDA caching allocator is disabled: every allocation goes to the driver")
    if m is not None and m.alloc_retries > 0:
        evidence["alloc_retries"] = m.alloc_retries
        return Check(8, "memory", title, "warn", evidence,
                     fix="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or a smaller batch",
                     reason=f"the allocator flushed its cache and retried {m.alloc_retries} times in a few steps")
    return Check(8, "memory", title, "ok", evidence, reason="caching allocator on, no retries")


def _count(model: Any, names: tuple[str, ...]) -> int:
    if model is None:
        return 0
    return sum(type(mod).__name__ in names for mod in model.modules())


def network_shape(ctx: Context) -> Check:
    import torch

    model, m = ctx.model, ctx.measurement
    title = "network shape"
    if model is None:
        return Check(9, "network_shape", title, "skip", reason="no model given")
    convs = _count(model, ("Conv1d", "Conv2d", "Conv3d"))
    linears = [mod for mod in model.modules() if isinstance(mod, torch.nn.Linear)]
    rnns = [mod for mod in model.modules() if isinstance(mod, torch.nn.RNNBase)]
    rnn_layers = sum(r.num_layers for r in rnns)
    params = sum(p.numel() for p in model.parameters())
    findings: list[str] = []
    if convs > 100:
        findings.append(f"{convs} convolution layers (more than about 100)")
    if rnn_layers > 10:
        findings.append(f"{rnn_layers} recurrent layers (more than about 10)")
    if len(linears) > 20 and not convs and not rnns:
        findings.append(f"{len(linears)} fully connected layers (more than about 20)")
    if linears and linears[-1].out_features > 10_000:
        findings.append(f"{linears[-1].out_features:,} output classes (more than about 10,000): a full softmax is slow")
    wide = [mod.out_features for mod in linears[:-1] if mod.out_features > 4096]
    if wide:
        findings.append(f"fully connected layers {max(wide):,} wide (most stay at or under 2,048)")
    kernels = [max(mod.kernel_size) for mod in model.modules()
               if isinstance(mod, torch.nn.modules.conv._ConvNd)]  # noqa: SLF001
    if kernels and max(kernels) > 7:
        findings.append(f"kernel size {max(kernels)} (most are 2 to 7)")
    channels = [mod.out_channels for mod in model.modules() if isinstance(mod, torch.nn.modules.conv._ConvNd)]
    if channels and max(channels) > 1024:
        findings.append(f"{max(channels)} channels (most stay at or under 1,024)")
    hidden = [r.hidden_size for r in rnns]
    if hidden and max(hidden) > 1024:
        findings.append(f"recurrent layers {max(hidden)} wide (most are 128 to 1,024)")
    if params > 100_000_000:
        findings.append(f"{params:,} parameters (above 100 million is very large)")
    shape = m.input_shape if m else None
    if shape and convs and len(shape) >= 4 and max(shape[-2:]) > 600:
        findings.append(f"input {shape[-2]}x{shape[-1]} (most image models use 224 to 600)")
    if shape and rnns and len(shape) >= 2 and max(shape[1:2]) > 500:
        findings.append(f"sequences of {shape[1]} steps: use truncated backpropagation through time")
    evidence = {"parameters": params, "conv_layers": convs, "linear_layers": len(linears), "rnn_layers": rnn_layers,
                "input_shape": list(shape) if shape else None}
    if findings:
        return Check(9, "network_shape", title, "warn", evidence, reason="; ".join(findings),
                     fix="shrink what is flagged: a sampled or hierarchical softmax for huge outputs, fewer or "
                         "narrower layers, smaller inputs")
    return Check(9, "network_shape", title, "ok", evidence, reason=f"{params:,} parameters, within the usual ranges")


def cpu_work_on_gpu_run(ctx: Context) -> Check:
    devices = _model_devices(ctx.model)
    title = "work left on the CPU"
    evidence: dict[str, Any] = {"model_devices": sorted(devices)}
    if "cuda" not in devices and "mps" not in devices:
        return Check(10, "cpu_fallback", title, "skip", evidence, reason="the model is not on a GPU")
    if len(devices) > 1:
        return Check(10, "cpu_fallback", title, "fail", evidence, fix="model.to(device) for every submodule",
                     reason=f"parameters split across {sorted(devices)}: every step copies between them")
    if "mps" in devices and ctx.env.env.get("PYTORCH_ENABLE_MPS_FALLBACK") == "1":
        return Check(10, "cpu_fallback", title, "warn", {**evidence, "PYTORCH_ENABLE_MPS_FALLBACK": "1"},
                     fix="find the ops that fall back (the warning names them) and replace them",
                     reason="unsupported MPS ops silently run on the CPU")
    inputs = ctx.measurement.input_devices if ctx.measurement else []
    if inputs and any(d.startswith("cpu") for d in inputs):
        return Check(10, "cpu_fallback", title, "warn", {**evidence, "input_devices": inputs},
                     fix="DataLoader(pin_memory=True) and batch.to(device, non_blocking=True), "
                         "or trainperf.data.prefetch(loader, to_device=device)",
                     reason="batches arrive on the CPU and are copied each step")
    return Check(10, "cpu_fallback", title, "ok", evidence, reason="parameters on one device")


def cpu_extensions(ctx: Context) -> Check:
    cap = ctx.env.cpu_capability
    title = "CPU vector extensions"
    evidence = {"cpu_capability": cap}
    if "cuda" in _model_devices(ctx.model):
        return Check(11, "cpu_extensions", title, "skip", evidence, reason="the model runs on a GPU")
    if cap is None:
        return Check(11, "cpu_extensions", title, "skip", evidence, reason="this torch cannot report it")
    if cap.upper().startswith("AVX512") or cap.upper().startswith("AVX2") or cap.upper() in ("SVE256", "SVE"):
        return Check(11, "cpu_extensions", title, "ok", evidence, reason=f"torch uses {cap}")
    return Check(11, "cpu_extensions", title, "warn", evidence,
                 fix="nothing to change in code: a CPU with AVX2 or AVX-512 runs these kernels faster",
                 reason=f"torch runs {cap} kernels: no AVX2")


def other_processes(ctx: Context) -> Check:
    env = ctx.env
    title = "other processes"
    evidence: dict[str, Any] = {"other_cpu_percent": env.other_cpu_percent, "logical_cores": env.logical_cores}
    if env.other_cpu_percent is None:
        return Check(12, "other_processes", title, "skip", evidence, fix="pip install psutil",
                     reason="needs psutil to sample the other processes' CPU use, and it is not installed")
    if env.gpu_processes is not None:
        import os

        others = [p for p in env.gpu_processes if p["pid"] != os.getpid()]
        evidence.update(gpu_processes=len(others), gpu_utilization=env.gpu_utilization)
        if others:
            return Check(12, "other_processes", title, "warn", evidence, fix="stop them, or pick another GPU with "
                         "CUDA_VISIBLE_DEVICES", reason=f"{len(others)} other processes use the GPU")
    cores_busy = env.other_cpu_percent / 100.0
    if cores_busy >= 0.5 * env.logical_cores:
        return Check(12, "other_processes", title, "fail", evidence, fix="stop or move the other work (see top)",
                     reason=f"other processes keep {cores_busy:.1f} of {env.logical_cores} cores busy")
    if cores_busy >= 0.25 * env.logical_cores:
        return Check(12, "other_processes", title, "warn", evidence, fix="stop or move the other work (see top)",
                     reason=f"other processes keep {cores_busy:.1f} of {env.logical_cores} cores busy")
    return Check(12, "other_processes", title, "ok", evidence, reason=f"others use {cores_busy:.2f} cores")


def thread_oversubscription(ctx: Context) -> Check:
    env = ctx.env
    workers = getattr(ctx.loader, "num_workers", 0) or 0
    demand = env.torch_threads * (1 + (ctx.max_concurrent_forwards or 1) - 1) + workers
    evidence = {"torch_threads": env.torch_threads, "loader_workers": workers, "physical_cores": env.physical_cores,
                "OMP_NUM_THREADS": env.env.get("OMP_NUM_THREADS"), "MKL_NUM_THREADS": env.env.get("MKL_NUM_THREADS")}
    title = "thread oversubscription"
    fix = (f"torch.set_num_threads({max(1, env.physical_cores - workers)}) or OMP_NUM_THREADS / MKL_NUM_THREADS "
           "set to the physical cores divided among the processes that share them")
    if demand > 2 * env.physical_cores:
        return Check(13, "threads", title, "fail", evidence, fix=fix,
                     reason=f"{demand} busy threads on {env.physical_cores} physical cores")
    if env.torch_threads > env.physical_cores:
        return Check(13, "threads", title, "warn", evidence, fix=fix,
                     reason=f"{env.torch_threads} torch threads on {env.physical_cores} physical cores")
    return Check(13, "threads", title, "ok", evidence,
                 reason=f"{env.torch_threads} torch threads, {workers} loader workers, {env.physical_cores} cores")


CHECKS: tuple[Callable[[Context], Check], ...] = (
    backend, cudnn, data_loading, garbage_collection, batch_size, threads_sharing_model, dtypes, memory,
    network_shape, cpu_work_on_gpu_run, cpu_extensions, other_processes, thread_oversubscription,
)
