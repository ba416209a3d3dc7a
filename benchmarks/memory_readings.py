"""What reading the memory costs a report, in one run: a listener reporting every iteration (frequency 1,
no sink but its history, hardware figures on) with the memory readings and the growth watch, and with
them taken out (the resident memory read through ``psutil`` at most once a second, as before), in alternating
rounds (the median round counts). The cost per report is the difference; nothing runs on the iterations
between reports.

Run: ``python benchmarks/memory_readings.py [--rounds 7] [--iterations 5000]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings

from trainperf import PerformanceListener
from trainperf.core._hardware import ProcessProbe


class _NoWatch:
    def observe(self, *args: object, **kwargs: object) -> None:
        return None


def report_round(iterations: int, *, memory: bool) -> float:
    """Microseconds per iteration of a listener reporting every iteration."""
    listener = PerformanceListener(1, sinks=[], history=10)
    readings = listener._readings
    if not memory:
        for probe in readings.probes:
            if isinstance(probe, ProcessProbe):
                probe._memory = None  # the resident memory alone, through psutil, once a second
        listener._publisher.memory = _NoWatch()  # type: ignore[assignment]
    listener.start()
    began = time.perf_counter()
    for _ in range(iterations):
        listener.record_iteration(samples=8, etl=0.0)
    spent = time.perf_counter() - began
    listener.close()
    return 1e6 * spent / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=5000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with_memory: list[float] = []
    without: list[float] = []
    report_round(500, memory=True)  # imports and first reads
    for _ in range(args.rounds):
        without.append(report_round(args.iterations, memory=False))
        with_memory.append(report_round(args.iterations, memory=True))
    a, b = statistics.median(without), statistics.median(with_memory)
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print(f"report without the memory readings: {a:.1f} us; with them: {b:.1f} us; "
          f"cost {b - a:+.1f} us per report ({b / a:.2f}x)")


if __name__ == "__main__":
    main()
