"""What keeping the CUDA allocator's history costs a launch-bound training step.

A model of many small layers on a small batch: the step is a long run of small kernel launches and
allocations, where the history's few microseconds per allocation weigh the most. Rounds with the
history off and on (as ``memory_history="start"`` records it: Python stacks, at most
``HISTORY_ENTRIES`` events) alternate in one run; the median step of each kind counts, and the ratio
of the two is the cost. Without CUDA it says so and exits 0.

    python benchmarks/memory_history.py [--layers 48] [--width 256] [--batch 8] [--rounds 10] [--steps 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10, help="rounds of each kind, alternating")
    parser.add_argument("--steps", type=int, default=50, help="steps per round")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("memory_history: no CUDA device here: nothing to measure")
        return 0
    from trainperf.torch._memory_history import HISTORY_ENTRIES, record_history

    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.LayerNorm(args.width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width, device="cuda")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()

    def round_ms() -> float:
        torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        return (time.perf_counter() - began) / args.steps * 1e3

    for _ in range(10):  # warm-up: kernels chosen, the allocator's cache filled
        step()
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(2 * args.rounds):
        on = r % 2 == 1
        record_history(on)
        times[on].append(round_ms())
    record_history(False)
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"{torch.cuda.get_device_name()}: {args.layers * 3} modules, width {args.width}, batch {args.batch}, "
          f"{args.rounds} alternating rounds of {args.steps} steps, history of at most {HISTORY_ENTRIES} events")
    print(f"  step, history off: {off:8.3f} ms (median round)")
    print(f"  step, history on:  {on:8.3f} ms")
    print(f"  cost: {on / off - 1:+.2%} of the step (target: at most +1%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
