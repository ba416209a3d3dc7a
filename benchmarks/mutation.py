"""Mutation testing with cosmic-ray over the modules that compute what users read.

Each module is mutated in a git worktree of its own (the checkout stays untouched), against the
tests that pin it; modules run side by side, ``--jobs`` at a time. Prints, per module, the mutants
killed and the survivors (file, line, operator), which ``tests/README.md`` judges.

Slow (one pytest run per mutant): not part of CI. Needs ``pip install cosmic-ray``.

Run: ``python benchmarks/mutation.py [MODULE ...] [--jobs 2] [--keep DIR]``; with no module, all of
:data:`MODULES`. A module is a path under ``src/trainperf`` such as ``_verdict.py``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Module (under src/trainperf) -> the tests that pin it.
MODULES: dict[str, tuple[str, ...]] = {
    "_window.py": ("tests/test_window.py", "tests/test_attribution.py"),
    "_verdict.py": ("tests/test_verdict.py",),
    "_summary.py": ("tests/test_summary.py",),
    "_timeline.py": ("tests/test_timeline.py", "tests/test_timeline_loops.py"),
    "_stragglers.py": ("tests/test_stragglers.py", "tests/test_report.py"),
    "_atomic.py": ("tests/test_atomic.py",),
    "_gather.py": ("tests/test_gather.py",),
    "_own_time.py": ("tests/test_own_time.py",),
    "torch/_gap.py": ("tests/test_gap.py",),
    "torch/_batch.py": ("tests/test_batch.py",),
    "sinks/_jsonlines.py": ("tests/test_sinks_files.py", "tests/test_sinks_kill.py"),
    "_report/_load.py": ("tests/test_report.py", "tests/test_run_dir.py"),
}

CONFIG = """[cosmic-ray]
module-path = "src/trainperf/{module}"
timeout = 120.0
excluded-modules = []
test-command = "env PYTHONPATH=src {python} -m pytest -x -q -p no:cacheprovider -m 'not realtime' {tests}"

[cosmic-ray.distributor]
name = "local"
"""


def run_module(module: str, tests: tuple[str, ...], work: Path) -> tuple[str, int, int, list[str]]:
    """Mutate ``module`` in a fresh worktree; (module, mutants, killed, survivors)."""
    tree = work / module.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree)], check=True,
                   capture_output=True)
    try:
        for test in tests:  # tests not committed yet still run
            shutil.copy(ROOT / test, tree / test)
        config = tree / "cosmic-ray.toml"
        config.write_text(CONFIG.format(module=module, python=sys.executable, tests=" ".join(tests)))
        session = tree / "session.sqlite"
        for step in ("init", "exec"):
            subprocess.run([sys.executable, "-m", "cosmic_ray.cli", step, str(config), str(session)], cwd=tree,
                           check=True, capture_output=True)
        return (module, *_outcomes(session))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def _outcomes(session: Path) -> tuple[int, int, list[str]]:
    with sqlite3.connect(session) as db:
        rows = db.execute(
            "SELECT m.operator_name, m.start_pos_row, m.occurrence, r.test_outcome FROM mutation_specs m "
            "JOIN work_results r ON r.job_id = m.job_id").fetchall()
    survivors = [f"line {row} {op} #{occ}" for op, row, occ, outcome in rows if outcome == "SURVIVED"]
    killed = sum(1 for *_, outcome in rows if outcome == "KILLED")
    return len(rows), killed, sorted(survivors, key=lambda s: int(s.split()[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules under src/trainperf (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    chosen = args.modules or list(MODULES)
    unknown = [m for m in chosen if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; known: {', '.join(MODULES)}")
    work = Path(tempfile.mkdtemp(prefix="trainperf-mutation-"))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda m: run_module(m, MODULES[m], work), chosen))
    for module, total, killed, survivors in results:
        share = 100.0 * killed / total if total else float("nan")
        print(f"{module}: {killed} of {total} mutants killed ({share:.0f}%), {len(survivors)} survived")
        for s in survivors:
            print(f"    {s}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
