"""What ``import trainperf`` costs: only the listener's parts load (the report, the doctor, the log
reader, the profiler capture and every framework wait until used), and its import time, measured with
``python -X importtime`` against a control measured in the same run."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

#: The parts a listener needs: what ``import trainperf`` may load of trainperf.
LISTENER_PARTS = ("trainperf.base", "trainperf.core", "trainperf.records", "trainperf.sinks")
#: Named so that a failure says what came in: none of them is needed to listen.
NOT_NEEDED = (
    "trainperf.ranks._report", "trainperf.ranks._report._analyse", "trainperf.ranks._report._html",
    "trainperf.ranks._report._json", "trainperf.ranks._stragglers", "trainperf.ranks._copy",
    "trainperf.diagnosis", "trainperf.diagnosis._checks", "trainperf.logs._parse", "trainperf.logs._plot",
    "trainperf.profile._capture", "trainperf.profile._tracer", "trainperf.cli", "trainperf.data",
    "trainperf.torch", "torch", "numpy", "pandas", "matplotlib", "argparse", "html", "csv",
)
#: ``import trainperf`` takes at most this long on an idle machine, and on a busy one at most
#: ``WALL_FACTOR`` times what importing ``logging`` and ``threading`` takes then (a loose bound: wall
#: time on a shared machine swings with the load)...
TARGET_S = 0.15
WALL_FACTOR = 12.0
#: ...and at most this many times their CPU time, which the load hardly moves: the median of the ratios of
#: ``PAIRS`` runs, each beside its own control run. On the 2-core machine, over 10 measurements each: 3.1 to
#: 4.5 (with 9 pairs 4.1 to 5.6, once; single pairs 2.4 to 8.0, so one pair, or a median of 5, is not
#: enough). Before the goodput, memory, padding and per-shape FLOPs parts about 3.6; before the imports
#: were made lazy, about 7.
#: Importing numpy with it reads about 12.
CPU_FACTOR = 7.0
PAIRS = 11
#: What each measured run does: the import between two readings of the process's CPU time.
TIMED = "import time; began = time.process_time(); import {}; print(time.process_time() - began)"

def importtime(code: str, cache: str) -> tuple[dict[str, int], str]:
    """Run ``python -X importtime -c code`` with its bytecode cached under ``cache`` (as an installed
    package has it); returns each imported module's cumulative microseconds, and the standard output."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                          env=env, check=True, timeout=120)
    cumulative = {}
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and line.startswith("import time:") and parts[1].strip().isdigit():
            cumulative[parts[2].strip()] = int(parts[1])
    return cumulative, done.stdout


def unneeded(modules: set[str]) -> list[str]:
    ours = [m for m in modules if m.startswith("trainperf.")]
    outside = [m for m in ours if not any(m == p or m.startswith(p + ".") for p in LISTENER_PARTS)]
    return sorted(set(outside) | (modules & set(NOT_NEEDED)))


def test_import_trainperf_loads_only_what_the_listener_needs(tmp_path):
    loaded, _ = importtime("import trainperf", str(tmp_path))
    assert "trainperf.core._listener" in loaded  # the listener itself, and the measurement worked
    assert unneeded(set(loaded)) == []


def test_a_listener_built_recording_and_closed_loads_nothing_more(tmp_path):
    code = ("import sys\n"
            "from trainperf import PerformanceListener\n"
            "listener = PerformanceListener(2, report_gc=True)\n"
            "for i in range(7):\n"
            "    listener.record_iteration(samples=4, etl=0.001, score=1.5)\n"
            "listener.close()\n"
            "print(listener.history[-1].iteration, ' '.join(sys.modules))")
    _, out = importtime(code, str(tmp_path))
    last, *modules = out.split()
    assert last == "7"
    assert unneeded(set(modules)) == []


def test_import_time_is_a_small_multiple_of_two_standard_modules_measured_in_the_same_run(tmp_path):
    """``python -X importtime``'s cumulative time of ``trainperf`` (median of ``PAIRS`` runs) and the CPU
    time of the import (the median of each run's ratio) against ``logging`` and ``threading`` imported in
    a run just after each."""
    cache = str(tmp_path)
    importtime("import trainperf, logging, threading", cache)  # writes the bytecode: later runs read it
    ours, control = [], []
    for _ in range(PAIRS):
        times, cpu = importtime(TIMED.format("trainperf"), cache)
        ours.append((times["trainperf"] / 1e6, float(cpu)))
        times, cpu = importtime(TIMED.format("logging, threading"), cache)
        control.append(((times["logging"] + times["threading"]) / 1e6, float(cpu)))
    wall, base_wall = (statistics.median(run[0] for run in runs) for runs in (ours, control))
    bound = max(TARGET_S, WALL_FACTOR * base_wall)
    assert wall <= bound, f"import trainperf took {wall:.3f} s, logging + threading {base_wall:.3f} s"
    ratio = statistics.median(mine[1] / theirs[1] for mine, theirs in zip(ours, control, strict=True))
    assert ratio <= CPU_FACTOR, (
        f"import trainperf took {ratio:.2f} times the CPU of logging + threading (median of {PAIRS} pairs; "
        f"trainperf's median {statistics.median(run[1] for run in ours):.3f} s, theirs "
        f"{statistics.median(run[1] for run in control):.3f} s)")
