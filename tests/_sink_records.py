"""A fixed set of records that covers what the sinks write (every field set and unset, non-finite
figures, collectors that come and go, odd names and values), and the sinks' output for them: the
files under ``tests/data/sink_output`` hold what the sinks wrote for these records, and every sink
must keep writing exactly that.

Run ``python tests/_sink_records.py`` to write the files again (only when a change of output is meant).
"""

from __future__ import annotations

import logging
import random
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

from trainperf import GCStat, PerformanceRecord, Verdict

__all__ = ["OUTPUT", "fixed_records", "write_outputs"]

OUTPUT = Path(__file__).parent / "data" / "sink_output"

#: Fields added to the schema after these files were first written: the files hold them (as ``null``)
#: and the records leave them unset, so every other value stays what it was.
ADDED_SINCE = ("goodput", "cuda_allocated_floor_mb", "cuda_allocated_max_pct", "cuda_reserved_max_pct",
               "cuda_headroom_mb", "cuda_fragmentation_mb", "cuda_inactive_split_pct", "rss_floor_mb", "rss_peak_mb",
               "rss_headroom_mb", "workers_memory_mb", "memory_growth_mb", "memory_full_in")
_FLOATS = [name for name in PerformanceRecord.__dataclass_fields__
           if PerformanceRecord.__dataclass_fields__[name].type == "float | None" and name not in ADDED_SINCE]
_VERDICTS = [
    Verdict("fine", 3.0, "data wait 3%, GC 0% of step"),
    Verdict("input-bound", 63.4, "63% of step waiting for data"),
    Verdict("gc-bound", 12.0, "12% of step in garbage collection"),
    Verdict("padding", 41.5, "41% of the step computes padding (\"pad\" tokens)"),
]


def _full(i: int, rng: random.Random) -> PerformanceRecord:
    it = rng.uniform(0.01, 2000.0)
    values = {name: rng.choice([rng.uniform(0, 5000), rng.uniform(0, 1e-4), float(rng.randint(0, 9)), 1e21])
              for name in _FLOATS}
    values.update(iteration_ms=it, iteration_p50_ms=it, window_s=it / 1e3 * 10, padding_share=rng.random() / 2)
    return PerformanceRecord(
        iteration=10 * (i + 1), window_iterations=10, warmup=i == 0, timestamp=1.8e9 + i, **values,
        gc=(GCStat("gen0", rng.randint(0, 5), rng.random()), GCStat("gen1", 0, 0.0), GCStat("gen2", 1, None)),
        host="node-ü", pid=4242, rank=rng.choice([None, 0, 3]), device=rng.choice([None, 0]), epoch=i // 3,
        samples=rng.choice([None, 320]), batches=10, tokens=rng.choice([None, 40960]), tokens_padded=81920,
        tokens_loss=40000, peak="H100 SXM bf16", etl_source="loader", optimizer_steps=10, skipped_steps=i % 2,
        first_iteration=10 * i + 1, capture=rng.choice([None, "/runs/a;b/trace-0.json", "captures/t.json"]),
        verdict=rng.choice([None, *_VERDICTS]), extra=rng.choice([{}, {"lr": 0.001, "loss_scale": 65536.0}]),
    )


def fixed_records() -> list[PerformanceRecord]:
    """The records, always the same: full ones, sparse ones, and ones with hostile values."""
    rng = random.Random(42)
    out = [_full(i, rng) for i in range(40)]
    out.append(PerformanceRecord(iteration=1, window_iterations=1, window_s=0.0, warmup=True, timestamp=0.0))
    out.append(PerformanceRecord(iteration=2, window_iterations=1, window_s=0.5, warmup=False, timestamp=1.5,
                                 etl_ms=0.0, iteration_ms=500.0, score=float("nan")))
    nasty = replace(out[1], score=float("inf"), etl_ms=float("-inf"), iteration_ms=float("nan"),
                    gc=(GCStat("PS Scavenge", 2, 1.0), GCStat("x;[y]: (z)", 1, float("inf")),
                        GCStat("cuda_alloc_retries", 3, None)),
                    verdict=Verdict("cpu-contention", float("nan"), "line\nbreak; and \u2028 too"),
                    extra={"nan": float("nan"), "big": 1e300}, host="\x00odd\x7f")
    out.append(nasty)
    out.append(replace(out[2], gc=(GCStat("gen0", 1, 0.1), GCStat("gen0", 2, 0.2)), tokens=0, padding_share=0.0,
                       verdict=Verdict("fine", 0.0, "")))
    out.append(replace(out[3], gc=(GCStat("gen3", 7, 2.5),)))  # a collector that appears mid-run
    for name in _FLOATS[:8]:  # one figure at a time at the edges of its formats
        for value in (0.0, -0.0, 1e-12, 0.009999, 99.95, 1e16, -3.5):
            out.append(replace(out[4], **{name: value}))
    rates = ("samples_per_sec", "batches_per_sec", "tokens_per_sec", "tflops_per_sec", "mfu", "mfu_real")
    for name in rates:  # each rate on both sides of where its decimals stop showing two digits
        for value in (1.0, 0.95, 0.1, 0.095, 0.0909, 0.01, 0.0095, 0.00826, -0.095, 1e-7):
            out.append(replace(out[6], **{name: value}))
    out.append(replace(out[5], score=-0.0, iteration=2**62, epoch=0, rank=0, device=7, pid=0))
    return out


def write_outputs(folder: Path, records: list[PerformanceRecord], batch: int = 0) -> None:
    """Every sink's output for ``records`` into ``folder``: ``line.log`` (the logging sink's lines),
    ``records.jsonl``, ``records.csv``, ``rank-0/windows.jsonl`` (a run directory's window lines);
    with ``batch``, handed over that many at a time to the sinks that take several at once."""
    from trainperf.sinks import CsvSink, JsonLinesSink, LoggingSink, RunDirSink

    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder / "rank-0", ignore_errors=True)  # a run directory is appended to
    logger = logging.getLogger("trainperf.golden")
    handler = logging.FileHandler(folder / "line.log", mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    run_dir = RunDirSink(folder, rank=0, wall_clock=lambda: 0.0)
    sinks = [LoggingSink(logger), JsonLinesSink(folder / "records.jsonl", append=False),
             CsvSink(folder / "records.csv", append=False), run_dir]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CSV sink's wider header is said
        if batch:
            for start in range(0, len(records), batch):
                for sink in sinks:
                    sink.write_many(records[start : start + batch])  # type: ignore[attr-defined]
        else:
            for record in records:
                for sink in sinks:
                    sink(record)
    for sink in sinks[1:]:
        sink.close()  # type: ignore[attr-defined]
    handler.close()
    (folder / "rank-0" / "meta.json").unlink()  # it holds the host and the time of the run


OUTPUT_FILES = ("line.log", "records.jsonl", "records.csv", "rank-0/windows.jsonl")


if __name__ == "__main__":
    write_outputs(OUTPUT, fixed_records())
    print(f"wrote {', '.join(OUTPUT_FILES)} under {OUTPUT}")
