"""A run of 64 ranks x 100,000 iterations built through the public API (one listener per rank with
``rank=`` and ``run_dir=``, fake clocks in lock-step as under DDP, rank 7's loader slowed, a few
one-off hiccups), then ``trainperf report`` on it.

Measures: the time to build the HTML report (target < 60 s here), its size (target <= 10 MB), the
peak memory of the build, the time headless Chromium takes to render it (target < 3 s: the page's
own ``performance.now()`` at the end of its script, and the wall time of a ``--screenshot`` run
against an empty page), the JSON and Perfetto outputs, and one listener's memory with a run
directory over the whole run (bounded).

Run: ``python benchmarks/distributed_report.py [--ranks N] [--iterations N] [--frequency N] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from trainperf import PerformanceListener

BASE = 1_700_000_000.0
SLOW_RANK = 7


class Clock:
    """One rank's fake clocks: monotonic with its own origin, wall clock on the epoch."""

    def __init__(self, rank: int) -> None:
        self.t = 0.0
        self.origin = 1000.0 * rank

    def mono(self) -> float:
        return self.t + self.origin

    def wall(self) -> float:
        return BASE + self.t


def build_run(run_dir: Path, ranks: int, iterations: int, frequency: int) -> float:
    """Write the run; return the seconds it took."""
    rng = random.Random(0)
    slow = SLOW_RANK % ranks
    clocks = [Clock(r) for r in range(ranks)]
    listeners = [PerformanceListener(frequency, sinks=[], verdict=False, clock=c.mono, wall_clock=c.wall, rank=r,
                                     run_dir=run_dir) for r, c in enumerate(clocks)]
    for listener in listeners:
        listener.start()
    began = time.perf_counter()
    rand = rng.random
    for i in range(1, iterations + 1):
        etl = [0.002 + 0.0005 * rand() for _ in range(ranks)]
        etl[slow] += 0.020
        if i % 4999 == 0:  # a one-off hiccup on some rank: one slow batch
            etl[rng.randrange(ranks)] += 0.150
        latest = max(e + 0.010 + 0.001 * rand() for e in etl)
        end = clocks[0].t + latest + 0.020
        for r in range(ranks):
            clocks[r].t = end
            listeners[r].record_iteration(samples=32, etl=etl[r])
    for listener in listeners:
        listener.close()
    return time.perf_counter() - began


def listener_memory(iterations: int, frequency: int) -> tuple[int, int]:
    """Traced memory of one listener with a run directory at 10% and at 100% of the run."""
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock(0)
        listener = PerformanceListener(frequency, sinks=[], verdict=False, clock=clock.mono, wall_clock=clock.wall,
                                       rank=0, run_dir=tmp, history=10)
        tracemalloc.start()
        at_10 = 0
        for i in range(1, iterations + 1):
            clock.t += 0.001 + 0.001 * (i % 17 == 0)
            listener.record_iteration(samples=32, etl=0.0002)
            if i == iterations // 10:
                at_10 = tracemalloc.get_traced_memory()[0]
        at_end = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        listener.close()
    return at_10, at_end


def report(run_dir: Path, out: Path, fmt: str) -> tuple[float, int]:
    """Run ``trainperf report`` in a child process; return its seconds and peak RSS in bytes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trainperf", "report", str(run_dir), "-o", str(out), "--format", fmt],
                   check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    seconds = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, 1024 * max(peak, before)


def chromium_render(page: Path, tmp: Path) -> tuple[float | None, float, float] | None:
    """The page's own script time (ms), and the wall time of a screenshot of it and of an empty page."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return None
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--window-size=1400,1000", f"--user-data-dir={tmp / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=300).stdout
    found = re.search(r'data-rendered="(\d+)"', dom)
    empty = tmp / "empty.html"
    empty.write_text("<!DOCTYPE html><html><body></body></html>")

    def shot(target: Path) -> float:
        best = float("inf")
        for _ in range(3):
            began = time.perf_counter()
            subprocess.run([*flags, f"--screenshot={tmp / 'shot.png'}", target.as_uri()], capture_output=True,
                           timeout=300, check=True)
            best = min(best, time.perf_counter() - began)
        return best

    return (float(found.group(1)) if found else None), shot(page), shot(empty)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--frequency", type=int, default=100)
    parser.add_argument("--keep", help="build the run (and reports) in this folder and keep them")
    args = parser.parse_args()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="trainperf-dist-"))
    tmp.mkdir(parents=True, exist_ok=True)
    run_dir = tmp / "run"
    try:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        built = build_run(run_dir, args.ranks, args.iterations, args.frequency)
        print(f"run: {args.ranks} ranks x {args.iterations:,} iterations, frequency {args.frequency}: "
              f"written in {built:.1f} s, {du(run_dir) / 1e6:.1f} MB on disk")
        html = tmp / "report.html"
        seconds, peak = report(run_dir, html, "html")
        print(f"report --format html:     {seconds:6.1f} s (target < 60 s), {html.stat().st_size / 1e6:.2f} MB "
              f"(target <= 10 MB), peak RSS {peak / 1e6:.0f} MB")
        seconds, _ = report(run_dir, tmp / "report.json", "json")
        print(f"report --format json:     {seconds:6.1f} s, {(tmp / 'report.json').stat().st_size / 1e6:.2f} MB")
        seconds, _ = report(run_dir, tmp / "trace.json", "perfetto")
        print(f"report --format perfetto: {seconds:6.1f} s, {(tmp / 'trace.json').stat().st_size / 1e6:.1f} MB")
        rendered = chromium_render(html, tmp)
        if rendered is None:
            print("headless Chromium: not found, render time not measured")
        else:
            script_ms, page_s, empty_s = rendered
            print(f"headless Chromium: script done at {script_ms} ms after navigation; screenshot "
                  f"{page_s:.2f} s vs {empty_s:.2f} s for an empty page (+{page_s - empty_s:.2f} s; target < 3 s)")
        at_10, at_end = listener_memory(args.iterations, args.frequency)
        print(f"one listener with run_dir over {args.iterations:,} iterations: traced memory {at_10:,} bytes at 10%, "
              f"{at_end:,} bytes at 100%")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
