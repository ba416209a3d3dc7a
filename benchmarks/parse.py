"""Parse 1,000,000 listener lines with ``trainperf.parse_log(...).to_pandas()`` and compare, in the
same run, with ``pandas.read_csv`` reading the same figures written as CSV (the ceiling: pandas'
C parser), and with the parser of an earlier commit reading the same files.

Targets, on each of the three logs below: at least 0.15x read_csv's rows per second, and at least
the rows per second of the parser at ``--against`` (default ``bd8eb8b``, before the parser was made
robust to cut, glued and re-encoded lines).

The first log is trainperf's lines behind a logger prefix. A second, mixed log is closer to a real
one: one line in ten is another logger's line, the verdict changes every few hundred lines, two
logger prefixes alternate in stretches, and one listener line in a thousand has a ``NaN`` score.
The third is the same run written by ``JsonLinesSink``.

The earlier parser is the ``src`` folder of ``--against`` (``git archive``). Each parser, and
read_csv, is timed in a fresh process (never in the one that has just written the logs), best of
``--repeats``; the two parsers take turns for ``--rounds`` rounds, so that a change in a shared
machine's load falls on both, and each figure is the best of all its rounds. Outside a git
checkout, or where the commit is missing, the comparison is said to be skipped; ``--against ''``
skips it.

Run: ``python benchmarks/parse.py [--rows N] [--repeats N] [--rounds N] [--against REV]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd

import trainperf
from trainperf import GCStat, PerformanceRecord, Verdict, format_line
from trainperf.sinks import JsonLinesSink


def make_lines(rows: int, seed: int = 0) -> list[PerformanceRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(rows):
        it = rng.uniform(1, 40)
        out.append(
            PerformanceRecord(
                iteration=(i + 1) * 10, window_iterations=10, window_s=it / 100, warmup=i == 0, timestamp=0.0,
                etl_ms=rng.uniform(0, 20), etl_max_ms=rng.uniform(20, 30), iteration_ms=it,
                iteration_p50_ms=it, iteration_p95_ms=it * 1.2, iteration_max_ms=it * 1.5,
                samples_per_sec=rng.uniform(100, 5000), batches_per_sec=rng.uniform(1, 100), score=rng.random(),
                gc=(GCStat("gen0", rng.randint(0, 5), rng.random()), GCStat("gen1", 0, 0.0), GCStat("gen2", 0, 0.0)),
                epoch=i // 1000, verdict=Verdict("fine", 3.0, "data wait 3%, GC 0% of step"),
            )
        )
    return out


OTHER_LINES = [
    "2026-11-22 02:22:03,002 WARNING lightning - Epoch 3: 100%|#####| 50/50 [00:01<00:00, 41.21it/s, loss=0.123]",
    "2026-11-22 02:22:03,114 INFO root - saved checkpoint epoch=3-step=1500.ckpt",
    "2026-11-22 02:22:03,200 DEBUG data - shard 17 of 64 loaded in 0.38 s",
]
VERDICTS = [
    Verdict("fine", 3.0, "data wait 3%, GC 0% of step"),
    Verdict("input-bound", 63.0, "63% of step waiting for data"),
    Verdict("gc-bound", 12.0, "12% of step in garbage collection"),
]


def mixed_log(records: list[PerformanceRecord], seed: int = 1) -> tuple[str, int]:
    """The records' lines in a realistic log, and how many listener lines it holds."""
    rng = random.Random(seed)
    prefixes = ["2026-11-22 02:22:02,771 INFO trainperf - ", "2026-11-22 02:22:02,771 INFO  [main] trainperf - "]
    out: list[str] = []
    verdict, prefix, listener = VERDICTS[0], prefixes[0], 0
    for r in records:
        if rng.random() < 0.003:
            verdict = rng.choice(VERDICTS)
        if rng.random() < 0.001:
            prefix = rng.choice(prefixes)
        if rng.random() < 0.1:
            out.append(rng.choice(OTHER_LINES))
            continue
        score = float("nan") if rng.random() < 0.001 else r.score
        out.append(prefix + format_line(replace(r, verdict=verdict, score=score)))
        listener += 1
    return "\n".join(out) + "\n", listener


#: Times, in a fresh process, each ``parse:PATH`` (``trainperf.parse_log(PATH).to_pandas()``, with
#: the ``trainperf`` that PYTHONPATH finds first) and ``csv:PATH`` (``pandas.read_csv``): best of
#: argv[1] repeats, and the rows each gave.
_TIMER = """
import json, sys, time
import pandas
import trainperf
out = {}
for job in sys.argv[2:]:
    kind, path = job.split(":", 1)
    read = (lambda: trainperf.parse_log(path).to_pandas()) if kind == "parse" else (lambda: pandas.read_csv(path))
    best, rows = float("inf"), 0
    for _ in range(int(sys.argv[1])):
        started = time.perf_counter()
        rows = len(read())
        best = min(best, time.perf_counter() - started)
    out[job] = [best, rows]
print(json.dumps(out))
"""


