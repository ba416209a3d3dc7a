"""What the live goodput account costs, in one run: the same loop with the account and with it taken
out, in alternating rounds (the median round counts).

* ``report``: a listener reporting every iteration (frequency 1, no sink but its history), so every
  iteration takes the report path, where the account counts the window and sets the record's
  ``goodput``; the cost per report is the difference.
* ``run directory``: a ``RunDirSink`` written record by record, with its ledger (``goodput.json``, kept
  current at most once a second) and with the ledger's work taken out.

Run: ``python benchmarks/goodput_live.py [--rounds 7] [--iterations 20000]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import warnings

from trainperf import PerformanceListener, PerformanceRecord, RunDirSink


def report_round(iterations: int, *, account: bool) -> float:
    """Microseconds per iteration of a listener reporting every iteration."""
    listener = PerformanceListener(1, sinks=[], history=10)
    if not account:
        listener._publisher.goodput = None  # the account left out: the report path without it
    listener.start()
    began = time.perf_counter()
    for _ in range(iterations):
        listener.record_iteration(samples=8, etl=0.0)
    spent = time.perf_counter() - began
    listener.close()
    return 1e6 * spent / iterations


def sink_round(records: list[PerformanceRecord], *, ledger: bool) -> float:
    """Microseconds per record written by a run directory's sink."""
    with tempfile.TemporaryDirectory() as folder:
        sink = RunDirSink(folder, rank=0)
        if not ledger:
            sink.ledger.windows = lambda *args: None  # type: ignore[method-assign]
        began = time.perf_counter()
        for record in records:
            sink(record)
        spent = time.perf_counter() - began
        sink.close()
    return 1e6 * spent / len(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=20_000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    listener = PerformanceListener(10, sinks=[], history=None)
    listener.start()
    for i in range(10 * 2000):
        listener.record_iteration(samples=8, etl=0.001 * (i % 3))
    records = list(listener.history)
    listener.close()
    timings: dict[str, list[float]] = {"report, no account": [], "report, account": [],
                                       "run directory, no ledger": [], "run directory, ledger": []}
    for _ in range(args.rounds):
        timings["report, no account"].append(report_round(args.iterations, account=False))
        timings["report, account"].append(report_round(args.iterations, account=True))
        timings["run directory, no ledger"].append(sink_round(records, ledger=False))
        timings["run directory, ledger"].append(sink_round(records, ledger=True))
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
          f"medians of {args.rounds} rounds")
    medians = {name: statistics.median(values) for name, values in timings.items()}
    for name, value in medians.items():
        print(f"  {name:28} {value:8.2f} us")
    print(f"  the account per report:      {medians['report, account'] - medians['report, no account']:+8.2f} us "
          f"({medians['report, account'] / medians['report, no account']:.3f}x)")
    print(f"  the ledger per record:       "
          f"{medians['run directory, ledger'] - medians['run directory, no ledger']:+8.2f} us "
          f"({medians['run directory, ledger'] / medians['run directory, no ledger']:.3f}x)")


if __name__ == "__main__":
    main()
