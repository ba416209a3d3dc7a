"""The worker's side of Ray Train with ``ray.train.report`` and ``get_context`` stood in for (no cluster):
what :func:`trainperf.ray.report` adds to the user's metrics, the time it waits counted as the span
``report``, :func:`hand_back` handing rank 0's run directory over as the last checkpoint where the storage
cannot hold it, and :func:`run_dir_of` finding it on the driver, on a local or another file system."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

pytest.importorskip("ray.train", reason="ray is not installed (pip install 'trainperf[ray]')")

import pyarrow.fs  # noqa: E402 - after the skip
import ray.train  # noqa: E402

from trainperf import PerformanceListener  # noqa: E402
from trainperf.ranks import mean_figures  # noqa: E402
from trainperf.ray import hand_back, report, run_dir_of  # noqa: E402


@pytest.fixture
def reports(monkeypatch, clock):
    calls = []

    def fake_report(metrics, checkpoint=None, **options):
        clock.advance(0.250)  # the barrier: every rank waits here
        calls.append((metrics, checkpoint, options))

    monkeypatch.setattr(ray.train, "report", fake_report)
    return calls


def in_worker(monkeypatch, rank=0, storage=None):
    def get_context():  # storage None: cloud storage, no folder a worker can write
        fs = SimpleNamespace(storage_filesystem=SimpleNamespace(type_name="local" if storage else "s3"),
                             experiment_fs_path=str(storage))
        return SimpleNamespace(get_world_rank=lambda: rank, get_storage=lambda: fs)

    monkeypatch.setattr(ray.train, "get_context", get_context)


def train(listener, clock, n, etl=0.002, step=0.010):
    for _ in range(n):
        clock.advance(etl + step)
        listener.record_iteration(8, etl=etl)


def test_report_adds_the_newest_record_and_the_figures_since_the_last_report(clock, reports, monkeypatch):
    in_worker(monkeypatch, rank=3)
    listener = PerformanceListener(5, sinks=[], clock=clock, verdict=False)
    train(listener, clock, 5, etl=0.001)
    train(listener, clock, 5)
    report({"loss": 0.5, "step": 10}, listener=listener)
    metrics, checkpoint, options = reports[0]
    assert checkpoint is None and options == {}
    assert metrics["loss"] == 0.5 and metrics["step"] == 10
    assert metrics["trainperf/iteration_ms"] == pytest.approx(12.0)  # the newest record's
    assert metrics["trainperf/etl_ms"] == pytest.approx(2.0)
    assert metrics["trainperf"] == {"rank": 3, "figures": mean_figures(listener.history)}  # the rank from Ray
    train(listener, clock, 5, etl=0.020)
    report(None, listener=listener, checkpoint="ckpt", checkpoint_dir_name="x")
    metrics, checkpoint, options = reports[1]
    assert checkpoint == "ckpt" and options == {"checkpoint_dir_name": "x"}
    assert metrics["trainperf"]["figures"] == mean_figures(listener.history[2:])  # only the window since
    assert metrics["trainperf"]["figures"]["etl_ms"] == pytest.approx(20.0)
    report({}, listener=listener)  # nothing new: no figures
    assert reports[2][0] == {"trainperf": {"rank": 3, "figures": None}}
    train(listener, clock, 5)
    listener.close()
    # the 250 ms in the first and second report calls fell in windows 3 and 4: their report span
    assert [r.extra.get("report_ms") for r in listener.history] == [None, None, pytest.approx(50.0),
                                                                    pytest.approx(100.0)]


def test_reports_rank_is_the_listeners_when_known(clock, reports, monkeypatch):
    in_worker(monkeypatch, rank=1)
    listener = PerformanceListener(5, sinks=[], clock=clock, rank=0)
    report({}, listener=listener)
    assert reports[0][0]["trainperf"]["rank"] == 0
    listener.close()


@pytest.mark.parametrize("metrics, listener, error", [
    ({}, "not a listener", "listener must be a PerformanceListener"),
    ([("loss", 1.0)], None, "metrics must be a mapping or None"),
])
def test_reports_bad_arguments_are_named(clock, reports, metrics, listener, error):
    real = PerformanceListener(5, sinks=[], clock=clock)
    with pytest.raises(TypeError, match=error):
        report(metrics, listener=real if listener is None else listener)
    with pytest.raises(TypeError, match="listener must be"):
        hand_back(listener="nope")
    assert reports == []
    real.close()


def test_hand_back_reports_rank_0s_run_directory_as_the_checkpoint_where_storage_cannot_hold_it(
        tmp_path, clock, reports, monkeypatch):
    in_worker(monkeypatch, rank=0, storage=None)
    monkeypatch.chdir(tmp_path)
    listener = PerformanceListener(5, sinks=[], clock=clock, run_dir="perf", rank=0)
    train(listener, clock, 10)
    assert hand_back({"done": True}, listener=listener) == str(tmp_path / "perf")
    assert listener.closed
    metrics, checkpoint, options = reports[0]
    assert isinstance(checkpoint, ray.train.Checkpoint) and checkpoint.path == str(tmp_path / "perf")
    assert options == {"checkpoint_dir_name": "perf"} and metrics["done"] is True
    assert (tmp_path / "perf" / "rank-0" / "windows.jsonl").is_file()


def test_hand_back_on_other_ranks_and_on_shared_storage_hands_nothing_over(tmp_path, clock, reports, monkeypatch):
    in_worker(monkeypatch, rank=1, storage=None)
    monkeypatch.chdir(tmp_path)
    other = PerformanceListener(5, sinks=[], clock=clock, run_dir="perf", rank=1)
    assert hand_back(listener=other) is None
    assert reports[0][1] is None and reports[0][2] == {"checkpoint_dir_name": "perf"}  # the same round's name
    in_worker(monkeypatch, rank=0, storage=tmp_path / "storage" / "job")
    shared = PerformanceListener(5, sinks=[], clock=clock, run_dir="perf", rank=0)
    assert hand_back(listener=shared) is None
    assert reports[1][1] is None and reports[1][2] == {}
    assert (tmp_path / "storage" / "job" / "perf" / "rank-0").is_dir()
    plain = PerformanceListener(5, sinks=[], clock=clock)  # no run directory: only the report
    assert hand_back(listener=plain, checkpoint_dir_name="mine") is None
    assert reports[2][1] is None and reports[2][2] == {"checkpoint_dir_name": "mine"} and plain.closed


def test_run_dir_of_finds_the_folder_on_a_local_or_another_file_system(tmp_path, monkeypatch):
    (tmp_path / "job" / "trainperf" / "rank-0").mkdir(parents=True)
    (tmp_path / "job" / "trainperf" / "rank-0" / "windows.jsonl").write_text("{}\n")
    local = SimpleNamespace(filesystem=pyarrow.fs.LocalFileSystem(), path=str(tmp_path / "job"))
    assert run_dir_of(local) == str(tmp_path / "job" / "trainperf")
    with pytest.raises(FileNotFoundError, match="has no folder 'other'"):
        run_dir_of(local, "other")
    # a file system that is not the local one (as s3:// is): copied to the working directory first
    remote = SimpleNamespace(filesystem=pyarrow.fs.SubTreeFileSystem(str(tmp_path), pyarrow.fs.LocalFileSystem()),
                             path="job")
    work = tmp_path / "driver"
    work.mkdir()
    monkeypatch.chdir(work)
    assert run_dir_of(remote) == str(work / "trainperf")
    assert (work / "trainperf" / "rank-0" / "windows.jsonl").read_text() == "{}\n"
    with pytest.raises(FileNotFoundError, match="has no folder 'other'"):
        run_dir_of(remote, "other")
    assert os.listdir(work) == ["trainperf"]


def test_hand_back_hands_over_a_run_directory_outside_a_local_storage(tmp_path, clock, reports, monkeypatch):
    in_worker(monkeypatch, rank=0, storage=tmp_path / "storage" / "job")
    listener = PerformanceListener(5, sinks=[], clock=clock, run_dir=tmp_path / "elsewhere", rank=0)
    assert hand_back(listener=listener) == str(tmp_path / "elsewhere")
    assert reports[0][1].path == str(tmp_path / "elsewhere") and reports[0][2] == {"checkpoint_dir_name": "elsewhere"}


def test_a_report_after_the_very_first_iteration_carries_it(clock, reports, monkeypatch):
    in_worker(monkeypatch, rank=0)
    listener = PerformanceListener(1, sinks=[], clock=clock, verdict=False)
    train(listener, clock, 1)
    report({}, listener=listener)
    assert reports[0][0]["trainperf"]["figures"]["last"] == 1
    listener.close()


def test_run_dir_of_copies_from_any_file_system_not_the_local_one(tmp_path, monkeypatch):
    """``gcs`` and ``hdfs`` sort before ``local``: only the local file system's folder is used in place."""
    (tmp_path / "job" / "trainperf").mkdir(parents=True)
    subtree = pyarrow.fs.SubTreeFileSystem(str(tmp_path), pyarrow.fs.LocalFileSystem())

    class Gcs:
        type_name = "gcs"
        get_file_info = staticmethod(subtree.get_file_info)

    copied = []
    monkeypatch.setattr(pyarrow.fs, "copy_files", lambda source, target, source_filesystem: copied.append(
        (source, target, source_filesystem)))
    monkeypatch.chdir(tmp_path)
    result = SimpleNamespace(filesystem=Gcs(), path="job")
    assert run_dir_of(result) == str(tmp_path / "trainperf")
    assert copied == [("job/trainperf", str(tmp_path / "trainperf"), result.filesystem)]
