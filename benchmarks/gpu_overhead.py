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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu import make_model  # noqa: E402

from trainperf import PerformanceListener  # noqa: E402
from trainperf.torch import attach  # noqa: E402


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
