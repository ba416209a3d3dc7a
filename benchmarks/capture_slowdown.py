"""Does the capture reach the slowdown? Real runs on the CPU, with ``profile_dir`` and the default rule.

A small MLP (3 layers of 512, batch 64) trained under ``trainperf.torch.attach`` for 200 iterations,
reporting every 10, turns 5x slower at iteration 100 (a sleep of four times the step's own time, taken
inside the step). Four cases, each ``--runs`` times:

* ``fine``: nothing else happens before the slowdown;
* ``input-bound``: every iteration first waits for data as long as its step takes (before the slowdown
  too: the run's nature);
* ``busy``: as ``fine``, with four processes spinning on the CPU beside it all along;
* ``steady``: never slows down: it must take no capture but the baseline's.

The step's time is measured once before each run (the median of 20 steps), so that "5x" holds on this
machine. For each run: the iterations each trace covers (``b`` for the baseline's, ``a`` for an
anomaly's), and whether one covers iterations of the slow phase (100-200). The target: a trace of the
slow phase in at least 4 of 5 runs of each slowing case, and no anomaly capture in the steady run.

Run: ``python benchmarks/capture_slowdown.py [--runs 5]`` (CPU-heavy: about a minute or two).
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

from trainperf import PerformanceListener
from trainperf.torch import attach

ITERATIONS = 200
SLOW_FROM = 100
SLOWER = 5.0
CASES = ("fine", "input-bound", "busy", "steady")


def _spin() -> None:
    while True:
        pass


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    return model, torch.optim.SGD(model.parameters(), lr=0.01), torch.randn(64, 512), torch.randint(0, 10, (64,))


def _step_s(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    """The median time of one training step here and now (before any listener is attached)."""
    took = []
    for _ in range(20):
        began = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        took.append(time.perf_counter() - began)
    return statistics.median(took)


def one_run(case: str, folder: Path) -> list[dict[str, object]]:
    """One run of ``case``; the ``trainperf`` meta of each trace it wrote, in the order of its iterations."""
    model, optimizer, x, y = _model()
    step_s = _step_s(model, optimizer, x, y)
    wait_s = step_s if case == "input-bound" else 0.0
    extra_s = (SLOWER - 1.0) * (step_s + wait_s)  # the whole iteration turns SLOWER x slower
    listener = PerformanceListener(10, sinks=[], report_hardware=False, profile_dir=folder)
    attach(model, listener)
    for i in range(1, ITERATIONS + 1):
        if wait_s:
            time.sleep(wait_s)  # the loader: between one step and the next forward
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if case != "steady" and i >= SLOW_FROM:
            time.sleep(extra_s)
        optimizer.step()
    listener.close()
    metas = [json.loads(gzip.decompress(p.read_bytes()))["trainperf"] for p in folder.glob("*.pt.trace.json.gz")]
    return sorted(metas, key=lambda m: int(m["first_iteration"]))


def covers_slow_phase(meta: dict[str, object]) -> bool:
    return int(str(meta["last_iteration"])) >= SLOW_FROM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each case")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="trainperf: training is")  # the input-bound case's own verdict
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(4 if case == "busy" else 0)]
            for p in spinners:
                p.start()
            try:
                hits = anomalies = 0
                for run in range(1, args.runs + 1):
                    metas = one_run(case, Path(tmp) / f"{case}-{run}")
                    said = ", ".join(f"{'b' if m['baseline'] else 'a'} {m['first_iteration']}-{m['last_iteration']}"
                                     for m in metas) or "none"
                    hit = any(covers_slow_phase(m) for m in metas)
                    hits += hit
                    anomalies += sum(not m["baseline"] for m in metas)
                    reasons = "; ".join(str(m["reason"]) for m in metas if not m["baseline"])
                    print(f"{case:12s} run {run}: traces {said}; slow phase traced: {'yes' if hit else 'no'}"
                          + (f" ({reasons})" if reasons else ""), flush=True)
                if case == "steady":
                    print(f"{case:12s}: {anomalies} anomaly captures in {args.runs} runs (target 0)", flush=True)
                else:
                    print(f"{case:12s}: the slow phase traced in {hits} of {args.runs} runs (target >= 4 of 5)",
                          flush=True)
            finally:
                for p in spinners:
                    p.terminate()
                    p.join()


if __name__ == "__main__":
    main()
