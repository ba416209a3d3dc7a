"""The record builder with plain numbers: a window's host side (and device side) in, a record out."""

from __future__ import annotations

import math

import pytest

from trainperf.core._build import build_window_record, read_score
from trainperf.core._options import ListenerOptions
from trainperf.core._pending import HostWindow
from trainperf.records._record import GCStat
from trainperf.records._timeline import device_window
from trainperf.records._window import window_figures


def host(**kw) -> HostWindow:
    # four iterations of 10 ms from t=0, 2 ms of data wait each (given), 8 samples each
    entries = [(0.010 * k, 0.002, None, 8, 1, 0.0, 1, 0) for k in (1, 2, 3, 4)]
    base = dict(first_iteration=5, iteration=8, figures=window_figures(0.0, entries), warmup=False,
                timestamp=1234.5, gc=(GCStat("gen0", 2, 1.5),), gc_s=0.0, score=0.25, epoch=1, rank=3, device=None,
                overhead_s=0.0001, etl_source="given", hardware={"cpu_pct": 80.0}, times={"forward_ms": 3.0})
    return HostWindow(**{**base, **kw})


OPTIONS = ListenerOptions(report_score=True, report_gc=True)


def test_a_host_window_becomes_its_record():
    built = build_window_record(host(), None, OPTIONS, host_name="node", pid=7)
    r = built.record
    assert (r.first_iteration, r.iteration, r.window_iterations, r.warmup, r.timestamp) == (5, 8, 4, False, 1234.5)
    assert r.window_s == pytest.approx(0.040)
    assert r.etl_ms == pytest.approx(2.0) and r.etl_max_ms == pytest.approx(2.0)
    assert r.etl_total_ms == pytest.approx(8.0)
    assert r.compute_ms == pytest.approx(8.0) and r.other_ms == 0.0
    assert r.iteration_ms == pytest.approx(10.0) and r.iteration_p50_ms == pytest.approx(10.0)
    assert r.samples == 32 and r.samples_per_sec == pytest.approx(800.0) and r.batches_per_sec == pytest.approx(100.0)
    assert (r.score, r.epoch, r.rank, r.host, r.pid, r.device) == (0.25, 1, 3, "node", 7, None)
    assert r.gc_total_ms == 0.0 and r.overhead_ms == pytest.approx(0.1) and r.cpu_pct == 80.0
    assert r.extra == {"forward_ms": 3.0} and r.etl_source == "given"
    assert r.verdict is not None and r.verdict.kind == "input-bound" and r.verdict.share == 20.0
    assert r.speedup_if_data_free == pytest.approx(1.25) and r.speedup_if_gc_free == 1.0
    assert (built.data_free_s, built.gc_free_s) == (pytest.approx(0.008), 0.0)


def test_switched_off_figures_are_none():
    options = ListenerOptions(verdict=False, report_etl=False, report_time=False, report_score=False,
                              report_iteration=False, report_sample=False, report_batch=False)
    r = build_window_record(host(), None, options).record
    assert (r.etl_ms, r.etl_max_ms, r.iteration_ms, r.iteration_p50_ms, r.iteration_p95_ms, r.iteration_max_ms) == (
        None, None, None, None, None, None)
    assert (r.samples_per_sec, r.batches_per_sec, r.score, r.gc_total_ms, r.verdict) == (None,) * 5
    assert r.etl_total_ms == pytest.approx(8.0)  # the totals stay: the summary reads them


def test_on_a_device_times_and_idle_come_from_its_clock():
    # the device: 12 ms per iteration, 3 ms idle before each forward (the host waited 2 ms for data)
    device = device_window([(0.003 + 0.012 * k, 0.012 * (k + 1)) for k in range(4)])
    built = build_window_record(host(), device, OPTIONS)
    r = built.record
    assert r.iteration_ms == pytest.approx(12.0) and r.iteration_max_ms == pytest.approx(12.0)
    assert r.device_idle_ms == pytest.approx(3.0) and r.device_idle_max_ms == pytest.approx(3.0)
    assert built.data_free_s == pytest.approx(0.008)  # per iteration the smaller of 3 ms idle and 2 ms of data
    assert r.speedup_if_data_free == pytest.approx(0.048 / 0.040)
    assert r.verdict is not None and r.verdict.kind == "fine"  # 16.7% of the device's time: under the 20% line


def test_the_previous_verdict_holds_a_share_down_to_its_hysteresis():
    entries = [(0.010 * k, 0.0018, None, 8, 1, 0.0, 1, 0) for k in (1, 2, 3, 4)]  # 18% data wait
    h = host(figures=window_figures(0.0, entries))
    assert build_window_record(h, None, OPTIONS).record.verdict.kind == "fine"  # type: ignore[union-attr]
    held = build_window_record(h, None, OPTIONS, previous="input-bound").record
    assert held.verdict is not None and held.verdict.kind == "input-bound"


