"""Fuzz ``parse_log`` far longer than the test suite does: the long run of ``tests/test_parse_fuzz.py``
(``pytest -m long``): random bytes, mutated and hostile logs of all three formats (truncated, glued
and restarted lines, garbage bytes, huge numbers, NaN, missing and reordered fields), well-formed
lines that must read back as written; both paths must agree, never raise, and read every figure
into its own column. New random inputs on every run, 26,000 in all by default.

Run: ``python benchmarks/parse_fuzz.py [--examples N]`` (``N`` per property instead of the test
file's counts). It prints each property's inputs, time, exceptions and disagreements, their totals,
and pytest's verdict; a failure prints the smallest input hypothesis found and a blob to reproduce it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

#: The line the long run prints per property.
_FIGURES = re.compile(r"^fuzz: (.+): (\d+) inputs in (\d+) s, (\d+) exceptions, (\d+) disagreements$", re.MULTILINE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, help="inputs per property (default: the test file's, 26,000 in all)")
    args = parser.parse_args()
    if args.examples is not None and args.examples < 1:
        parser.error(f"--examples must be at least 1, got {args.examples}")
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    if args.examples is not None:
        env["TRAINPERF_FUZZ_EXAMPLES"] = str(args.examples)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-m", "long",
         str(root / "tests" / "test_parse_fuzz.py")],
        env=env, cwd=root, capture_output=True, text=True,
    )
    elapsed = time.perf_counter() - started
    print(done.stdout[-20_000:], done.stderr[-5_000:], sep="", end="")
    found = _FIGURES.findall(done.stdout)
    inputs, exceptions, disagreements = (sum(int(row[i]) for row in found) for i in (1, 3, 4))
    print(f"\n{len(found)} properties, {inputs:,} inputs in {elapsed:.0f} s: {exceptions} exceptions, "
          f"{disagreements} disagreements: {'passed' if done.returncode == 0 else 'FAILED'}")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