def time_in_subprocess(src: Path, jobs: list[str], repeats: int) -> dict[str, tuple[float, int]]:
    """Best seconds and rows of each job (see :data:`_TIMER`) in a fresh process whose ``trainperf``
    is the one in ``src``: ours and the earlier parser run alike, neither in a process that has
    just written the logs."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", _TIMER, str(repeats), *jobs], env=env, capture_output=True,
                          text=True, check=True)
    return {job: (seconds, rows) for job, (seconds, rows) in json.loads(done.stdout).items()}


def earlier_src(rev: str, into: Path) -> tuple[Path | None, str]:
    """The ``src`` folder of commit ``rev`` unpacked under ``into``, or ``None`` and why not."""
    here = Path(__file__).resolve().parent
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True)
    except OSError as exc:
        return None, f"git cannot be run ({exc})"
    if top.returncode:
        return None, "not in a git checkout"
    root = top.stdout.strip()
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=root,
                           capture_output=True, text=True)
    if found.returncode:
        return None, f"no commit {rev!r} in this checkout"
    archive = subprocess.run(["git", "archive", "--format=tar", found.stdout.strip(), "src"], cwd=root,
                             capture_output=True)
    if archive.returncode:
        return None, f"git archive {rev} src failed: {archive.stderr.decode(errors='replace').strip()}"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+: no path outside ``into``
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)  # noqa: S202 (our own repository's archive)
    return into / "src", ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3, help="timings per process, the best kept")
    parser.add_argument("--rounds", type=int, default=2, help="processes per parser, taking turns")
    parser.add_argument("--against", default="bd8eb8b", help="the commit whose parser to time too ('' for none)")
    args = parser.parse_args()
    records = make_lines(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        csv = Path(tmp) / "train.csv"
        prefix = "2026-11-22 02:22:02,771 INFO trainperf - "
        log.write_text("".join(prefix + format_line(r) + "\n" for r in records))
        pd.DataFrame([r.to_dict(flat=True) for r in records[: min(args.rows, 200_000)]]).drop(
            columns=["extra", "host"], errors="ignore"
        ).pipe(lambda df: pd.concat([df] * (args.rows // len(df)) + [df.iloc[: args.rows % len(df)]])).to_csv(
            csv, index=False
        )
        mixed = Path(tmp) / "mixed.log"
        text, listener_lines = mixed_log(records)
        mixed.write_text(text)
        jsonl = Path(tmp) / "train.jsonl"
        with JsonLinesSink(jsonl) as sink:
            for record in records:
                sink(record)
        del records, text
        ours_src = Path(trainperf.__file__).resolve().parents[1]
        jobs = [f"parse:{path}" for path in (log, mixed, jsonl)]
        earlier_at, skipped = None, "no --against given"
        if args.against:
            earlier_at, skipped = earlier_src(args.against, Path(tmp) / "earlier")
        ours: dict[str, tuple[float, int]] = {}
        earlier: dict[str, tuple[float, int]] = {}
        for _ in range(args.rounds):  # taking turns, so that a change in the machine's load falls on both
            for job, (seconds, rows) in time_in_subprocess(ours_src, [f"csv:{csv}", *jobs], args.repeats).items():
                ours[job] = min(ours.get(job, (seconds, rows)), (seconds, rows))
            if earlier_at is not None:
                for job, (seconds, rows) in time_in_subprocess(earlier_at, jobs, args.repeats).items():
                    earlier[job] = min(earlier.get(job, (seconds, rows)), (seconds, rows))
    csv_s, csv_rows = ours[f"csv:{csv}"]
    expected = {f"parse:{log}": args.rows, f"parse:{mixed}": listener_lines, f"parse:{jsonl}": args.rows}
    for job, rows in expected.items():
        assert ours[job][1] == rows, (job, ours[job], rows)
    assert csv_rows == args.rows, csv_rows
    theirs = args.rows / csv_s
    print(f"rows: {args.rows:,}; each figure the best of {args.rounds} rounds of {args.repeats} repeats, "
          "each parser in a fresh process")
    print(f"pandas.read_csv: {csv_s:6.2f} s  {theirs:12,.0f} rows/s")
    print("trainperf.parse_log(...).to_pandas(), target >= 0.15x read_csv"
          + (f" and >= {args.against}'s parser:" if earlier else ":"))
    logs = [
        ("text log", log, f"{args.rows:,} lines"),
        ("mixed log", mixed, f"{args.rows:,} lines, {listener_lines:,} listener lines"),
        ("JSON lines", jsonl, f"{args.rows:,}, JsonLinesSink"),
    ]
    for name, path, what in logs:
        seconds, rows = ours[f"parse:{path}"]
        rate = rows / seconds
        line = f"  {name} ({what}): {seconds:6.2f} s {rate:10,.0f} rows/s = {rate / theirs:.3f}x read_csv"
        if f"parse:{path}" in earlier:
            old_s, old_rows = earlier[f"parse:{path}"]
            old_rate = rows / old_s
            line += (f"; {args.against}: {old_s:6.2f} s {old_rate:10,.0f} rows/s = {old_rate / theirs:.3f}x"
                     f" read_csv; ours {rate / old_rate:.2f}x {args.against}'s")
            if old_rows != rows:
                line += f" (it read {old_rows:,} rows)"
        print(line)
    if earlier_at is None:
        print(f"comparison with an earlier parser skipped: {skipped}")


if __name__ == "__main__":
    main()