def test_a_score_that_cannot_be_read_is_none():
    class Broken:
        def __float__(self):
            raise RuntimeError("device lost")

    assert read_score(None) is None and read_score(Broken()) is None and read_score("x") is None
    assert read_score(2) == 2.0 and math.isnan(read_score(float("nan")))  # type: ignore[arg-type]


def uneven(**kw) -> HostWindow:
    # three iterations from t=0 ending at 10, 30 and 60 ms: each waited 1, 2 and 4 ms for data (given)
    # and did 0.5, 1 and 2 ms of other host work; a 3 ms collection fell in the third step
    entries = [(0.010, 0.001, None, 8, 1, 0.0005, 1, 0), (0.030, 0.002, None, 8, 1, 0.001, 1, 0),
               (0.060, 0.004, None, 8, 1, 0.002, 1, 0)]
    figures = window_figures(0.0, entries, pauses=[(0.050, 0.003, 0)])
    return host(figures=figures, gc_s=figures.gc_s, **kw)


def test_uneven_iterations_give_their_own_percentiles_and_means():
    r = build_window_record(uneven(), None, OPTIONS).record
    assert r.iteration_ms == pytest.approx(20.0)
    assert (r.iteration_p50_ms, r.iteration_p95_ms, r.iteration_max_ms) == pytest.approx((20.0, 29.0, 30.0))
    assert r.etl_ms == pytest.approx(7.0 / 3.0) and r.etl_max_ms == pytest.approx(4.0)
    assert r.other_ms == pytest.approx(3.5 / 3.0) and r.gc_total_ms == pytest.approx(3.0)
    assert r.compute_ms == pytest.approx((60.0 - 7.0 - 3.5 - 3.0) / 3.0)
    assert r.speedup_if_gc_free == pytest.approx(60.0 / 57.0)


def test_on_a_device_gc_counts_only_as_far_as_the_device_sat_idle_for_it():
    # the device idled 5 ms before each forward: 1, 2 and 4 ms of it was data wait, the rest GC's at most
    device = device_window([(0.005, 0.010), (0.015, 0.030), (0.035, 0.060)])
    built = build_window_record(uneven(), device, OPTIONS)
    assert built.data_free_s == pytest.approx(0.007)
    assert built.gc_free_s == pytest.approx(0.003)  # min(3 ms of GC, 15 - 7 ms of idle left)
    small_idle = device_window([(0.001, 0.010), (0.012, 0.030), (0.034, 0.060)])  # 1, 2, 4 ms idle: all data
    assert build_window_record(uneven(), small_idle, OPTIONS).gc_free_s == pytest.approx(0.0, abs=1e-12)


def test_the_builders_values_are_frozen_and_its_options_keyword_only():
    import dataclasses

    built = build_window_record(host(), None, OPTIONS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.data_free_s = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        OPTIONS.verdict = False  # type: ignore[misc]
    assert not hasattr(built, "__dict__") and not hasattr(OPTIONS, "__dict__")
    r = built.record
    assert (r.host, r.pid) == ("", 0)  # no process named
    with pytest.raises(TypeError):
        build_window_record(host(), None, OPTIONS, "input-bound")  # type: ignore[misc]


def test_the_record_is_built_by_position_in_the_schemas_order_each_value_named_after_its_field():
    import dataclasses
    import inspect
    import re

    from trainperf import PerformanceRecord
    from trainperf.core import _build
    from trainperf.records._record import build_record

    schema = [f.name for f in dataclasses.fields(PerformanceRecord)]
    assert list(inspect.signature(build_record).parameters) == schema
    source = inspect.getsource(_build.build_window_record)
    call = source[source.index("record = build_record(\n"):]
    call = call[:call.index("\n    )\n")]
    named = re.findall(r",  # (\w+)$", call, flags=re.MULTILINE)
    assert named == schema  # every field, once, in order
    assert len(call.splitlines()) == len(schema) + 1  # one value per line, nothing unnamed


def test_every_hardware_field_a_probe_gave_reaches_the_record_by_its_own_name():
    from trainperf.core._hardware import HARDWARE_FIELDS

    readings = {name: float(k + 1) for k, name in enumerate(HARDWARE_FIELDS)}
    r = build_window_record(host(hardware=readings), None, OPTIONS).record
    assert {name: getattr(r, name) for name in HARDWARE_FIELDS} == readings
    assert all(getattr(build_window_record(host(hardware={}), None, OPTIONS).record, name) is None
               for name in HARDWARE_FIELDS)
