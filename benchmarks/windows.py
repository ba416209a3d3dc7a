"""Single windows at frequency 1 against a stopwatch in the loop, and what the first report costs.

A plain loop (about 3.5 ms of work an iteration: a sleep, or a busy loop, each with some allocations)
reports every iteration to a listener with a memory sink and its verdict on, with and without
``report_gc``. The loop keeps a stopwatch of its own: for each iteration, from the return of the previous
``record_iteration`` to this one's call (everything the loop did). Each window's ``iteration_ms`` is compared
with it; a window more than 10% or 0.5 ms above it is counted, and the worst excess printed (ms and %).
The first report's cost is the first call's time on the stopwatch (it closes the warm-up window), the
first report after the warm-up the second's; both are trainperf's own time, in ``overhead_ms``.

``--busy N`` runs N spinning processes beside it (a loaded machine).

Run: ``python benchmarks/windows.py [--iterations 1000] [--busy 4]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
import warnings

from trainperf import PerformanceListener
from trainperf.sinks import MemorySink

WORK_S = 0.0035


def _spin() -> None:
    x = 0
    while True:
        x = (x * 31 + 7) % 1_000_003


def _work(kind: str, kept: list[list[object]]) -> None:
    if kind == "sleep":
        time.sleep(WORK_S)
    else:
        end = time.perf_counter() + WORK_S
        while time.perf_counter() < end:
            pass
    kept.append([object() for _ in range(50)])  # something for the collector
    del kept[:-200]


def run(kind: str, report_gc: bool, iterations: int) -> dict[str, float]:
    """One loop; its worst window against the stopwatch and its first reports' costs."""
    sink = MemorySink(iterations + 10)
    listener = PerformanceListener(1, sinks=[sink], report_gc=report_gc, verdict=True)
    kept: list[list[object]] = []
    spans: list[tuple[float, float]] = []  # (call, return) of each record_iteration
    back = time.perf_counter()
    for _ in range(iterations):
        _work(kind, kept)
        called = time.perf_counter()
        listener.record_iteration(samples=8)
        back = time.perf_counter()
        spans.append((called, back))
    listener.close()
    records = sink.records
    worst_ms = worst_pct = 0.0
    above = 0
    for record in records[1:]:
        i = record.iteration - 1
        stopwatch_ms = 1000.0 * (spans[i][0] - spans[i - 1][1])
        excess = (record.iteration_ms or 0.0) - stopwatch_ms
        above += excess > max(0.5, 0.1 * stopwatch_ms)
        if excess > worst_ms:
            worst_ms, worst_pct = excess, 100.0 * excess / stopwatch_ms
    calls = [1000.0 * (b - a) for a, b in spans]
    return {"windows": len(records), "above": above, "worst_ms": worst_ms, "worst_pct": worst_pct,
            "first_ms": calls[0], "second_ms": calls[1], "later_ms": sorted(calls[2:])[len(calls[2:]) // 2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--busy", type=int, default=0, help="spinning processes beside the loop")
    options = parser.parse_args()
    warnings.simplefilter("default")
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(options.busy)]
    for p in spinners:
        p.start()
    try:
        print(f"frequency 1, {options.iterations} iterations of ~{WORK_S * 1000:.1f} ms, "
              f"{options.busy} busy processes beside it")
        for kind in ("busy", "sleep"):
            for report_gc in (False, True):
                r = run(kind, report_gc, options.iterations)
                print(f"  {kind:5} report_gc={report_gc!s:5}: {r['above']:3.0f} of {r['windows']:.0f} windows above "
                      f"the stopwatch; worst +{r['worst_ms']:6.2f} ms ({r['worst_pct']:5.1f}%); "
                      f"first call {r['first_ms']:5.2f} ms, second {r['second_ms']:4.2f} ms, "
                      f"median {r['later_ms']:4.2f} ms")
    finally:
        for p in spinners:
            p.terminate()


if __name__ == "__main__":
    main()
