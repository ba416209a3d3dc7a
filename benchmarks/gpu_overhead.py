"""What listening costs a small launch-bound model on a GPU, split into its parts.

``benchmarks/gpu.py`` times bare against listened in five alternating rounds; on a virtual machine
whose host speed moves by tens of percent from one round to the next, that is not enough to see a
cost of tens of microseconds per step. This one runs many short rounds, each variant once per round
in a shuffled order, and reports the median of the per-round differences from the bare loop, in
wall time and in the training thread's CPU time:

* ``bare + 2 Event.record``: the loop recording two CUDA events per step itself (the floor);
* ``freq10 host timeline``: a listener at frequency 10 whose device timeline reads the host clock,
  so the cost of its CUDA events is left out;
* ``freq10``, ``freq10 no hardware`` (``report_hardware=False``), ``freq100``: the listener as users
  run it.

Where the differences from bare are smaller than the noise, it also times trainperf's own work
where it runs, on the training thread (the forward callback and the optimizer step hook, the
only ways into trainperf from this loop), and, in the bare loop, the two ``Event.record()`` calls
a loop would make itself: a cost measured in place, on the same cold caches as the listener's,
rather than a difference of two noisy wall times. The split shows what the listener's time goes
to: the two events, reports (with the polls of windows waiting for the device) and the rest.

Run: ``python benchmarks/gpu_overhead.py [--rounds N] [--steps N]`` on a machine with CUDA.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.optim import optimizer as torch_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu import make_model  # noqa: E402

from trainperf import PerformanceListener  # noqa: E402
from trainperf.torch import attach  # noqa: E402
from trainperf.torch._tap import tap_of  # noqa: E402


class Stopwatches:
    """Seconds spent inside wrapped callables, by name (the wrapper's own cost is measured apart)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, name: str, fn: Any) -> Any:
        self.spent.setdefault(name, 0.0)
        self.calls.setdefault(name, 0)
        spent, calls = self.spent, self.calls
        clock = time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += clock() - started
                calls[name] += 1

        return timed


def listened_in_place(model: torch.nn.Module, step: Any, steps: int, options: dict[str, Any]) -> dict[str, float]:
    """Seconds per step spent in trainperf on the training thread, by part, for a listener with ``options``."""
    listener = PerformanceListener(sinks=[], history=None, verdict=False, **options)
    handle = attach(model, listener)
    for _ in range(5):  # training starts: set-up stays out
        step()
    watches = Stopwatches()
    tap = tap_of(model)
    callbacks = list(tap.callbacks)
    tap.callbacks[:] = [watches.wrap("forward callback", c) for c in callbacks]
    hooks = torch_optimizer._global_optimizer_post_hooks
    saved_hooks = dict(hooks)
    for key in list(hooks):
        hooks[key] = watches.wrap("step hook", hooks[key])
    timeline = listener.timeline
    for name in ("begin", "end"):
        setattr(timeline, name, watches.wrap("two event records", getattr(timeline, name)))
    listener._report = watches.wrap("reports and polls", listener._report)  # type: ignore[method-assign]
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    tap.callbacks[:] = callbacks
    hooks.clear()
    hooks.update(saved_hooks)
    del listener._report
    listener.close()
    handle.detach()
    out = {name: seconds / steps for name, seconds in watches.spent.items()}
    out["wrapped calls"] = sum(watches.calls.values()) / steps
    return out


class HostTimeline:
    """A device timeline on the host clock: the listener's work without its CUDA events."""

    def __init__(self, device: torch.device) -> None:
        self.ended: list[tuple[float | None, float]] = []
        self.began: float | None = None
        self.origin = 0.0

    def start(self) -> None:
        self.ended, self.began, self.origin = [], None, time.perf_counter()

    def begin(self) -> None:
        if self.began is None:
            self.began = time.perf_counter()

    def end(self) -> None:
        self.ended.append((self.began, time.perf_counter()))
        self.began = None

    def ready(self, count: int) -> bool:
        return count <= len(self.ended)

    def take(self, count: int) -> list[tuple[float | None, float]]:
        out = [(None if b is None else b - self.origin, e - self.origin) for b, e in self.ended[:count]]
        self.origin = self.ended[count - 1][1]
        del self.ended[:count]
        return out

    def wait(self) -> None:
        pass

    def stage(self, value: Any) -> Any:
        return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=31, help="rounds (default 31)")
    parser.add_argument("--steps", type=int, default=300, help="steps per variant and round (default 300)")
    args = parser.parse_args()
    if args.rounds < 3 or args.steps < 20:
        parser.error(f"--rounds must be at least 3 and --steps at least 20, got {args.rounds} and {args.steps}")
    if not torch.cuda.is_available():
        print("benchmarks/gpu_overhead.py: no CUDA device here; nothing measured")
        return 0
    model, opt = make_model(256, 4, "cuda")
    x, y = torch.randn(64, 256, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]  # type: ignore[no-untyped-call]
    stream = torch.cuda.current_stream()

    def run(n: int, with_events: bool = False) -> tuple[float, float]:
        """Wall seconds per step (up to the device's end) and the training thread's CPU seconds per step."""
        torch.cuda.synchronize()
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            if with_events:
                events[0].record(stream)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if with_events:
                events[1].record(stream)
        cpu = time.thread_time() - cpu
        torch.cuda.synchronize()
        return (time.perf_counter() - wall) / n, cpu / n

    variants: dict[str, dict[str, Any] | str | None] = {
        "bare": None,
        "bare + 2 Event.record": "events",
        "freq10 host timeline": {"frequency": 10, "timeline_factory": HostTimeline},
        "freq10": {"frequency": 10},
        "freq10 no hardware": {"frequency": 10, "report_hardware": False},
        "freq100": {"frequency": 100},
    }
    run(300)
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    rng = random.Random(0)
    for _ in range(args.rounds):
        order = list(variants.items())
        rng.shuffle(order)
        for name, kind in order:
            if not isinstance(kind, dict):
                w, c = run(args.steps, with_events=kind == "events")
            else:
                options = dict(kind)
                factory = options.pop("timeline_factory", None)
                listener = PerformanceListener(sinks=[], history=None, verdict=False, **options)
                handle = attach(model, listener, timeline_factory=factory)
                run(5)  # training starts: the listener's set-up stays out of the timed steps
                w, c = run(args.steps)
                listener.close()
                handle.detach()
            wall[name].append(w)
            cpu[name].append(c)
    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    # In place: the two records of a bare loop, and trainperf's own time.
    in_place_steps = 20 * args.steps
    watches = Stopwatches()
    record = watches.wrap("records", lambda: (events[0].record(), events[1].record()))
    empty = watches.wrap("empty", lambda: None)
    for _ in range(in_place_steps):
        opt.zero_grad(set_to_none=True)
        record()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        empty()
    torch.cuda.synchronize()
    bare_records = watches.spent["records"] / in_place_steps
    wrapper = watches.spent["empty"] / in_place_steps
    in_place = {name: listened_in_place(model, step, in_place_steps, options)
                for name, options in (("freq10", {"frequency": 10}),
                                      ("freq10 no hardware", {"frequency": 10, "report_hardware": False}),
                                      ("freq100", {"frequency": 100}))}
    record_n = 20_000
    started = time.perf_counter()
    for _ in range(record_n):
        events[0].record()
    record_s = (time.perf_counter() - started) / record_n
    torch.cuda.synchronize()
    bare_wall, bare_cpu = statistics.median(wall["bare"]), statistics.median(cpu["bare"])
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.rounds} rounds of {args.steps} steps")
    print(f"bare: {1e6 * bare_wall:.1f} us/step wall, {1e6 * bare_cpu:.1f} us/step of the training thread's CPU")
    print("added per step (median of the per-round differences from bare):")
    for name in variants:
        if name == "bare":
            continue
        dw = statistics.median([v - b for v, b in zip(wall[name], wall["bare"], strict=True)])
        dc = statistics.median([v - b for v, b in zip(cpu[name], cpu["bare"], strict=True)])
        print(f"  {name:22s} wall {1e6 * dw:+7.1f} us ({100 * dw / bare_wall:+.1f}%)   CPU {1e6 * dc:+7.1f} us")
    print(f"torch.cuda.Event.record() alone: {1e6 * record_s:.1f} us")
    print(f"in place, {in_place_steps} steps each (a timing wrapper: {1e6 * wrapper:.2f} us, taken off each call)")
    print(f"  bare loop, two Event.record() calls: {1e6 * (bare_records - wrapper):.1f} us/step")
    for name, parts in in_place.items():
        entry = parts["forward callback"] + parts["step hook"] - parts["wrapped calls"] * wrapper
        inner = parts["two event records"] - 2 * wrapper
        report = parts["reports and polls"]
        print(f"  {name:20s} trainperf {1e6 * entry:6.1f} us/step: event records {1e6 * inner:5.1f}, "
              f"reports and polls {1e6 * report:5.1f}, the rest {1e6 * (entry - inner - report):5.1f}")
    target = 2 * record_s + 5e-6
    parts = in_place["freq10"]
    measured = parts["forward callback"] + parts["step hook"] - parts["wrapped calls"] * wrapper
    print(f"target at frequency 10: two Event.record() + 5 us = {1e6 * target:.1f} us; "
          f"in place {1e6 * measured:.1f} us: {'met' if measured <= target else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
