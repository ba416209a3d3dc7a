"""Ray Train's controller side with Ray's own ``UserCallback`` (no cluster): each report round compared
as rank 0's link compares the ranks under ``torchrun``, and a failed worker named silent in the run
directory, so that ``trainperf report`` says so. The whole run is in tests/test_ray_train.py."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from _simulate import simulate
from trainperf import build_report
from trainperf.ranks import name_silent

pytest.importorskip("ray.train", reason="ray is not installed (pip install 'trainperf[ray]')")

import ray.exceptions  # noqa: E402 - after the skip
from ray.train.v2._internal.exceptions import WorkerHealthCheckFailedError  # noqa: E402

from trainperf.ranks import mean_figures  # noqa: E402
from trainperf.ray import PerformanceCallback  # noqa: E402


class NodeDied(ray.exceptions.NodeDiedError):
    def __init__(self, message):
        super().__init__(message)
        self.message = message

    def __str__(self):
        return self.message


def run_context(folder, fs_type="local"):
    storage = SimpleNamespace(storage_filesystem=SimpleNamespace(type_name=fs_type), experiment_fs_path=str(folder))
    return SimpleNamespace(run_config=SimpleNamespace(storage_context=storage))


def ranks_metrics(listeners, since):
    return [{"loss": 1.0, "trainperf": {"rank": r, "figures": mean_figures(
        [rec for rec in lst.history if since < rec.iteration <= since + 40])}} for r, lst in enumerate(listeners)]


def test_each_round_names_the_rank_whose_data_is_late(tmp_path, caplog):
    listeners = simulate(tmp_path / "run", ranks=3, iterations=120, etl_ms=lambda r, i: 27.0 if r == 2 else 2.0)
    callback = PerformanceCallback()
    for k in range(3):
        callback.after_report(run_context(tmp_path), ranks_metrics(listeners, 40 * k), None)
    assert callback.rounds == 3 and len(callback.lines) == 3
    assert all(line.startswith(f"cluster at report {k + 1}: ") and "straggler rank 2 (data, +25" in line
               for k, line in enumerate(callback.lines)), callback.lines
    assert [r.getMessage() for r in caplog.records if "cluster at report" in r.getMessage()] == callback.lines


def test_a_round_with_fewer_than_two_ranks_figures_says_nothing(tmp_path):
    listeners = simulate(tmp_path / "run", ranks=2, iterations=40)
    metrics = ranks_metrics(listeners, 0)
    callback = PerformanceCallback()
    callback.after_report(run_context(tmp_path), [metrics[0], {"loss": 2.0}], None)  # rank 1 without report()
    callback.after_report(run_context(tmp_path), [metrics[0], {"trainperf": {"rank": 1, "figures": None}}], None)
    callback.after_report(run_context(tmp_path), ["not a dict", metrics[1]], None)
    assert callback.rounds == 3 and callback.lines == []


def test_a_failed_worker_is_named_silent_in_the_run_directory(tmp_path, caplog):
    run_dir = tmp_path / "job" / "trainperf"
    simulate(run_dir, ranks=2, iterations=80, killed={0: 80, 1: 70})  # the whole group torn down
    assert build_report(run_dir)["silent"] == []  # the files alone cannot tell who failed
    callback = PerformanceCallback()
    error = WorkerHealthCheckFailedError("A worker health check failed.", ray.exceptions.ActorDiedError())
    news = RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer.")
    callback.after_exception(run_context(tmp_path / "job"), {0: news, 1: error})
    callback.after_exception(run_context(tmp_path / "job"), {1: error})  # a later poll: said once
    lines = [json.loads(line) for line in (run_dir / "rank-0" / "events.jsonl").read_text().splitlines()]
    silent = [e for e in lines if e["kind"] == "silent"]
    assert len(silent) == 1 and silent[0]["rank"] == 1
    assert silent[0]["why"] == "its worker failed: WorkerHealthCheckFailedError: A worker health check failed."
    assert silent[0]["last_seen"] == pytest.approx(os.stat(run_dir / "rank-1" / "windows.jsonl").st_mtime)
    report = build_report(run_dir)
    assert [s["rank"] for s in report["silent"]] == [1]
    assert callback.failed == {0, 1}
    assert callback.lines == [
        "rank 0 its worker failed: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error: Connection reset by "
        "peer.",
        "rank 1 its worker failed: WorkerHealthCheckFailedError: A worker health check failed. "
        f"(named silent in {run_dir})"]
    assert all(line in [r.getMessage() for r in caplog.records] for line in callback.lines)


@pytest.mark.parametrize("fs_type, make", [("s3", True), ("local", False)])
def test_a_failed_worker_is_only_logged_where_the_run_directory_cannot_be_reached(tmp_path, fs_type, make):
    if make:
        simulate(tmp_path / "job" / "trainperf", ranks=2, iterations=20)
    callback = PerformanceCallback()
    callback.after_exception(run_context(tmp_path / "job", fs_type), {0: ray.exceptions.ActorDiedError()})
    assert len(callback.lines) == 1 and callback.lines[0].startswith("rank 0 its worker failed: ActorDiedError")
    assert "named silent" not in callback.lines[0]
    assert not (tmp_path / "job" / "trainperf" / "rank-0" / "events.jsonl").exists()


def test_an_absolute_run_dir_is_used_as_given(tmp_path):
    simulate(tmp_path / "elsewhere", ranks=2, iterations=20)
    callback = PerformanceCallback(run_dir=tmp_path / "elsewhere")
    callback.after_exception(SimpleNamespace(), {1: ray.exceptions.NodeDiedError("gone")})  # no storage known
    assert build_report(tmp_path / "elsewhere")["silent"][0]["rank"] == 1


@pytest.mark.parametrize("run_dir", ["", 3, None])
def test_a_bad_run_dir_is_named(run_dir):
    with pytest.raises(TypeError, match="run_dir must be a non-empty path"):
        PerformanceCallback(run_dir=run_dir)


def test_name_silent_checks_its_arguments_and_needs_rank_0s_folder(tmp_path):
    with pytest.raises(ValueError, match="rank must be"):
        name_silent(tmp_path, -1, "x")
    with pytest.raises(ValueError, match="rank must be"):
        name_silent(tmp_path, True, "x")
    with pytest.raises(TypeError, match="why must be"):
        name_silent(tmp_path, 1, None)
    assert name_silent(tmp_path, 1, "x") is False
    (tmp_path / "rank-0").mkdir()
    assert name_silent(tmp_path, 1, "x", now=5.0) is True
    event = json.loads((tmp_path / "rank-0" / "events.jsonl").read_text())
    assert event == {"kind": "silent", "rank": 1, "last_seen": None, "why": "x", "t": 5.0}


def test_name_silent_says_so_when_the_disk_refuses(tmp_path):
    (tmp_path / "rank-0" / "events.jsonl").mkdir(parents=True)  # a folder where the file should be
    assert name_silent(tmp_path, 1, "x") is False


def test_two_ranks_are_compared_by_the_rank_they_report_not_their_place(tmp_path):
    listeners = simulate(tmp_path / "run", ranks=2, iterations=40, etl_ms=lambda r, i: 27.0 if r == 0 else 2.0)
    callback = PerformanceCallback()
    callback.after_report(run_context(tmp_path), list(reversed(ranks_metrics(listeners, 0))), None)
    assert len(callback.lines) == 1 and "straggler rank 0 (data" in callback.lines[0], callback.lines


def test_a_worker_without_figures_between_two_with_them_is_passed_over(tmp_path):
    listeners = simulate(tmp_path / "run", ranks=3, iterations=40, etl_ms=lambda r, i: 27.0 if r == 2 else 2.0)
    metrics = ranks_metrics(listeners, 0)
    callback = PerformanceCallback()
    callback.after_report(run_context(tmp_path), [metrics[0], {"loss": 1.0}, metrics[2]], None)
    assert len(callback.lines) == 1 and "2 ranks" in callback.lines[0] and "straggler rank 2 (data" in callback.lines[0]


def test_a_long_error_message_is_cut_and_odd_storage_is_not_written(tmp_path):
    simulate(tmp_path / "job" / "trainperf", ranks=2, iterations=20)
    callback = PerformanceCallback()
    long = "x" * 300
    callback.after_exception(run_context(tmp_path / "job", "gcs"), {1: NodeDied(long)})
    odd = SimpleNamespace(run_config=SimpleNamespace(storage_context=SimpleNamespace(
        storage_filesystem=SimpleNamespace(type_name="local"), experiment_fs_path=123)))
    callback.after_exception(odd, {0: NodeDied(long)})  # a path of the wrong type
    assert not (tmp_path / "job" / "trainperf" / "rank-0" / "events.jsonl").exists()
    assert len(callback.lines) == 2 and all("named silent" not in line for line in callback.lines)
    simulate(tmp_path / "local" / "trainperf", ranks=2, iterations=20)
    PerformanceCallback().after_exception(run_context(tmp_path / "local"), {1: NodeDied("y" * 300)})
    event = json.loads((tmp_path / "local" / "trainperf" / "rank-0" / "events.jsonl").read_text())
    assert event["why"] == "its worker failed: NodeDied: " + "y" * 200


def test_a_later_poll_names_the_ranks_not_said_before(tmp_path):
    simulate(tmp_path / "job" / "trainperf", ranks=3, iterations=20)
    callback = PerformanceCallback()
    callback.after_exception(run_context(tmp_path / "job"), {0: RuntimeError("peer gone")})
    callback.after_exception(run_context(tmp_path / "job"), {0: RuntimeError("peer gone"), 2: NodeDied("node lost")})
    assert [line.split(" its ")[0] for line in callback.lines] == ["rank 0", "rank 2"]
    assert [s["rank"] for s in build_report(tmp_path / "job" / "trainperf")["silent"]] == [2]
