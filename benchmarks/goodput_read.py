"""Reading a large run directory's goodput: 64 ranks, 3 attempts each, 100,000 windows per rank.

The files are written directly, in the format ``RunDirSink`` writes: ``windows.jsonl`` lines made by
``trainperf.records.record_json`` from records a real listener built (a warm-up window, plain windows,
windows with an evaluation or a checkpoint save, each window's step jittered), and a ``goodput.json``
per rank of ``AttemptAccount.to_dict()`` entries with their ``windows_from``/``windows_to`` byte offsets.
The 1st and 2nd attempts were killed: their ledger entries stop 5 windows short of their last window,
so a reader must read those windows from ``windows.jsonl``. Rank 0's ``windows.jsonl`` is written once
and hard-linked into the other folders (same windows, a fraction of the disk and the time); each rank's
ledger has its own process start (rank r started r x 0.5 s earlier), so their accounts differ.

Then, each in a fresh process: ``trainperf goodput DIR``, ``read_goodput(DIR)`` and ``trainperf report DIR
-o x.json``, with their wall seconds and peak RSS (``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of a
process whose only child is the one measured). Targets for the first two: under 30 s and under 500 MB.
The account is checked: lost iterations, the last iteration, every window counted, rows adding up.

Run: ``python benchmarks/goodput_read.py [--ranks N] [--windows N] [--keep DIR] [--no-report]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainperf import PerformanceListener, PerformanceRecord
from trainperf.ranks._ledger import read_attempts as rank_attempts
from trainperf.records import AttemptAccount, record_json

BASE = 1_700_000_000.0
FREQUENCY = 100
#: Windows of each attempt, as shares of the rank's windows; a killed attempt's ledger misses its last ones.
SHARES = (0.4, 0.35, 0.25)
UNCOUNTED = 5
#: A checkpoint is saved every this many windows, half-way between the kills; a restart resumes from the
#: last one saved, and trains again what came after it.
CHECKPOINT_EVERY = 1000
EVAL_EVERY = 200


def templates() -> dict[str, PerformanceRecord]:
    """Records a listener builds at frequency 100 for a step of 45 ms, 4 ms of data wait and 4 ms of
    collective wait: a warm-up window, a plain one, one with a 3 s evaluation, one with a 6 s save."""
    clock = [0.0]
    out: list[PerformanceRecord] = []
    listener = PerformanceListener(FREQUENCY, sinks=[out.append], verdict=False, clock=lambda: clock[0],
                                   wall_clock=lambda: BASE + clock[0], rank=0, sink_thread=False)
    listener.start()
    for window in range(4):
        for i in range(FREQUENCY):
            clock[0] += 0.05
            if i == FREQUENCY - 1 and window == 2:
                listener.add_time("eval", 3.0)
                clock[0] += 3.0
            if i == FREQUENCY - 1 and window == 3:
                listener.add_time("checkpoint", 6.0)
                clock[0] += 6.0
            listener.add_time("wait", 0.004)
            listener.record_iteration(samples=64, etl=0.004, other=0.001)
    listener.close()
    return dict(zip(("warmup", "plain", "eval", "checkpoint"), out, strict=True))


def write_rank0(folder: Path, windows: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rank 0's ``windows.jsonl``; its ledger's entries and what the account must say."""
    rng = random.Random(0)
    kinds = templates()
    counts = [int(windows * s) for s in SHARES[:-1]]
    counts.append(windows - sum(counts))
    entries: list[dict[str, Any]] = []
    start_iteration, lost, wall = 0, 0, BASE
    offset = 0
    with open(folder / "windows.jsonl", "w", encoding="utf-8") as f:
        for k, count in enumerate(counts):
            killed = k < len(counts) - 1
            # 2 minutes of start-up; a resumed attempt's last 45 s of it load the checkpoint
            attempt = AttemptAccount(wall, started=wall + 120.0, start_iteration=start_iteration, pid=1000 + k)
            if k:
                attempt.add_startup({"checkpoint_load": 45.0})
            now = attempt.first_seen
            entry_from, entry_to, saved = offset, offset, start_iteration
            iteration = start_iteration
            for w in range(count):
                kind = ("warmup" if w == 0 else "checkpoint" if w % CHECKPOINT_EVERY == CHECKPOINT_EVERY // 2 - 1
                        else "eval" if w % EVAL_EVERY == EVAL_EVERY - 1 else "plain")
                t = kinds[kind]
                jitter = rng.gauss(0.0, 0.9)  # ms per iteration
                iteration += FREQUENCY
                window_s = t.window_s + jitter * FREQUENCY / 1000.0
                now += window_s
                assert t.compute_ms is not None and t.iteration_ms is not None
                record = replace(t, iteration=iteration, first_iteration=iteration - FREQUENCY + 1, timestamp=now,
                                 window_s=window_s, compute_ms=t.compute_ms + jitter,
                                 iteration_ms=t.iteration_ms + jitter, iteration_p50_ms=t.iteration_ms + jitter,
                                 pid=1000 + k)
                line = record_json(record)
                f.write(line)
                offset += len(line.encode())
                if not killed or w < count - UNCOUNTED:
                    attempt.add_record(record)
                    entry_to = offset
                if kind == "checkpoint":
                    saved = iteration
            if not killed:
                attempt.add_tail({"checkpoint": 30.0})
                attempt.close(now + 30.0)
            entry = attempt.to_dict()
            entry.update(windows_from=entry_from, windows_to=entry_to, process_start_known=True)
            entries.append(entry)
            if killed:  # resumed from the last save, after 5 minutes
                lost += iteration - saved
                start_iteration, wall = saved, now + 300.0
    return entries, {"lost": lost, "last": iteration, "windows": windows}


