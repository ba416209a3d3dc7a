from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

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


def test_the_listeners_fast_build_of_a_record_equals_the_dataclasses_own():
    from dataclasses import fields

    from trainperf.records._record import build_record

    values = {f.name: None for f in fields(PerformanceRecord) if f.name not in ("gc", "extra", "host", "pid")}
    values.update(iteration=7, window_iterations=10, window_s=0.5, warmup=False, timestamp=1.5, batches=10,
                  optimizer_steps=10, skipped_steps=0, etl_ms=1.25, verdict=Verdict("fine", 0.0, "ok"))
    built = build_record(**values)
    assert built == PerformanceRecord(**values)
    assert built.extra == {} and built.extra is not build_record(**values).extra  # a new dict each time
    assert built.gc == () and built.host == "" and built.pid == 0
    with pytest.raises(FrozenInstanceError):
        built.iteration = 8  # type: ignore[misc]
    with pytest.raises(TypeError, match="'speed'"):
        build_record(**values, speed=1.0)
    with pytest.raises(TypeError, match="'window_s'"):
        build_record(**{k: v for k, v in values.items() if k != "window_s"})
