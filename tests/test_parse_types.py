"""What JSON lines read back as: whole numbers as integers, on both of the parser's paths, and a
fraction where a whole number belongs kept as written, never cut."""

from __future__ import annotations

import json

import pytest

from _parse_paths import both_paths, read_both
from trainperf import MemorySink, PerformanceListener
from trainperf.sinks import JsonLinesSink

pd = pytest.importorskip("pandas")

WHOLE = ("iteration", "window_iterations", "pid", "samples", "batches", "optimizer_steps", "first_iteration",
         "epoch", "rank", "skipped_steps", "gc.gen0.count")


def test_a_json_lines_files_whole_numbers_come_back_as_integers_equal_to_the_records(tmp_path, clock):
    path = tmp_path / "run.jsonl"
    memory = MemorySink()
    with JsonLinesSink(path) as jsonl:
        listener = PerformanceListener(4, sinks=[jsonl, memory], clock=clock, sink_thread=False, rank=2,
                                       report_gc=True, report_hardware=False)
        listener.set_epoch(1)
        for _ in range(20):
            clock.advance(0.01)
            listener.record_iteration(samples=32, etl=0.001)
        listener.close()
    frame = read_both(path.read_bytes()).to_pandas()
    for name in WHOLE:
        assert str(frame[name].dtype) == "int64", name
    records = memory.records
    assert frame["pid"].tolist() == [r.pid for r in records]
    assert frame["samples"].tolist() == [r.samples for r in records] == [128] * 5
    assert frame["first_iteration"].tolist() == [1, 5, 9, 13, 17]
    assert frame["gc.gen0.count"].tolist() == [r.gc[0].count for r in records]


@pytest.mark.parametrize("path", ["line", "bulk"])
def test_a_fraction_in_a_whole_number_column_is_kept_as_written(path):
    lines = [json.dumps({"iteration": 4, "epoch": 2.75, "samples": 320}),
             json.dumps({"iteration": 8, "epoch": 3, "samples": 320})]
    by_line, in_bulk = both_paths("\n".join(lines) + "\n")
    log = by_line if path == "line" else in_bulk
    frame = log.to_pandas()
    assert frame["epoch"].tolist() == [2.75, 3.0] and str(frame["epoch"].dtype) == "float64"
    assert log.column("epoch") == [2.75, 3.0]
    assert frame["samples"].tolist() == [320, 320] and str(frame["samples"].dtype) == "int64"


def test_a_whole_number_column_with_a_missing_value_stays_float_with_nan():
    lines = [json.dumps({"iteration": 4, "samples": 320}), json.dumps({"iteration": 8, "samples": None})]
    frame = read_both("\n".join(lines) + "\n").to_pandas()
    assert str(frame["samples"].dtype) == "float64"
    assert frame["samples"].iloc[0] == 320.0 and pd.isna(frame["samples"].iloc[1])


def test_a_fine_verdicts_share_reads_back_from_text_lines_as_from_json_lines(tmp_path, clock):
    import io
    import logging

    from trainperf.sinks import LoggingSink

    text = io.StringIO()
    logger = logging.getLogger("trainperf.test.fine")
    logger.handlers[:] = [logging.StreamHandler(text)]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    with JsonLinesSink(tmp_path / "run.jsonl") as jsonl:
        listener = PerformanceListener(4, sinks=[LoggingSink(logger), jsonl], clock=clock, sink_thread=False,
                                       report_hardware=False)
        for i in range(24):
            clock.advance(0.01)
            listener.record_iteration(samples=8, etl=0.0007 * (i % 5), other=0.0004)
        listener.close()
    records = listener.history.records
    assert all(r.verdict is not None and r.verdict.kind == "fine" for r in records)
    from_text = read_both(text.getvalue()).to_pandas()
    from_json = read_both((tmp_path / "run.jsonl").read_bytes()).to_pandas()
    assert from_text["verdict"].tolist() == from_json["verdict"].tolist() == ["fine"] * 6
    assert from_json["verdict_pct"].tolist() == [r.verdict.share for r in records]
    assert from_text["verdict_pct"].notna().all()
    assert (from_text["verdict_pct"] - from_json["verdict_pct"]).abs().max() <= 0.5  # the line says whole percents
