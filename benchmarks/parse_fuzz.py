"""Fuzz ``parse_log`` far longer than the test suite does: the property tests of
``tests/test_parse_fuzz.py`` (random bytes, mutated listener lines of all three formats, hostile
JSON; both paths must agree, never raise, and read every figure into its own column), with new
random examples on every run.

Run: ``python benchmarks/parse_fuzz.py [--examples N]`` (default 20,000 per property). It prints
the examples tried, the time taken and pytest's verdict; a failure prints the smallest example
hypothesis found and a blob to reproduce it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20_000, help="examples per property (default 20000)")
    args = parser.parse_args()
    if args.examples < 1:
        parser.error(f"--examples must be at least 1, got {args.examples}")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "TRAINPERF_FUZZ": "fuzz", "TRAINPERF_FUZZ_EXAMPLES": str(args.examples)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests" / "test_parse_fuzz.py")],
        env=env, cwd=root,
    )
    elapsed = time.perf_counter() - started
    print(f"{args.examples} examples per property, {elapsed:.0f} s: {'passed' if done.returncode == 0 else 'FAILED'}")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
