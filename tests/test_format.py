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
