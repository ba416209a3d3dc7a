from __future__ import annotations

import io
import math

import pytest

import trainperf
from trainperf import GCStat, PerformanceListener, PerformanceRecord, Verdict, format_line
from trainperf.sinks import JsonLinesSink

# The lines of Deeplearning4j's performance guide, with the prefixes its loggers put before them.
GUIDE_LINES = [
    ".d.o.l.PerformanceListener - ETL: 0 ms; iteration 16; iteration time: 65 ms; samples/sec: 492.308; "
    "batches/sec: 15.384; ",
    "o.d.o.l.PerformanceListener - ETL: 0 ms; iteration 30; iteration time: 17 ms; samples/sec: 588.235; "
    "batches/sec: 58.824; score: 0.7229335801186025; GC: [PS Scavenge: 2 (1ms)], [PS MarkSweep: 2 (24ms)];",
]


def test_reads_the_guide_lines_exactly():
    log = trainperf.parse_log(GUIDE_LINES)
    assert len(log) == 2 and log.skipped == 0
    rows = list(log)
    assert rows[0]["iteration"] == 16 and rows[0]["etl_ms"] == 0 and rows[0]["iteration_ms"] == 65
    assert rows[0]["samples_per_sec"] == 492.308 and rows[0]["batches_per_sec"] == 15.384
    assert rows[1]["score"] == 0.7229335801186025
    assert rows[1]["gc.PS Scavenge.count"] == 2 and rows[1]["gc.PS Scavenge.ms"] == 1
    assert rows[1]["gc.PS MarkSweep.count"] == 2 and rows[1]["gc.PS MarkSweep.ms"] == 24
    assert rows[0]["gc.PS Scavenge.count"] is None


def test_reads_prefixes_device_nan_infinity_and_g1_names():
    lines = [
        "2019-03-01 10:00:00,123 INFO  [main] o.d.o.l.PerformanceListener - Device: [3]; ETL: 12 ms; iteration 40; "
        "iteration time: 30 ms; samples/sec: Infinity; batches/sec: 33.3; score: NaN; "
        "GC: [G1 Young Generation: 1 (3ms)], [G1 Old Generation: 0 (0ms)];",
    ]
    (row,) = list(trainperf.parse_log(lines))
    assert row["device"] == 3 and row["etl_ms"] == 12
    # NaN reads as missing in every view: a DataFrame cannot tell the two apart
    assert row["samples_per_sec"] == math.inf and row["score"] is None
    assert row["gc.G1 Young Generation.ms"] == 3 and row["gc.G1 Old Generation.count"] == 0


def full_record(i: int) -> PerformanceRecord:
    return PerformanceRecord(
        iteration=10 * i, window_iterations=10, window_s=0.25, warmup=i == 1, timestamp=0.0,
        etl_ms=0.0412, etl_max_ms=0.09, iteration_ms=24.9, iteration_p50_ms=24.0, iteration_p95_ms=29.5,
        iteration_max_ms=31.0, samples_per_sec=1285.1, batches_per_sec=40.2, score=0.72,
        gc=(GCStat("gen0", 3, 0.41), GCStat("gen1", 0, 0.0), GCStat("gen2", 1, 12.5)), epoch=2, rank=1,
        verdict=Verdict("input-bound", 63.0, "63% of step waiting for data"),
    )


def test_round_trips_our_own_lines_through_logging_prefixes():
    lines = [f"2026-11-22 02:22:02,771 INFO trainperf - {format_line(full_record(i))}" for i in (1, 2)]
    frame = trainperf.parse_log(lines).to_pandas()
    assert list(frame["iteration"]) == [10, 20]
    assert list(frame["warmup"]) == [True, False]
    row = frame.iloc[1]
    assert row["etl_ms"] == 0.04 and row["iteration_p95_ms"] == 29.5 and row["etl_max_ms"] == 0.09  # 2 decimals
    assert row["epoch"] == 2 and row["rank"] == 1
    assert row["verdict"] == "input-bound" and row["verdict_pct"] == 63
    assert row["gc.gen2.count"] == 1 and row["gc.gen2.ms"] == 12.5


def test_columns_follow_the_documented_names():
    frame = trainperf.parse_log(GUIDE_LINES).to_pandas()
    assert list(frame.columns)[:7] == ["iteration", "etl_ms", "iteration_ms", "samples_per_sec", "batches_per_sec",
                                       "score", "gc.PS Scavenge.count"][:5] + list(frame.columns)[5:7]
    for name in ["iteration", "etl_ms", "iteration_ms", "samples_per_sec", "batches_per_sec", "score"]:
        assert name in frame.columns


def test_lines_without_etl_are_read_too():
    rec = PerformanceRecord(iteration=5, window_iterations=5, window_s=0.1, warmup=False, timestamp=0.0,
                            iteration_ms=20.0)
    log = trainperf.parse_log(["INFO trainperf - " + format_line(rec), GUIDE_LINES[1]])
    assert [r["iteration"] for r in log] == [5, 30]
    assert [r["etl_ms"] for r in log] == [None, 0.0]


