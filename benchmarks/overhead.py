"""Cost of listening to a loop: a bare loop against the same loop with a listener, in one run.

Two loops are timed, each bare and listened to, in alternating rounds (the median round counts):

* ``tiny``: a real training step of a tiny model (Linear 8->2, SGD), frequency 10 and 1;
* ``hooks``: a forward pass of a module that returns its input and a no-op optimizer step, the
  cheapest loop torch can run, so what the listener adds is not hidden in the noise of real work. It is
  measured with frequency 10, 1, and one so large that no report happens (the pure
  non-report cost), next to torch's own cost of dispatching one no-op forward pre-hook and next to
  the floor: the same forward wrapper and a step hook that only read the clock and keep a tuple;
* ``shapes``: the ``hooks`` loop fed token batches of two lengths, with FLOPs given and with FLOPs
  counted and following each step's shape (the cost of following it).

Then memory: 1,000,000 listened iterations of the ``hooks`` loop, traced with tracemalloc, must
not grow between the 100,000th and the 1,000,000th.

Run: ``python benchmarks/overhead.py [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time
import tracemalloc
from collections.abc import Callable

import torch

from trainperf import PerformanceListener
from trainperf.torch import attach

torch.set_num_threads(1)


class NoOpOptimizer(torch.optim.Optimizer):
    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):  # noqa: D401 - hooks run around it as for any optimizer
        return None


def hooks_loop(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        model(x)
        opt.step()
    return (time.perf_counter() - started) / n


def tiny_loop(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, n: int) -> float:
    loss_fn = torch.nn.functional.cross_entropy
    started = time.perf_counter()
    for _ in range(n):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    return (time.perf_counter() - started) / n


def paired(run: Callable[[str], float], variants: list[str], rounds: int) -> dict[str, float]:
    """Fastest per-iteration seconds of each variant over alternating rounds.

    The minimum, as ``timeit`` advises: noise on a shared machine only ever adds time, so the
    fastest round is the closest to the loop's own cost, and the variants share the same rounds.
    """
    samples: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(rounds):
        for v in variants:
            samples[v].append(run(v))
    return {v: min(s) for v, s in samples.items()}


class Passthrough(torch.nn.Module):
    """Has a parameter (so an optimizer owns it) and returns its input: almost no work."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _Floor:
    """The least any listener of an unchanged loop must do: read the clock in the forward (through
    the same instance-forward wrapper trainperf uses) and again in an optimizer step hook, keeping
    one tuple per step."""

    def __init__(self, model: torch.nn.Module) -> None:
        from trainperf.torch._tap import tap_of, untap

        self.model, self.untap = model, untap
        self.kept: list[tuple[float, float]] = []
        self.started = 0.0
        tap_of(model).callbacks.append(self.on_forward)
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.handle = register_optimizer_step_post_hook(self.on_step)

    def on_forward(self, args: object, kwargs: object) -> None:
        self.started = time.perf_counter()

    def on_step(self, optimizer: object, args: object, kwargs: object) -> None:
        kept = self.kept
        kept.append((self.started, time.perf_counter()))
        if len(kept) > 10_000:
            kept.clear()

    def remove(self) -> None:
        self.untap(self.model, self.on_forward)
        self.handle.remove()


def make_listened(model: torch.nn.Module, variant: str) -> tuple[PerformanceListener | None, object]:
    if variant == "bare":
        return None, None
    if variant == "torch-hook":
        return None, model.register_forward_pre_hook(lambda m, a: None)
    if variant == "floor":
        return None, _Floor(model)
    frequency = {"freq10": 10, "freq1": 1, "no-report": 10**12}[variant]
    listener = PerformanceListener(frequency, sinks=[], verdict=False)
    attach(model, listener)
    return listener, None


