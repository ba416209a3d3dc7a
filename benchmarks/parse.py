"""Parse 1,000,000 listener lines with ``trainperf.parse_log(...).to_pandas()`` and compare, in the
same run, with ``pandas.read_csv`` reading the same figures written as CSV (the ceiling: pandas'
C parser). Target: at least 0.1x read_csv's rows per second.

A second, mixed log is timed too, closer to a real one: one line in ten is another logger's line,
the verdict changes every few hundred lines, two logger prefixes alternate in stretches, and one
listener line in a thousand has a ``NaN`` score. So is the same run written by ``JsonLinesSink``.

Run: ``python benchmarks/parse.py [--rows N]``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
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


def best_of(repeats: int, fn):  # type: ignore[no-untyped-def]
    best = float("inf")
    result = None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
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
        ours_s, frame = best_of(args.repeats, lambda: trainperf.parse_log(log).to_pandas())
        theirs_s, reference = best_of(args.repeats, lambda: pd.read_csv(csv))
        mixed_s, mixed_frame = best_of(args.repeats, lambda: trainperf.parse_log(mixed).to_pandas())
        json_s, json_frame = best_of(args.repeats, lambda: trainperf.parse_log(jsonl).to_pandas())
    assert len(frame) == args.rows == len(reference), (len(frame), len(reference))
    assert len(mixed_frame) == listener_lines, (len(mixed_frame), listener_lines)
    assert len(json_frame) == args.rows, len(json_frame)
    ours, theirs = args.rows / ours_s, args.rows / theirs_s
    print(f"rows: {args.rows:,}; columns: ours {frame.shape[1]}, read_csv {reference.shape[1]}")
    print(f"trainperf.parse_log(...).to_pandas(): {ours_s:6.2f} s  {ours:12,.0f} rows/s")
    print(f"pandas.read_csv:                      {theirs_s:6.2f} s  {theirs:12,.0f} rows/s")
    print(f"ratio: {ours / theirs:.3f}x read_csv (target >= 0.1x)")
    mixed_rate = listener_lines / mixed_s
    print(f"mixed log ({args.rows:,} lines, {listener_lines:,} listener lines): {mixed_s:6.2f} s  "
          f"{mixed_rate:12,.0f} rows/s = {mixed_rate / theirs:.3f}x read_csv")
    json_rate = args.rows / json_s
    print(f"JSON lines ({args.rows:,}, JsonLinesSink, columns {json_frame.shape[1]}): {json_s:6.2f} s  "
          f"{json_rate:12,.0f} rows/s = {json_rate / theirs:.3f}x read_csv")


if __name__ == "__main__":
    main()