def build(run_dir: Path, ranks: int, windows: int) -> dict[str, int]:
    """The run directory; what its account must say."""
    (run_dir / "rank-0").mkdir(parents=True)
    entries, expected = write_rank0(run_dir / "rank-0", windows)
    last = entries[-1]
    for rank in range(ranks):
        folder = run_dir / f"rank-{rank}"
        folder.mkdir(exist_ok=True)
        if rank:
            os.link(run_dir / "rank-0" / "windows.jsonl", folder / "windows.jsonl")
        own = [{**e, "process_start": e["process_start"] - 0.5 * rank} for e in entries]
        (folder / "goodput.json").write_text(json.dumps({"schema": 1, "attempts": own}) + "\n")
        meta = {"schema": 1, "rank": rank, "local_rank": rank % 8, "world_size": ranks, "host": f"node-{rank // 8}",
                "pid": last["pid"], "run_name": "goodput-read", "started": last["process_start"],
                "ended": last["ended"]}
        (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return expected


READ = ("import json, sys\nfrom trainperf import read_goodput\n"
        "json.dump(read_goodput(sys.argv[1]).to_dict(), open(sys.argv[2], 'w'))")


def measure(command: list[str], stdout: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of ``command`` run in a fresh process, itself the only child of
    another fresh process, so that the peak is its own."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = tmp.name
    subprocess.run([sys.executable, __file__, "--measure", out, str(stdout), "--", *command], check=True)
    figures = json.loads(Path(out).read_text())
    os.unlink(out)
    return figures["wall_s"], figures["maxrss_kb"] / 1024.0


def _measure_child(out: str, stdout: str, command: list[str]) -> None:
    with open(stdout, "wb") as sink, open(stdout + ".err", "wb") as err:
        began = time.perf_counter()
        subprocess.run(command, check=True, stdout=sink, stderr=err)
        wall = time.perf_counter() - began
    Path(out).write_text(json.dumps({"wall_s": wall,
                                     "maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))


def check(account: dict[str, Any], expected: dict[str, int], ranks: int, run_dir: Path) -> list[str]:
    """What is wrong with the account read back (nothing, when all is well)."""
    wrong = []
    total = sum(r["seconds"] for r in account["rows"])
    if abs(total - account["wall_s"]) > 1e-6 * account["wall_s"]:
        wrong.append(f"rows add up to {total} s, not the wall time {account['wall_s']} s")
    if account["lost_iterations"] != expected["lost"]:
        wrong.append(f"lost iterations {account['lost_iterations']}, expected {expected['lost']}")
    if account["last_iteration"] != expected["last"]:
        wrong.append(f"last iteration {account['last_iteration']}, expected {expected['last']}")
    if [a["clean"] for a in account["attempts"]] != [False, False, True]:
        wrong.append(f"attempts {account['attempts']}")
    if len(account["ranks"]) != ranks or account["rank"] != ranks - 1:
        wrong.append(f"{len(account['ranks'])} ranks, slowest {account['rank']}")
    attempts, notes = rank_attempts(run_dir / "rank-0")
    counted = sum(a.windows for a in attempts)
    if counted != expected["windows"]:
        wrong.append(f"{counted} windows counted of {expected['windows']}")
    tail = f"{2 * UNCOUNTED} windows read from windows.jsonl past what goodput.json held"
    if not any(tail in note for note in notes):
        wrong.append(f"no note of the killed attempts' last windows: {notes}")
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--windows", type=int, default=100_000, help="windows per rank, over its 3 attempts")
    parser.add_argument("--keep", type=Path, help="build the run directory here and keep it")
    parser.add_argument("--no-report", action="store_true", help="leave out trainperf report (minutes)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="goodput-read-"))
    run_dir = root / "run"
    try:
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        began = time.perf_counter()
        expected = build(run_dir, args.ranks, args.windows)
        size = (run_dir / "rank-0" / "windows.jsonl").stat().st_size
        print(f"run: {args.ranks} ranks x {args.windows:,} windows in 3 attempts, written in "
              f"{time.perf_counter() - began:.1f} s; windows.jsonl {size / 1e6:.1f} MB (one file, hard-linked)")
        cli, cli_mb = measure([sys.executable, "-m", "trainperf", "goodput", str(run_dir)], root / "goodput.txt")
        read, read_mb = measure([sys.executable, "-c", READ, str(run_dir), str(root / "account.json")],
                                root / "read.txt")
        report = report_mb = None
        if not args.no_report:
            report, report_mb = measure([sys.executable, "-m", "trainperf", "report", str(run_dir), "-o",
                                         str(root / "x.json")], root / "report.txt")
        account = json.loads((root / "account.json").read_text())
        print(f"trainperf goodput DIR:        {cli:6.2f} s, peak RSS {cli_mb:5.0f} MB (targets < 30 s, < 500 MB)")
        print(f"read_goodput(DIR):            {read:6.2f} s, peak RSS {read_mb:5.0f} MB (targets < 30 s, < 500 MB)")
        if report is not None:
            print(f"trainperf report DIR -o x.json: {report:4.2f} s, peak RSS {report_mb:5.0f} MB")
        print("\n".join((root / "goodput.txt").read_text().splitlines()[:12]))
        print(f"lost iterations {account['lost_iterations']:,} (expected {expected['lost']:,}), last iteration "
              f"{account['last_iteration']:,} (expected {expected['last']:,})")
        wrong = check(account, expected, args.ranks, run_dir)
        if report is not None and json.loads((root / "x.json").read_text())["goodput"] != account:
            wrong.append("the report's goodput differs from read_goodput's")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for line in wrong:
            print(f"WRONG: {line}")
        met = cli < 30 and read < 30 and cli_mb < 500 and read_mb < 500
        print("targets met" if met else "TARGETS MISSED")
        return 0 if met and not wrong else 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 4 and sys.argv[1] == "--measure" and sys.argv[4] == "--":
        _measure_child(sys.argv[2], sys.argv[3], sys.argv[5:])
        sys.exit(0)
    sys.exit(main())
