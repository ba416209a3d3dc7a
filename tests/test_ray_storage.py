"""In a Ray Train worker a relative ``run_dir`` is the run's folder on Ray Train's storage, not the worker's
working directory (Ray runs each worker in a per-node session folder). Tested with a stand-in for
``ray.train``'s context, as a worker sees it; outside a worker, or with cloud storage, it stays relative."""

from __future__ import annotations

import os
import sys
from types import ModuleType, SimpleNamespace

import pytest

from trainperf import PerformanceListener
from trainperf.base import ray_train_run_folder


def fake_ray_train(monkeypatch, folder, fs_type="local", fails=False):
    train = ModuleType("ray.train")

    def get_context():
        if fails:
            raise RuntimeError("`get_context` can only be called inside a Ray Train worker")
        storage = SimpleNamespace(storage_filesystem=SimpleNamespace(type_name=fs_type),
                                  experiment_fs_path=str(folder))
        return SimpleNamespace(get_storage=lambda: storage)

    train.get_context = get_context  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray.train", train)


def test_a_relative_run_dir_lands_on_the_runs_storage(tmp_path, monkeypatch, clock):
    monkeypatch.chdir(tmp_path)
    fake_ray_train(monkeypatch, tmp_path / "storage" / "run1")
    assert ray_train_run_folder() == str(tmp_path / "storage" / "run1")
    listener = PerformanceListener(1, sinks=[], clock=clock, run_dir="perf")
    clock.advance(0.01)
    listener.record_iteration(8)
    listener.close()
    assert (tmp_path / "storage" / "run1" / "perf" / "rank-0" / "windows.jsonl").is_file()
    assert not (tmp_path / "perf").exists()


@pytest.mark.parametrize("fs_type, fails", [("s3", False), ("local", True)])
def test_cloud_storage_or_no_worker_keeps_the_working_directory(tmp_path, monkeypatch, clock, fs_type, fails):
    monkeypatch.chdir(tmp_path)
    fake_ray_train(monkeypatch, tmp_path / "storage", fs_type=fs_type, fails=fails)
    assert ray_train_run_folder() is None
    listener = PerformanceListener(1, sinks=[], clock=clock, run_dir="perf")
    clock.advance(0.01)
    listener.record_iteration(8)
    listener.close()
    assert (tmp_path / "perf" / "rank-0" / "windows.jsonl").is_file()


def test_an_absolute_run_dir_is_kept_and_ray_is_never_imported(tmp_path, monkeypatch, clock):
    fake_ray_train(monkeypatch, tmp_path / "storage")
    listener = PerformanceListener(1, sinks=[], clock=clock, run_dir=tmp_path / "abs")
    listener.close()
    assert (tmp_path / "abs" / "rank-0").is_dir()
    monkeypatch.delitem(sys.modules, "ray.train")
    assert ray_train_run_folder() is None and "ray.train" not in sys.modules
    assert os.path.isabs(str(tmp_path / "abs"))


def test_time_in_ray_trains_report_hides_no_straggler():
    """A window in which both ranks waited 261 ms in Ray Train's report barrier (measured in a Ray job):
    rank 1's 25 ms of extra data wait is under a margin taken on a 297 ms iteration, named once the
    barrier is left out."""
    from trainperf.ranks import find_stragglers, rank_figures

    def window(etl, compute, other, iteration, barrier=None):
        values = {"window_iterations": 5, "etl_ms": etl, "compute_ms": compute, "other_ms": other,
                  "iteration_ms": iteration}
        if barrier is not None:
            values["extra"] = {"report_ms": barrier}
        return values

    plain = [rank_figures(0, window(5.8, 30.1, 261.4, 297.3)), rank_figures(1, window(31.4, 4.2, 262.1, 297.7))]
    assert find_stragglers(plain) == []
    spanned = [rank_figures(0, window(5.8, 30.1, 261.4, 297.3, 261.0)),
               rank_figures(1, window(31.4, 4.2, 262.1, 297.7, 261.8))]
    assert spanned[0].iteration_ms == pytest.approx(36.3) and spanned[1].other_ms == pytest.approx(0.3)
    assert [(s.rank, s.cause) for s in find_stragglers(spanned)] == [(1, "data")]
    odd = rank_figures(0, window(5.0, 30.0, 1.0, 36.0, 50.0))  # never more than the other host time
    assert odd.other_ms == 0.0 and odd.iteration_ms == pytest.approx(35.0)


def test_the_report_leaves_time_in_ray_trains_report_out_of_the_straggler_analysis(tmp_path):
    """The same from a run directory: every fourth window holds a report barrier (both ranks about 261 ms
    an iteration, rank 0 leaving it 25 ms later than rank 1 in some), and ``trainperf report`` names rank
    1's data in every window, the barrier's ones too; its figures stay the stopwatch's (barrier included)."""
    from trainperf import PerformanceRecord, RunDirSink, build_report

    for rank in range(2):
        with RunDirSink(tmp_path, rank=rank) as sink:
            for k in range(1, 17):
                barrier = (261.0 + (25.0 if rank == 0 and k % 8 == 5 else 0.0)) if k % 4 == 1 and k > 1 else 0.0
                etl, compute = (31.0, 4.0) if rank == 1 else (6.0, 29.0)
                extra = {"report_ms": barrier} if barrier else {}
                sink(PerformanceRecord(iteration=5 * k, window_iterations=5, window_s=0.18, warmup=k == 1,
                                       timestamp=1.7e9 + 0.2 * k, etl_ms=etl, compute_ms=compute,
                                       other_ms=0.2 + barrier, iteration_ms=35.2 + barrier, extra=extra, rank=rank))
    report = build_report(tmp_path)
    top = report["stragglers"][0]
    assert (top["rank"], top["cause"], top["windows"]) == (1, "data", 15) and report["analysed_windows"] == 15
    assert report["ranks"][0]["other_ms"] > 50.0  # the figures themselves keep the barrier: it was waited
