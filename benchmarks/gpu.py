"""Does ``speedup_if_data_free`` tell the truth? The predicted gain of free data next to the gain
measured by removing the loader, in the same run; and what listening costs on a GPU.

On a CUDA device, four situations (sizes below; the model's depth is calibrated so that its step
takes the GPU time named):

* ``gpu-bound``: a 12 ms loader hidden behind 33 ms of GPU work, nothing synchronises;
* ``input-sync``: a 25 ms loader, 20 ms of GPU work, ``loss.item()`` after every step;
* ``input``: a 30 ms loader, 20 ms of GPU work, nothing synchronises;
* ``even``: a 20 ms loader, 20 ms of GPU work, nothing synchronises.

For each: the time per step with the loader and with the batches already in memory (bare loops,
no listener), their ratio (the measured speedup), the listener's ``speedup_if_data_free`` and its
verdicts. Then the profiler's count of cudaDeviceSynchronize / cudaStreamSynchronize /
cudaEventSynchronize calls with and without a listener, and the per-step overhead of a listener at
frequency 10 against a bare loop of a small launch-bound model, next to what one
``torch.cuda.Event.record()`` costs alone.

With ``--cpu``, the same comparison on the CPU (loader sleeps, a real matrix product as the step).

Run: ``python benchmarks/gpu.py [--cpu] [--steps N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable

import torch

from trainperf import PerformanceListener
from trainperf.torch import attach

MS = 0.001
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")


class SleepyData(torch.utils.data.Dataset):
    """A batch costs ``delay`` seconds of host time (decoding, say)."""

    def __init__(self, n: int, delay: float, width: int, batch: int) -> None:
        self.n, self.delay, self.width, self.batch = n, delay, width, batch
        self.x = torch.randn(batch, width)
        self.y = torch.randint(0, 10, (batch,))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay:
            time.sleep(self.delay)
        return self.x, self.y


def make_model(width: int, depth: int, device: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=1e-4)


def loop(model, opt, batches, device: str, *, sync: bool, listener: PerformanceListener | None = None) -> float:
    """Seconds per step over ``batches`` (the first 10 steps left out), up to the device's end."""
    marks: list[float] = []
    for x, y in batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if listener is not None:
            listener.set_score(loss.detach())
        if sync:
            loss.item()
        marks.append(time.perf_counter())
    if device == "cuda":
        torch.cuda.synchronize()
    marks[-1] = time.perf_counter()
    return (marks[-1] - marks[9]) / (len(marks) - 10)


def calibrate_depth(width: int, batch: int, target_s: float, device: str) -> int:
    """The depth whose step takes about ``target_s`` of device time."""
    model, opt = make_model(width, 4, device)
    x = [(torch.randn(batch, width), torch.randint(0, 10, (batch,)))] * 30
    loop(model, opt, x, device, sync=False)
    per_step = loop(model, opt, x, device, sync=False)
    return max(1, round(4 * target_s / per_step))


def situation(name: str, load_s: float, work_s: float, sync: bool, *, device: str, steps: int,
              width: int, batch: int) -> dict[str, object]:
    depth = calibrate_depth(width, batch, work_s, device)
    model, opt = make_model(width, depth, device)
    pin = device == "cuda"

    def loader(delay: float) -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
        return torch.utils.data.DataLoader(SleepyData(steps, delay, width, batch), batch_size=None, pin_memory=pin)

    in_memory = list(loader(0.0))
    loop(model, opt, in_memory[:20], device, sync=sync)  # warm up
    without = statistics.median(loop(model, opt, in_memory, device, sync=sync) for _ in range(2))
    with_loader = loop(model, opt, loader(load_s), device, sync=sync)
    listener = PerformanceListener(10, sinks=[], history=None, report_score=True)
    handle = attach(model, listener)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        listened = loop(model, opt, loader(load_s), device, sync=sync, listener=listener)
        listener.close()
    handle.detach()
    records = [r for r in listener.history if not r.warmup and r.window_iterations == 10]
    verdicts = Counter(r.verdict.kind for r in records if r.verdict is not None)
    return {
        "name": name,
        "depth": depth,
        "step_in_memory_ms": 1000 * without,
        "step_with_loader_ms": 1000 * with_loader,
        "step_listened_ms": 1000 * listened,
        "measured": with_loader / without,
        "predicted": listener.summary().speedup_if_data_free,
        "verdicts": dict(verdicts),
        "etl_ms": statistics.mean(r.etl_ms for r in records if r.etl_ms is not None),
        "idle_ms": statistics.mean(r.device_idle_ms for r in records if r.device_idle_ms is not None)
        if device == "cuda" else None,
    }


