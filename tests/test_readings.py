"""The host's readings of a window, with plain numbers and Python's own collector."""

from __future__ import annotations

import gc

import pytest

from trainperf.core._readings import HostReadings
from trainperf.records._window import window_figures


def readings(**kw) -> HostReadings:
    kw.setdefault("report_gc", False)
    kw.setdefault("report_hardware", False)
    return HostReadings(lambda: 0.0, skip_gc=lambda: False, **kw)


def test_cpu_load_counts_every_loader_worker_and_the_steps_compute_share():
    r = readings()
    figures = window_figures(0.0, [(0.010, 0.004, None, 8, 1, 0.0, 1, 0)])  # 6 of 10 ms computing
    assert r.cpu_load({"cpu_pct": 90.0}, figures) is None  # no workers' reading
    r.set_loader_workers(lambda: {11, 12, 13})
    r.set_step_threads(2)
    load = r.cpu_load({"cpu_pct": 90.0, "workers_cpu_pct": 40.0}, figures)
    assert (load.process_pct, load.workers_pct, load.cores, load.step_threads) == (90.0, 120.0, r.cores, 2)
    assert load.compute_pct == pytest.approx(60.0)
    with pytest.raises(TypeError, match="threads"):
        r.set_step_threads(0.5)
    with pytest.raises(ValueError, match="threads"):
        r.set_step_threads(0)
    r.set_step_threads(1)
    assert r.step_threads == 1
    r.set_step_threads(None)  # not known
    assert r.step_threads is None


def test_cpu_load_without_known_workers_counts_the_reading_once_and_an_empty_window_has_no_compute_share():
    r = readings()
    figures = window_figures(0.0, [(0.010, 0.004, None, 8, 1, 0.0, 1, 0)])
    assert r.cpu_load({"cpu_pct": 90.0, "workers_cpu_pct": 40.0}, figures).workers_pct == 40.0
    empty = window_figures(0.0, [(0.0, 0.0, None, 8, 1, 0.0, 1, 0)])
    assert empty.window_s == 0.0
    assert r.cpu_load({"cpu_pct": 90.0, "workers_cpu_pct": 40.0}, empty).compute_pct is None


def test_the_process_probe_is_read_when_hardware_is_reported():
    pytest.importorskip("psutil")
    assert readings().probes == []
    probes = readings(report_hardware=True).probes
    assert len(probes) == 1 and callable(probes[0])


def test_probes_are_read_together_and_a_failing_one_is_said_once():
    r = readings()
    assert r.read_hardware(print) == {}
    said: list[str] = []

    def broken():
        raise OSError("gone")

    r.add_probe(lambda: {"cpu_pct": 50.0})
    r.add_probe(broken)
    assert r.read_hardware(said.append) == {"cpu_pct": 50.0}
    assert len(said) == 1 and "gone" in said[0]


def test_python_collections_are_timed_until_closed_or_dropped():
    before = len(gc.callbacks)
    r = readings(report_gc=True)
    assert len(gc.callbacks) == before + 1 and r.pauses == []
    gc.collect()
    assert [generation for _, _, generation in r.take_pauses()] == [2]
    r.close()
    r.close()
    assert len(gc.callbacks) == before
    dropped = readings(report_gc=True)
    assert len(gc.callbacks) == before + 1
    del dropped
    gc.collect()
    assert len(gc.callbacks) == before
    assert readings().pauses is None and readings().take_pauses() == ()
