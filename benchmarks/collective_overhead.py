"""What timing DDP's collectives costs per iteration on the CPU (gloo), against DDP without trainperf
in the same run.

Two measurements:

* **added calls**: the Python that the timing adds to one iteration (the comm-hook wrapper around
  the hook it calls, the two end-of-backward callbacks, the optimizer-step reading, the forward
  pass's two callbacks), each timed over many calls against the bare call it wraps, with a fake
  bucket and a ready future: the cost itself, without the run's noise;
* **whole loop**: a one-rank and a two-rank DDP loop on a tiny model, blocks of iterations
  alternating between bare DDP and DDP with the timing installed (listener and all), medians of
  the per-block means and their difference;
* **device phases' bookkeeping**: the Python that reading the phases off device events adds to one
  iteration on CUDA (five marks, one stretch read), with a stand-in event source whose calls cost
  nothing: CUDA's own event record and query calls are not in it (they need a device).

Run: ``python benchmarks/collective_overhead.py [--blocks 20] [--iterations 300]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainperf import PerformanceListener  # noqa: E402
from trainperf.torch import attach  # noqa: E402
from trainperf.torch._collective import CollectiveTimer  # noqa: E402
from trainperf.torch._device_phases import BackwardPass, DevicePhases  # noqa: E402


class FakeBucket:
    def __init__(self, last: bool) -> None:
        self.last = last

    def is_last(self) -> bool:
        return self.last


def added_calls(n: int = 200_000) -> dict[str, float]:
    """Nanoseconds per call of what the timing adds to an iteration, each less the bare call of the
    same shape (the engine's queue is a stub here: the whole loop below pays the real one)."""
    from trainperf.torch import _collective

    listener = PerformanceListener(10_000, sinks=[], verdict=False)
    listener.start()

    class Engine:
        @staticmethod
        def queue_callback(callback: object) -> None:
            return None

    real_engine, _collective._ENGINE = _collective._ENGINE, Engine
    timer = CollectiveTimer(None, listener.add_time, listener.add_sample, listener.clock)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(torch.zeros(1))

    def user_hook(state: object, bucket: object) -> torch.futures.Future[torch.Tensor]:
        return future

    timer._user = (user_hook, None)

    def per_call(fn, *args) -> float:
        best = float("inf")
        for _ in range(5):
            began = time.perf_counter_ns()
            for _ in range(n):
                fn(*args)
            best = min(best, (time.perf_counter_ns() - began) / n)
        return best

    def nothing(*args: object) -> None:
        return None

    bare = per_call(nothing, None)
    param = torch.zeros(1)

    def end_of_backward() -> None:  # the last gradient, the two queued callbacks
        timer._forward_end = 0.0
        timer._last_gradient(param)
        timer._after_finalize()
        timer._on_backward_end()

    def forward() -> None:
        timer.before_forward((), {})
        timer.after_forward()

    def step() -> None:
        timer._left = 0.5
        timer.on_step(1.0)

    out = {
        "last gradient and end of backward": per_call(end_of_backward) - 4 * bare,
        "forward pass's two callbacks": per_call(forward) - 3 * bare,
        "optimizer step reading": per_call(step) - 2 * bare,
    }
    hook_cost = per_call(timer._comm_hook, None, FakeBucket(False)) - per_call(user_hook, None, None)
    _collective._ENGINE = real_engine
    listener.close()
    return out | {"wrapper of a user's comm hook (per bucket, only with one)": hook_cost}


class FreeEvents:
    """An event source whose calls cost nothing: every event has completed, no time between two."""

    def __init__(self) -> None:
        self._pool = [object() for _ in range(16)]

    def record(self) -> object:
        return self._pool.pop()

    def done(self, event: object) -> bool:
        return True

    def elapsed_s(self, start: object, end: object) -> float:
        return 0.001

    def release(self, event: object) -> None:
        self._pool.append(event)


def device_bookkeeping(n: int = 100_000) -> float:
    """Nanoseconds per iteration of :class:`DevicePhases` with :class:`FreeEvents`: five marks, the
    backward pass's and the step's stretches read, the figures handed to two no-op callbacks."""
    def nothing(name: str, seconds: float) -> None:
        return None

    phases = DevicePhases(FreeEvents(), nothing, nothing)
    synced = BackwardPass(True)
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter_ns()
        for _ in range(n):
            phases.forward_start()
            phases.forward_end()
            phases.last_gradient()
            phases.backward_end(synced)
            phases.step_end()
        best = min(best, (time.perf_counter_ns() - began) / n)
    return best


def _loop(rank: int, world: int, port: int, blocks: int, iterations: int, queue) -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    x, y = torch.randn(8, 16), torch.randn(8, 1)

    def build(kind: str):
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        listener = None
        if kind != "bare":
            listener = PerformanceListener(10_000, sinks=[], verdict=False)
            # on one rank, a listener on the wrapped module does not time the collectives
            attach(model if kind == "timed" else model.module, listener)
        return model, opt, listener

    kinds = ("bare", "listened", "timed") if world == 1 else ("bare", "timed")
    setups = {kind: build(kind) for kind in kinds}
    means: dict[str, list[float]] = {kind: [] for kind in kinds}
    for block in range(blocks + 1):
        for name in kinds if block % 2 else kinds[::-1]:
            model, opt, _ = setups[name]
            dist.barrier()
            began = time.perf_counter()
            for _ in range(iterations):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            if block:  # the first block warms both up
                means[name].append((time.perf_counter() - began) / iterations)
    for _, _, listener in setups.values():
        if listener is not None:
            listener.close()
    if rank == 0:
        queue.put(means)
    dist.destroy_process_group()


def whole_loop(world: int, blocks: int, iterations: int) -> dict[str, float]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_loop, args=(r, world, port, blocks, iterations, queue)) for r in range(world)]
    for p in procs:
        p.start()
    means = queue.get(timeout=600)
    for p in procs:
        p.join()
    out: dict[str, float] = {f"{kind}_us": 1e6 * statistics.median(v) for kind, v in means.items()}
    for base in ("bare", "listened"):
        if base in means:
            diffs = sorted(t - b for t, b in zip(means["timed"], means[base], strict=True))
            k = len(diffs) // 4
            out[f"over_{base}_us"] = 1e6 * statistics.median(diffs)
            out[f"over_{base}_iqr_us"] = (1e6 * diffs[k], 1e6 * diffs[-1 - k])  # type: ignore[assignment]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    total = 0.0
    print("added calls per iteration (ns, less bare calls of the same shape):")
    for name, ns in added_calls().items():
        print(f"  {name:58s} {ns:7.0f}")
        total += 0.0 if "user's" in name else ns
    print(f"  {'in all, without a user hook':58s} {total:7.0f}  ({total / 1000:.2f} us; target <= 2 us)")
    print(f"device phases' bookkeeping per iteration, CUDA's calls left out (ns): {device_bookkeeping():.0f}")
    for world in (1, 2):
        r = whole_loop(world, args.blocks, args.iterations)
        line = f"DDP on {world} rank(s), us/iteration: bare {r['bare_us']:.1f}"
        if "listened_us" in r:
            line += f", listened without collective timing {r['listened_us']:.1f}"
        line += f", listened with it {r['timed_us']:.1f}"
        print(line)
        for base in ("listened", "bare"):
            if f"over_{base}_us" in r:
                low, high = r[f"over_{base}_iqr_us"]  # type: ignore[misc]
                print(f"  with collective timing - {base}: {r[f'over_{base}_us']:+.1f} us "
                      f"(interquartile {low:+.1f} to {high:+.1f})")


if __name__ == "__main__":
    main()
