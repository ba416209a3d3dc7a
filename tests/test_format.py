from __future__ import annotations

import pytest

from trainperf import GCStat, PerformanceRecord, Verdict, format_line
from trainperf.records._format import format_number


@pytest.mark.parametrize(
    "value, text",
    [(0.0, "0"), (21.34, "21.3"), (0.0412, "0.0412"), (1285.14, "1285.1"), (5.0, "5"), (float("nan"), "NaN"),
     (float("inf"), "Infinity"), (0.41, "0.41"), (2.345, "2.35")],
)
def test_format_number_keeps_sub_millisecond_precision(value, text):
    assert format_number(value) == text


def test_line_follows_deeplearning4j_order_then_extras():
    rec = PerformanceRecord(
        iteration=10, window_iterations=10, window_s=0.25, warmup=False, timestamp=0.0,
        etl_ms=21.3, etl_max_ms=30.0, iteration_ms=24.9, iteration_p50_ms=24.0, iteration_p95_ms=29.0,
        iteration_max_ms=31.0, samples_per_sec=1285.1, batches_per_sec=40.2, score=0.72,
        gc=(GCStat("gen0", 3, 0.41), GCStat("gen1", 0, 0.0)), epoch=1,
        verdict=Verdict("input-bound", 63.0, "63% of step waiting for data"),
    )
    assert format_line(rec) == (
        "ETL: 21.30 ms; iteration 10; iteration time: 24.90 ms; samples/sec: 1285.1; batches/sec: 40.2; "
        "score: 0.72; GC: [gen0: 3 (0.41ms)], [gen1: 0 (0.00ms)]; iteration p50: 24.00 ms; p95: 29.00 ms; "
        "max: 31.00 ms; ETL max: 30.00 ms; epoch: 1; verdict: input-bound (63% of step waiting for data);"
    )


def test_line_leaves_out_what_was_not_reported():
    rec = PerformanceRecord(iteration=3, window_iterations=3, window_s=0.1, warmup=True, timestamp=0.0)
    assert format_line(rec) == "iteration 3; warm-up;"


def test_figures_have_one_precision_per_kind():
    """Milliseconds with two decimals, rates with one: no ``0.000862 ms``, no ``70`` beside ``4480.2``."""
    rec = PerformanceRecord(
        iteration=20, window_iterations=10, window_s=0.25, warmup=False, timestamp=0.0,
        etl_ms=0.000862, iteration_ms=14.0, samples_per_sec=4480.2, batches_per_sec=70.0,
        gc=(GCStat("gen0", 0, 0.0),),
    )
    line = format_line(rec)
    assert "ETL: 0.00 ms" in line and "iteration time: 14.00 ms" in line
    assert "samples/sec: 4480.2; batches/sec: 70.0;" in line
    assert "[gen0: 0 (0.00ms)]" in line


def test_a_collector_name_cannot_split_a_line_or_end_its_field():
    from trainperf import GCStat, PerformanceRecord, format_line, parse_log

    hostile = GCStat("a\nb;c]: 9 (1ms)] [x", 1, 2.0)
    records = [PerformanceRecord(iteration=i, window_iterations=1, window_s=1.0, warmup=False, timestamp=0.0,
                                 etl_ms=1.0, iteration_ms=2.0, gc=(hostile,)) for i in (1, 2, 3)]
    lines = [format_line(r) for r in records]
    assert all("\n" not in line for line in lines)
    log = parse_log(lines)
    assert log.rows == 3 and log.column("iteration") == [1.0, 2.0, 3.0]
    (name,) = {c[3:-6] for c in log.columns if c.startswith("gc.") and c.endswith(".count")}
    assert log.column(f"gc.{name}.count") == [1.0, 1.0, 1.0]


def _slow_record(**rates) -> PerformanceRecord:
    return PerformanceRecord(iteration=5, window_iterations=5, window_s=2.0, warmup=False, timestamp=0.0,
                             etl_ms=0.5, iteration_ms=400.0, **rates)


def test_a_rate_too_small_for_its_decimals_keeps_three_significant_digits_and_reads_back(tmp_path):
    """A model on the CPU does some 1e-5 TFLOP/s: the line never says ``TFLOP/s: 0.00``, and what
    ``parse_log`` and ``trainperf parse`` read back is the measured rate, not 0."""
    import csv

    from trainperf import parse_log
    from trainperf.cli import main

    rates = dict(samples_per_sec=0.25, batches_per_sec=0.0625, tokens_per_sec=0.04, tflops_per_sec=4.8762e-06,
                 mfu=0.00042)
    line = format_line(_slow_record(**rates))
    assert "samples/sec: 0.25; batches/sec: 0.0625;" in line
    assert "tokens/sec: 0.04; TFLOP/s: 0.00000488; MFU: 0.00042;" in line
    log = parse_log([line] * 3)
    for name, value in rates.items():
        assert log.column(name) == [pytest.approx(value, rel=5e-3)] * 3, name
    (tmp_path / "train.log").write_text(f"INFO trainperf - {line}\n" * 3)
    assert main(["parse", str(tmp_path / "train.log"), "-o", str(tmp_path / "train.csv")]) == 0
    with open(tmp_path / "train.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(row["tflops_per_sec"]) for row in rows] == [pytest.approx(4.8762e-06, rel=5e-3)] * 3


def test_a_measured_zero_rate_is_written_and_a_rate_not_measured_is_left_out():
    line = format_line(_slow_record(samples_per_sec=0.0, tflops_per_sec=0.0))
    assert "samples/sec: 0.0;" in line and "TFLOP/s: 0.00;" in line
    assert "MFU" not in line and "tokens/sec" not in line and "batches/sec" not in line


def test_rates_large_enough_keep_their_fixed_decimals():
    line = format_line(_slow_record(samples_per_sec=1285.14, batches_per_sec=1.0, tflops_per_sec=0.1, mfu=0.0104))
    assert "samples/sec: 1285.1; batches/sec: 1.0;" in line and "TFLOP/s: 0.10; MFU: 0.010;" in line