def print_situation(s: dict[str, object]) -> None:
    predicted = s["predicted"]
    measured = s["measured"]
    error = f"{100 * (predicted / measured - 1):+.1f}%" if isinstance(predicted, float) else "n/a"  # type: ignore[operator]
    idle = f", GPU idle {s['idle_ms']:.2f} ms" if s["idle_ms"] is not None else ""
    print(
        f"{s['name']:<11} depth {s['depth']:>3}: step in memory {s['step_in_memory_ms']:7.2f} ms, with loader "
        f"{s['step_with_loader_ms']:7.2f} ms (listened {s['step_listened_ms']:7.2f} ms); "
        f"ETL {s['etl_ms']:.2f} ms{idle}\n"
        f"{'':<11} measured speedup {measured:.3f}x, speedup_if_data_free {predicted:.3f}x ({error}); "
        f"verdicts {s['verdicts']}"
    )


def count_syncs(fn: Callable[[], object]) -> dict[str, int]:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        fn()
    counts = dict.fromkeys(SYNC_CALLS, 0)
    for event in prof.events():
        for name in SYNC_CALLS:
            if name in event.name:
                counts[name] += 1
    return counts


def sync_counts(steps: int) -> None:
    model, opt = make_model(512, 2, "cuda")
    batches = [(torch.randn(64, 512), torch.randint(0, 10, (64,)))] * steps

    def train(listener: PerformanceListener | None) -> None:
        for x, y in batches:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if listener is not None:
                listener.set_score(loss.detach())

    train(None)
    torch.cuda.synchronize()
    bare = count_syncs(lambda: train(None))
    listener = PerformanceListener(10, sinks=[], report_score=True)
    handle = attach(model, listener)
    train(listener)
    torch.cuda.synchronize()
    listened = count_syncs(lambda: train(listener))
    listener.close()
    handle.detach()
    print(f"synchronisations over {steps} steps (profiler): bare {bare}; with a listener at frequency 10 {listened}")


def overhead(rounds: int, steps: int) -> None:
    """A small launch-bound model: bare against listened at frequency 10, alternating rounds."""
    model, opt = make_model(256, 4, "cuda")
    x, y = torch.randn(64, 256, device="cuda"), torch.randint(0, 10, (64,), device="cuda")

    def run(n: int) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - started) / n

    run(200)
    bare: list[float] = []
    listened: list[float] = []
    for _ in range(rounds):
        bare.append(run(steps))
        listener = PerformanceListener(10, sinks=[], history=None, verdict=False)
        handle = attach(model, listener)
        listened.append(run(steps))
        listener.close()
        handle.detach()
    event = torch.cuda.Event(enable_timing=True)
    n = 20_000
    started = time.perf_counter()
    for _ in range(n):
        event.record()
    record_s = (time.perf_counter() - started) / n
    torch.cuda.synchronize()
    b, ls = statistics.median(bare), statistics.median(listened)
    print(f"small launch-bound model, bare:          {1e6 * b:8.1f} us/step")
    print(f"  listened, frequency 10:              + {1e6 * (ls - b):6.1f} us ({100 * (ls / b - 1):+.1f}%)")
    print(f"  torch.cuda.Event.record() alone:       {1e6 * record_s:6.1f} us")


def cpu_mode(steps: int) -> None:
    torch.set_num_threads(1)  # the loader's tensor work must not wake a thread pool inside the step
    width, batch = 512, 256
    print(f"CPU: torch {torch.__version__}, one intra-op thread, {steps} steps per run")
    for name, load_s, work_s in (("input", 12 * MS, 8 * MS), ("even", 8 * MS, 8 * MS), ("compute", 2 * MS, 8 * MS)):
        print_situation(situation(name, load_s, work_s, False, device="cpu", steps=steps, width=width, batch=batch))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="measure on the CPU instead")
    parser.add_argument("--steps", type=int, default=80, help="steps per run (at least 30)")
    args = parser.parse_args()
    if args.steps < 30:
        parser.error(f"--steps must be at least 30, got {args.steps}")
    if args.cpu:
        cpu_mode(args.steps)
        return 0
    if not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA device here; nothing measured (use --cpu for the CPU comparison)")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.steps} steps per run")
    for name, load_s, work_s, sync in (
        ("gpu-bound", 12 * MS, 33 * MS, False),
        ("input-sync", 25 * MS, 20 * MS, True),
        ("input", 30 * MS, 20 * MS, False),
        ("even", 20 * MS, 20 * MS, False),
    ):
        print_situation(situation(name, load_s, work_s, sync, device="cuda", steps=args.steps, width=4096, batch=512))
    sync_counts(60)
    overhead(rounds=5, steps=1000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
