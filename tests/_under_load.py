"""Run pytest with busy processes beside it, several times in a row: do the timing tests hold on a loaded machine?

Starts ``--busy`` processes that spin on the CPU for the whole run, then runs pytest ``--runs`` times with the
arguments after ``--`` (by default the real-time tests), and prints each run's outcome and every test that failed
in any run. Exit status 0 only when every run passed.

    python tests/_under_load.py --busy 4 --runs 5 -- -m "realtime and not integration and not long" -q
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import subprocess
import sys
import time
from collections import Counter


def _spin() -> None:
    x = 0
    while True:
        x = (x * 31 + 7) % 1_000_003


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, pytest_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=4, help="processes spinning beside the tests (default 4)")
    parser.add_argument("--runs", type=int, default=5, help="pytest runs in a row (default 5)")
    options = parser.parse_args(ours)
    if options.busy < 0 or options.runs < 1:
        parser.error(f"--busy must be >= 0 and --runs >= 1, got {options.busy} and {options.runs}")
    pytest_args = pytest_args or ["-m", "realtime and not integration and not long", "-q"]
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(options.busy)]
    for p in spinners:
        p.start()
    failed: Counter[str] = Counter()
    outcomes = []
    try:
        for run in range(1, options.runs + 1):
            began = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args],
                                  capture_output=True, text=True)
            took = time.perf_counter() - began
            tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
            names = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, flags=re.MULTILINE)
            failed.update(names)
            outcomes.append(done.returncode == 0)
            print(f"run {run}/{options.runs} beside {options.busy} busy processes: {tail} ({took:.0f} s)", flush=True)
            for name in names:
                print(f"    {name}", flush=True)
    finally:
        for p in spinners:
            p.terminate()
    if failed:
        print("failed in some run: " + ", ".join(f"{n} (x{k})" for n, k in failed.most_common()))
    return 0 if all(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
