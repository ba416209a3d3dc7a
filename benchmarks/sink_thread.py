"""What the sinks cost the training thread: inline (``sink_thread=False``) against the writer thread,
in one run, on the same loops.

* ``report``: the training thread's time per report (``record_iteration`` on a report iteration,
  minus a non-report one) with the default logging sink (to a file handler) and a JSON-lines sink,
  twice: back to back (every call reports, so the writer thread competes with the training thread
  for the interpreter all along), and with 1 ms between reports in which the training thread does
  not hold the interpreter (as in a step that runs in torch's kernels): each report timed alone;
* ``slow sink``: a loop of 1 ms steps reporting every 10 iterations to a sink that takes 20 ms,
  against the same loop with no listener: how much longer the loop takes.

Rounds alternate between the variants; the median round counts.

Run: ``python benchmarks/sink_thread.py [--quick]``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

from trainperf import PerformanceListener
from trainperf.sinks import JsonLinesSink, LoggingSink


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def report_cost(sink_thread: bool, folder: Path, reports: int, gap_s: float = 0.0) -> float:
    """Microseconds of the training thread per report (frequency 1, so every call reports), less a
    non-report call's; with ``gap_s``, each call is timed alone and ``gap_s`` of sleep follows it."""
    logger = logging.getLogger(f"bench.{sink_thread}")
    logger.handlers[:] = [logging.FileHandler(folder / f"log-{sink_thread}.txt")]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    with JsonLinesSink(folder / f"run-{sink_thread}.jsonl", append=False) as jsonl:
        listener = PerformanceListener(1, sinks=[LoggingSink(logger), jsonl], sink_thread=sink_thread,
                                       report_hardware=False, history=None)
        for _ in range(20):
            listener.record_iteration(samples=8)
        listener.flush()
        took = _timed_calls(listener, reports, gap_s)
        listener.close()
    for handler in logger.handlers:
        handler.close()
    plain = PerformanceListener(reports + 1, sinks=[], report_hardware=False, history=None)
    plain.record_iteration(samples=8)
    floor = _timed_calls(plain, reports, gap_s)
    plain.close()
    return 1e6 * (took - floor) / reports


def _timed_calls(listener: PerformanceListener, calls: int, gap_s: float) -> float:
    if not gap_s:
        began = time.perf_counter()
        for _ in range(calls):
            listener.record_iteration(samples=8)
        return time.perf_counter() - began
    took = 0.0
    for _ in range(calls):
        began = time.perf_counter()
        listener.record_iteration(samples=8)
        took += time.perf_counter() - began
        time.sleep(gap_s)
    return took


def slow_sink_loop(listener: PerformanceListener | None, steps: int) -> float:
    began = time.perf_counter()
    for _ in range(steps):
        spin(0.001)
        if listener is not None:
            listener.record_iteration(samples=8)
    return time.perf_counter() - began


def slow(record: object) -> None:
    time.sleep(0.020)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, reports, steps = (3, 500, 100) if args.quick else (7, 2000, 300)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for gap_s, how in ((0.0, "back to back"), (0.001, "1 ms apart")):
            cost: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(rounds):
                for threaded in (False, True):
                    cost[threaded].append(report_cost(threaded, folder, reports // 4 if gap_s else reports, gap_s))
            print(f"report (logging + JSON lines), {how}, training thread per report: inline "
                  f"{statistics.median(cost[False]):.1f} us, writer thread {statistics.median(cost[True]):.1f} us")
    loops: dict[str, list[float]] = {"bare": [], "inline": [], "thread": []}
    for _ in range(rounds):
        loops["bare"].append(slow_sink_loop(None, steps))
        for name, threaded in (("inline", False), ("thread", True)):
            listener = PerformanceListener(10, sinks=[slow], sink_thread=threaded, report_hardware=False)
            loops[name].append(slow_sink_loop(listener, steps))
            listener.close()
    bare = statistics.median(loops["bare"])
    for name in ("inline", "thread"):
        took = statistics.median(loops[name])
        print(f"1 ms steps, a 20 ms sink every 10: {name:6s} {took:.3f} s against {bare:.3f} s bare "
              f"({took / bare:.2f}x)")


if __name__ == "__main__":
    main()