def test_skips_and_counts_other_lines_and_a_truncated_last_line(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(
        "starting\n" + GUIDE_LINES[1] + "\n\n" + "\x00\xff binary junk" + "\n" + GUIDE_LINES[1][:60]
    )
    log = trainperf.parse_log(path)
    assert len(log) == 1
    assert log.skipped == 3
    assert log.truncated == 1


def test_hostile_input_never_crashes():
    long_line = "x" * 2_000_000 + "iteration 5;" + "y" * 1000
    junk = [long_line, "ETL: ; iteration ;", "ETL: abc ms; iteration 7; samples/sec: 1.2.3;", "iteration 99999999999;"]
    log = trainperf.parse_log(junk)
    frame = log.to_pandas()
    assert len(frame) == len(log)
    row = frame[frame["iteration"] == 7].iloc[0]
    assert math.isnan(row["etl_ms"]) and math.isnan(row["samples_per_sec"])


def test_binary_file_object_and_text_file_object():
    data = ("\n".join(GUIDE_LINES) + "\n").encode()
    assert len(trainperf.parse_log(io.BytesIO(data))) == 2
    assert len(trainperf.parse_log(io.StringIO(data.decode()))) == 2


def test_unreadable_path_names_it(tmp_path):
    missing = tmp_path / "nope.log"
    with pytest.raises(OSError, match="nope.log"):
        trainperf.parse_log(missing)




def test_reads_json_lines_including_a_crash_cut_last_line(tmp_path, clock):
    path = tmp_path / "run.jsonl"
    sink = JsonLinesSink(path)
    listener = PerformanceListener(1, sinks=[sink], clock=clock, report_gc=True, report_score=True)
    for _ in range(3):
        clock.advance(0.01)
        listener.record_iteration(samples=8, score=float("nan"))
    listener.close()
    with open(path, "a") as f:
        f.write('{"iteration": 4, "etl_ms": 1.0, "samp')  # the writer died mid-line
    log = trainperf.parse_log(path)
    assert [r["iteration"] for r in log] == [1, 2, 3]
    assert log.truncated == 1
    frame = log.to_pandas()
    assert frame["samples_per_sec"].tolist() == pytest.approx([800.0] * 3)
    assert frame["score"].isna().all()
    assert "gc.gen0.count" in frame.columns and frame["warmup"].tolist() == [True, False, False]


def test_empty_log():
    log = trainperf.parse_log([])
    assert len(log) == 0 and len(log.to_pandas()) == 0


def test_history_lines_match_parsed_values(clock):
    listener = PerformanceListener(2, sinks=[], clock=clock, report_gc=True)
    sink = listener.history  # filled on the training thread, at each report
    for _ in range(6):
        clock.advance(0.003)
        listener.record_iteration(samples=16, etl=0.0005)
    frame = trainperf.parse_log([format_line(r) for r in sink]).to_pandas()
    for rec, (_, row) in zip(sink, frame.iterrows(), strict=True):
        assert row["iteration"] == rec.iteration
        assert row["iteration_ms"] == pytest.approx(rec.iteration_ms, rel=1e-2)
        assert row["etl_ms"] == pytest.approx(rec.etl_ms, rel=1e-2)


def test_json_lines_and_text_lines_come_out_in_the_order_of_the_log():
    lines = ['{"iteration": 1, "etl_ms": 2.0}', "ETL: 3 ms; iteration 2;", '{"iteration": 3, "etl_ms": 4.0}']
    log = trainperf.parse_log(lines)
    assert [r["iteration"] for r in log] == [1, 2, 3] and [r["etl_ms"] for r in log] == [2.0, 3.0, 4.0]


def test_a_line_cut_in_the_middle_is_skipped_and_counted_not_read(tmp_path):
    """A crash cut a line mid-field, the run restarted and wrote more: the cut line is no record."""
    whole = "INFO trainperf - ETL: 2 ms; iteration {}; iteration time: 4 ms; samples/sec: 100; batches/sec: 5;"
    dl4j = "o.d.o.l.PerformanceListener - ETL: 0 ms; iteration 16; iteration time: 65 ms; samples/sec: 492.308;"
    text = "\n".join([whole.format(10), whole.format(20)[:55], dl4j[:70], whole.format(10), dl4j, ""])
    log = trainperf.parse_log(io.StringIO(text))
    assert log.column("iteration") == [10.0, 10.0, 16.0]
    assert log.truncated == 2
    assert log.column("iteration_ms") == [4.0, 4.0, 65.0]


def test_a_whole_line_without_some_fields_is_still_a_record():
    text = "ETL: 2 ms; iteration 10; score: 0.5;\niteration 11; iteration time: 3 ms;\n"
    log = trainperf.parse_log(io.StringIO(text))
    assert log.column("iteration") == [10.0, 11.0] and log.truncated == 0
