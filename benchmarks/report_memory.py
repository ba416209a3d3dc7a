"""``trainperf report`` on oversized run files: a two-rank run whose rank 0 ``windows.jsonl`` and rank 1
``timeline.jsonl`` are each grown to ``--mb`` megabytes (about 1,100 bytes a window, 60 a span), then
each format is written in a child process whose peak memory (``ru_maxrss``) and time are measured.

Target: peak memory under 500 MB for any input.

Run: ``python benchmarks/report_memory.py [--mb 200] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainperf import PerformanceListener


def build(root: Path, megabytes: float) -> tuple[int, int]:
    for rank in (0, 1):
        ticks = iter(100.0 + 0.01 * (rank + 1) * k for k in range(100))
        listener = PerformanceListener(2, run_dir=root, rank=rank, clock=lambda ticks=ticks: next(ticks), sinks=[],
                                       report_hardware=False, wall_clock=lambda: 1.7e9)
        for _ in range(8):
            listener.record_iteration(samples=4)
        listener.close()
    windows = root / "rank-0" / "windows.jsonl"
    line = json.loads(windows.read_text().splitlines()[-1])
    size = n_windows = 0
    with open(windows, "w") as f:
        while size < megabytes * 1e6:
            n_windows += 1
            line["iteration"], line["timestamp"] = 2 * n_windows, 1.7e9 + 0.02 * n_windows
            text = json.dumps(line) + "\n"
            f.write(text)
            size += len(text)
    size = n_spans = 0
    with open(root / "rank-1" / "timeline.jsonl", "w") as f:
        while size < megabytes * 1e6:
            n_spans += 3
            i = n_spans // 3
            for phase, seconds in (("data", 0.001), ("compute", 0.008), ("other", 0.001)):
                text = json.dumps({"i": i, "ph": phase, "t": 1.7e9 + 0.01 * i, "d": seconds}) + "\n"
                f.write(text)
                size += len(text)
    return n_windows, n_spans


_CHILD = (
    "import resource, sys\n"
    "from trainperf.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def measure(root: Path, out: Path, fmt: str) -> tuple[float, float, float]:
    """Seconds, peak MB of the child process that wrote ``fmt``, and the output's MB."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, "report", str(root), "-o", str(out), "--format", fmt],
                          check=True, capture_output=True, text=True)
    took = time.perf_counter() - began
    peak_kb = int(done.stderr.strip().splitlines()[-1])
    size = sum(p.stat().st_size for p in (out.iterdir() if out.is_dir() else [out]))
    return took, peak_kb / 1024, size / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0)
    parser.add_argument("--keep", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = (args.keep or Path(tmp)) / "run"
        n_windows, n_spans = build(root, args.mb)
        print(f"rank 0 windows.jsonl: {args.mb:g} MB, {n_windows:,} windows; "
              f"rank 1 timeline.jsonl: {args.mb:g} MB, {n_spans:,} spans")
        for fmt, name in (("html", "report.html"), ("json", "report.json"), ("perfetto", "trace.json")):
            took, peak, size = measure(root, Path(tmp) / name, fmt)
            print(f"{fmt:9s} {took:6.1f} s, peak {peak:6.0f} MB, output {size:7.1f} MB")


if __name__ == "__main__":
    main()