def bench_hooks(n: int, rounds: int) -> dict[str, float]:
    model = Passthrough()
    x = torch.ones(1, 1)
    opt = NoOpOptimizer(model.parameters())

    def run(variant: str) -> float:
        listener, handle = make_listened(model, variant)
        hooks_loop(model, opt, x, n // 10)  # warm
        result = hooks_loop(model, opt, x, n)
        if listener is not None:
            listener.close()
        if handle is not None:
            handle.remove()  # type: ignore[attr-defined]
        return result

    return paired(run, ["bare", "torch-hook", "floor", "no-report", "freq10", "freq1"], rounds)


def loader_loop(model: torch.nn.Module, opt: torch.optim.Optimizer, loader: object, n: int) -> float:
    done = 0
    started = time.perf_counter()
    while done < n:
        for x in loader:  # type: ignore[attr-defined]
            model(x)
            opt.step()
            done += 1
    return (time.perf_counter() - started) / done


def bench_loader(n: int, rounds: int) -> dict[str, float]:
    """The hooks loop fed by a DataLoader over tensors in memory: what timing the loader's next() adds."""
    model = Passthrough()
    opt = NoOpOptimizer(model.parameters())
    loader = torch.utils.data.DataLoader([torch.ones(1, 1)] * 1000, batch_size=None)

    def run(variant: str) -> float:
        listener, _ = make_listened(model, variant)
        loader_loop(model, opt, loader, n // 10)
        result = loader_loop(model, opt, loader, n)
        if listener is not None:
            listener.close()
        return result

    return paired(run, ["bare", "no-report"], rounds)


def token_loop(model: torch.nn.Module, opt: torch.optim.Optimizer, loader: object, n: int) -> float:
    done = 0
    started = time.perf_counter()
    while done < n:
        for batch in loader:  # type: ignore[attr-defined]
            model(batch["input_ids"])
            opt.step()
            done += 1
    return (time.perf_counter() - started) / done


def bench_shapes(n: int, rounds: int) -> dict[str, float]:
    """The hooks loop fed token batches whose length alternates 64 and 512 by a DataLoader: listened
    with FLOPs given (the shape is not followed) against listened with the FLOPs counted, which follows
    each step's shape (its two shapes are counted in the warm-up, outside the timed rounds)."""
    import warnings

    model = Passthrough()
    opt = NoOpOptimizer(model.parameters())
    data = [{"input_ids": torch.ones(8, 64 if i % 2 else 512, dtype=torch.long)} for i in range(1000)]
    loader = torch.utils.data.DataLoader(data, batch_size=None)

    def run(variant: str) -> float:
        given = {"flops_per_step": 1e9} if variant == "given" else {}
        listener = PerformanceListener(10**12, sinks=[], verdict=False, **given)
        attach(model, listener)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the passthrough's count is 0, which is said
            token_loop(model, opt, loader, n // 10)
        result = token_loop(model, opt, loader, n)
        listener.close()
        return result

    return paired(run, ["given", "following"], rounds)


def bench_shape_calls(n: int, rounds: int) -> float:
    """Seconds per step of the FLOP counter's calls alone (a micro-batch added, the step begun and
    ended), steps alternating two shapes already counted: the part of following the shape that
    the loop above measures with its noise."""
    import timeit
    import warnings

    from trainperf.torch._flops import StepFlopCounter

    listener = PerformanceListener(10**12, sinks=[], verdict=False)
    counter = StepFlopCounter(listener, torch.device("cpu"), "fp32")
    short, long = ({"input_ids": torch.ones(8, length, dtype=torch.long)} for length in (64, 512))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no products: a count of 0, which is said
        for batch in (short, long, short, long):
            counter.begin(batch)
            counter.end()

    def two_steps() -> None:
        counter.add_batch(short)
        counter.begin()
        counter.end()
        counter.add_batch(long)
        counter.begin()
        counter.end()

    took = min(timeit.repeat(two_steps, number=n, repeat=rounds)) / n / 2
    empty = min(timeit.repeat(lambda: None, number=n, repeat=rounds)) / n / 2
    listener.close()
    return took - empty


def bench_tiny(n: int, rounds: int) -> dict[str, float]:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def run(variant: str) -> float:
        listener, _ = make_listened(model, variant)
        tiny_loop(model, opt, x, y, n // 10)
        result = tiny_loop(model, opt, x, y, n)
        if listener is not None:
            listener.close()
        return result

    return paired(run, ["bare", "freq10", "freq1"], rounds)


def bench_memory(total: int) -> dict[str, float]:
    """Traced Python memory after 10% of ``total`` listened iterations and after all of them.

    Tracing starts before the listener exists, so everything it keeps (its bounded history
    included, full after 10,000 iterations at frequency 10) is counted from the start.
    """
    model = Passthrough()
    x = torch.ones(1, 1)
    opt = NoOpOptimizer(model.parameters())
    gc.collect()
    tracemalloc.start()
    listener = PerformanceListener(10, sinks=[], report_gc=True, verdict=False)
    attach(model, listener)
    first = total // 10
    hooks_loop(model, opt, x, first)
    gc.collect()
    at_first = tracemalloc.get_traced_memory()[0]
    hooks_loop(model, opt, x, total - first)
    gc.collect()
    at_end, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    listener.close()
    return {
        "iterations": total,
        "traced_bytes_at_10pct": at_first,
        "traced_bytes_at_end": at_end,
        "growth_bytes": at_end - at_first,
        "peak_bytes": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    n_hooks, n_tiny, rounds, mem = (20_000, 2_000, 5, 100_000) if args.quick else (50_000, 5_000, 15, 1_000_000)

    hooks = bench_hooks(n_hooks, rounds)
    tiny = bench_tiny(n_tiny, rounds)
    fed = bench_loader(n_hooks, rounds)
    shapes = bench_shapes(n_hooks, rounds)
    shape_calls = bench_shape_calls(n_hooks, rounds)
    memory = bench_memory(mem)
    us = 1e6
    result = {
        "machine": f"{platform.machine()} {platform.processor() or ''} torch {torch.__version__}".strip(),
        "hooks_bare_us": hooks["bare"] * us,
        "torch_forward_hook_dispatch_us": (hooks["torch-hook"] - hooks["bare"]) * us,
        "added_non_report_us": (hooks["no-report"] - hooks["bare"]) * us,
        "floor_us": (hooks["floor"] - hooks["bare"]) * us,
        "non_report_over_floor_us": (hooks["no-report"] - hooks["floor"]) * us,
        "added_freq10_us": (hooks["freq10"] - hooks["bare"]) * us,
        "added_freq1_us": (hooks["freq1"] - hooks["bare"]) * us,
        "loader_bare_us": fed["bare"] * us,
        "loader_added_non_report_us": (fed["no-report"] - fed["bare"]) * us,
        "shapes_given_us": shapes["given"] * us,
        "shapes_following_ns": (shapes["following"] - shapes["given"]) * 1e9,
        "shape_calls_ns": shape_calls * 1e9,
        "tiny_bare_us": tiny["bare"] * us,
        "tiny_added_freq10_us": (tiny["freq10"] - tiny["bare"]) * us,
        "tiny_added_freq1_us": (tiny["freq1"] - tiny["bare"]) * us,
        "memory": memory,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"machine: {result['machine']}")
    print(f"hooks loop, bare:                         {result['hooks_bare_us']:7.2f} us/iteration")
    print(f"  torch's dispatch of one forward hook:   +{result['torch_forward_hook_dispatch_us']:6.2f} us")
    print(f"  floor: two clock reads in the hooks:    +{result['floor_us']:6.2f} us")
    print(f"  listened, no report (non-report cost):  +{result['added_non_report_us']:6.2f} us"
          f"  ({result['non_report_over_floor_us']:+.2f} us over the floor)")
    print(f"  listened, frequency 10:                 +{result['added_freq10_us']:6.2f} us")
    print(f"  listened, frequency 1:                  +{result['added_freq1_us']:6.2f} us")
    print(f"hooks loop fed by a DataLoader, bare:     {result['loader_bare_us']:7.2f} us/iteration")
    print(f"  listened, no report (loader timed too): +{result['loader_added_non_report_us']:6.2f} us")
    print(f"token batches (64/512), FLOPs given:      {result['shapes_given_us']:7.2f} us/iteration")
    print(f"  FLOPs following each step's shape:      {result['shapes_following_ns']:+6.0f} ns"
          f"  (the counter's calls alone: {result['shape_calls_ns']:.0f} ns)")
    print(f"tiny model step, bare:                    {result['tiny_bare_us']:7.2f} us/iteration")
    print(f"  listened, frequency 10:                 +{result['tiny_added_freq10_us']:6.2f} us")
    print(f"  listened, frequency 1:                  +{result['tiny_added_freq1_us']:6.2f} us")
    print(
        f"memory over {memory['iterations']:,} listened iterations: {memory['growth_bytes']:+,} bytes "
        f"between 10% and 100% (peak traced {memory['peak_bytes']:,} bytes)"
    )


if __name__ == "__main__":
    main()
