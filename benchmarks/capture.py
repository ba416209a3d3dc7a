"""What capturing the bad window costs, in one run on this machine.

* ``record_iteration``: with ``profile_dir`` set against without, at frequency 1000 (nearly every
  call a non-report one: the hot path) and 10, a steady loop that never triggers (rounds alternate;
  the median round counts): what the option costs while nothing is captured;
* ``capture``: a small MLP (3 layers of 512, batch 64) on the CPU whose step turns 6x slower (a sleep)
  at iteration 81 of 140, reporting every 10: the capture's cost on the training thread (the
  profiler's start, markers and stop), the traced iterations' time against the same iterations'
  time without the profiler (the windows after the slowdown), the time to write the trace beside
  training, and the trace's size for ``--iterations`` traced iterations against the cap.

Run: ``python benchmarks/capture.py [--quick] [--iterations 3]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from trainperf import CaptureRule, MemorySink, PerformanceListener


def hot_path_us(profile_dir: str | None, calls: int, frequency: int) -> float:
    """Microseconds per ``record_iteration`` (reports included) over ``calls`` calls."""
    listener = PerformanceListener(frequency, sinks=[], report_hardware=False, history=None, verdict=False,
                                   profile_dir=profile_dir, profile_rule=CaptureRule(baseline=False))  # checks only
    record = listener.record_iteration
    began = time.perf_counter()
    for _ in range(calls):
        record(samples=8)
    took = time.perf_counter() - began
    listener.close()
    return 1e6 * took / calls


def capture_run(folder: Path, iterations: int, slow_s: float) -> dict[str, float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
    memory = MemorySink()
    listener = PerformanceListener(10, sinks=[memory], report_hardware=False, profile_dir=folder,
                                   profile_rule=CaptureRule(iterations=iterations))
    ends = {}
    for i in range(1, 141):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if i >= 81:
            time.sleep(slow_s)
        listener.record_iteration(samples=64)
        ends[i] = listener.clock()
    listener.close()
    anomalies = [w for w in listener._capture.written if not w["baseline"]] if listener._capture is not None else []
    if len(anomalies) != 1:
        raise SystemExit(f"expected one capture of the slowdown, got {len(anomalies)}")
    (written,) = anomalies
    first, last = written["first_iteration"], written["last_iteration"]
    untraced = [ends[i] - ends[i - 1] for i in range(first + 1, 141) if i > last + 1 and i - 1 > last]
    path = Path(written["path"])
    events = len(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
    return {"cost_ms": written["cost_ms"], "export_ms": written["export_ms"],
            "traced_ms": written["traced_iteration_ms"], "untraced_ms": 1000 * statistics.median(untraced),
            "bytes": float(written["bytes"]), "events": float(events), "first": first, "last": last}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument("--iterations", type=int, default=3, help="iterations a capture traces")
    args = parser.parse_args()
    calls, rounds = (100_000, 5) if args.quick else (300_000, 9)
    with tempfile.TemporaryDirectory() as tmp:
        for frequency in (1000, 10):
            plain, with_dir = [], []
            for _ in range(rounds):
                plain.append(hot_path_us(None, calls, frequency))
                with_dir.append(hot_path_us(tmp, calls, frequency))
            p, w = statistics.median(plain), statistics.median(with_dir)
            print(f"record_iteration, frequency {frequency} ({rounds} rounds of {calls:,} calls): without profile_dir "
                  f"{p:.3f} us/call, with {w:.3f} us/call ({w - p:+.3f} us; {frequency * (w - p):+.1f} us per report)")
        run = capture_run(Path(tmp) / "traces", args.iterations, slow_s=0.02)
        cap = CaptureRule().max_mb
        print(f"capture of iterations {run['first']:.0f}-{run['last']:.0f} (MLP 3x512, batch 64, 6x slower from 81): "
              f"{run['cost_ms']:.1f} ms on the training thread; traced iterations {run['traced_ms']:.2f} ms against "
              f"{run['untraced_ms']:.2f} ms untraced ({run['traced_ms'] / run['untraced_ms']:.2f}x); written in "
              f"{run['export_ms']:.0f} ms beside training; trace {run['bytes'] / 1e6:.3f} MB "
              f"({run['events']:.0f} events; cap {cap:g} MB)")


if __name__ == "__main__":
    main()
