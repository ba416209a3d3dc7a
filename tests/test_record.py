from __future__ import annotations

from trainperf import GCStat, PerformanceRecord, Verdict


def sample_record():
    return PerformanceRecord(
        iteration=10,
        window_iterations=10,
        window_s=0.5,
        warmup=False,
        timestamp=1.0,
        etl_ms=1.5,
        samples_per_sec=640.0,
        gc=(GCStat("gen0", 3, 0.4), GCStat("cuda_alloc_retries", 1, None)),
        verdict=Verdict("fine", 3.0, "ok"),
    )


def test_flat_dict_has_parser_columns():
    flat = sample_record().to_dict(flat=True)
    assert flat["gc.gen0.count"] == 3 and flat["gc.gen0.ms"] == 0.4
    assert flat["gc.cuda_alloc_retries.ms"] is None
    assert flat["verdict"] == "fine" and flat["verdict_pct"] == 3.0
    assert flat["etl_ms"] == 1.5


def test_nested_dict_round_trips():
    rec = sample_record()
    assert PerformanceRecord.from_dict(rec.to_dict()) == rec


def test_gc_ms_sums_known_pauses():
    assert sample_record().gc_ms == 0.4
