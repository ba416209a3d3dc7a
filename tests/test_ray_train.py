"""Ray Train jobs (``TorchTrainer``, 2 CPU workers, a local cluster) watched as a ``torchrun`` job is, from
tests/_ray_job.py: the relative run directory lands on the run's storage with both ranks, the driver finds
it, ``trainperf report`` names the rank whose loader is slow and ``data``, the controller's callback logs
the same rank, and the same loop under ``torchrun`` gives the same figures and straggler. A second job
reads a Ray Data shard and loses a worker: the data wait is the stopwatch's and Ray Data's own, the
driver hears of the death within seconds, and the report names the dead rank silent."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys

import pytest

pytest.importorskip("ray.train", reason="ray is not installed (pip install 'trainperf[ray]')")
pytest.importorskip("torch")

from trainperf import build_report  # noqa: E402 - after the skip

pytestmark = [pytest.mark.realtime, pytest.mark.integration]

HERE = os.path.dirname(__file__)
JOB = os.path.join(HERE, "_ray_job.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(HERE, "..", "src"), HERE]), "RAY_DEDUP_LOGS": "0"}


def run_job(*command, timeout=400):
    """Run a job to its end. When it runs out of time before any worker started (Ray's own start-up, in
    which no trainperf code runs, can take minutes on a machine whose cores are all busy), the test
    skips saying so; once a worker has started, running out of time is a failure."""
    out = command[-1]
    try:
        done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        if not any(name.startswith("started-rank") for name in os.listdir(out)):
            pytest.skip(f"the local Ray cluster started no worker in {timeout} s: this machine is too busy for Ray "
                        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        raise
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-4000:])
    return done


@pytest.fixture(scope="module")
def ray_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("ray")
    done = run_job(sys.executable, JOB, "ray", str(out))
    return json.loads((out / "result.json").read_text()), done.stdout + done.stderr


@pytest.fixture(scope="module")
def torchrun_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_job(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
            "--master-port", str(port), JOB, "torchrun", str(out), timeout=200)
    return out / "torchrun"


def test_a_ray_train_job_gives_a_run_directory_whose_report_names_the_slow_rank(ray_job):
    """On storage the workers cannot write as a folder (cloud storage): rank 0 hands the run directory over
    as the last report's checkpoint, and the driver gets a copy."""
    result, output = ray_job
    run_dir = result["run_dir"]
    assert result["path"] == "runs/job" and run_dir == os.path.join(result["out"], "trainperf")
    assert sorted(os.listdir(run_dir)) == ["rank-0", "rank-1"]
    on_storage = os.path.join(result["out"], "cloud", "runs", "job", "trainperf")
    assert sorted(os.listdir(on_storage)) == ["rank-0", "rank-1"]
    report = build_report(run_dir)
    assert [r["rank"] for r in report["ranks"]] == [0, 1] and report["silent"] == []
    top = report["stragglers"][0]
    assert (top["rank"], top["cause"]) == (1, "data"), report["stragglers"]
    assert top["windows"] >= 0.95 * report["analysed_windows"], (top["windows"], report["analysed_windows"])
    lines = [line for line in output.splitlines() if "cluster at report" in line]
    assert len(lines) >= 3 and all("straggler rank 1 (data" in line for line in lines), lines


def test_the_same_loop_under_torchrun_gives_the_same_figures_and_straggler(ray_job, torchrun_job):
    """Per rank: the data wait, the compute and the median iteration (Ray's report barrier, which the loop
    under torchrun does not call, falls in 3 of the 16 windows) within 15%, or 3 ms for a small figure
    (two separate runs on a shared machine: the compute of the rank that waits for data, 3-4 ms, read
    4.21 and 2.65 ms in two runs of the same job under torchrun here, and one pair in four missed 10% or
    2 ms); the same straggler, its excess within 15%. Typical pairs agree within 4%."""
    on_ray, under_torchrun = build_report(ray_job[0]["run_dir"]), build_report(torchrun_job)
    assert [r["rank"] for r in under_torchrun["ranks"]] == [0, 1]
    for a, b in zip(on_ray["ranks"], under_torchrun["ranks"], strict=True):
        for name, x, y in [("etl", a["etl_ms"]["mean"], b["etl_ms"]["mean"]),
                           ("compute", a["compute_ms"], b["compute_ms"]),
                           ("iteration p50", a["iteration_ms"]["p50"], b["iteration_ms"]["p50"])]:
            assert abs(x - y) <= max(0.15 * y, 3.0), (a["rank"], name, x, y)
    top_ray, top_torchrun = on_ray["stragglers"][0], under_torchrun["stragglers"][0]
    assert (top_torchrun["rank"], top_torchrun["cause"]) == (top_ray["rank"], top_ray["cause"]) == (1, "data")
    assert top_ray["excess_ms"] == pytest.approx(top_torchrun["excess_ms"], rel=0.15), (top_ray, top_torchrun)
    assert top_torchrun["windows"] >= 0.95 * under_torchrun["analysed_windows"]


def test_lightnings_callback_in_a_ray_train_worker_writes_the_run_directory_on_the_storage(tmp_path):
    """Lightning as Ray Train's guide sets it up (its own strategy and environment), trainperf's callback
    with a relative run_dir: the run directory is in the run's storage folder, and rank 1's 24 ms more
    data wait a step is named in its windows and in the cluster lines."""
    done = run_job(sys.executable, JOB, "lightning", str(tmp_path))
    run_dir = tmp_path / "storage" / "job" / "trainperf"
    assert sorted(os.listdir(run_dir)) == ["rank-0", "rank-1"]
    report = build_report(run_dir)
    top = report["stragglers"][0]
    assert (top["rank"], top["cause"]) == (1, "data") and top["windows"] == report["analysed_windows"] == 3, report
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "cluster at iteration" in line]
    assert lines and all("straggler rank 1 (data" in line for line in lines), lines


def test_ray_data_input_is_timed_and_a_dead_worker_is_named_silent_without_a_hang(tmp_path):
    done = run_job(sys.executable, JOB, "data", str(tmp_path))
    result = json.loads((tmp_path / "result.json").read_text())
    died = json.loads((tmp_path / "died.json").read_text())["wall"]
    assert result["error"] == "WorkerGroupError" and 1 in result["failed_ranks"], result
    assert result["heard"] - died < 30.0, result["heard"] - died  # torn down and told, never hung
    run_dir = tmp_path / "storage" / "job" / "trainperf"
    report = build_report(run_dir)
    assert [s["rank"] for s in report["silent"]] == [1], (report["silent"], done.stderr[-3000:])
    output = done.stdout + done.stderr
    assert "rank 1 its worker failed: WorkerHealthCheckFailedError" in output
    # rank 0's windows against the stopwatch around each next() in its loop, and Ray Data's own timer. Each
    # window's data wait is inside the stopwatch's; over the run it is all but trainperf's own work per batch
    # (under load, a window can lose a few ms a batch to the training thread being preempted around the
    # fetch, which the stopwatch counts); Ray's timer leaves out its iterator's own work.
    waits = json.loads((tmp_path / "waits-rank0.json").read_text())
    windows = [json.loads(line) for line in (run_dir / "rank-0" / "windows.jsonl").read_text().splitlines()]
    checked = []
    for w in windows:
        first, last = w["first_iteration"], w["iteration"]
        if w["warmup"] or last > len(waits):
            continue
        stopwatch = 1000.0 * statistics.mean(waits[first - 1:last])
        blocked = w["extra"].get("ray_data_blocked_ms", 0.0)
        assert w["etl_source"] == "loader" and w["etl_ms"] <= stopwatch * 1.02 + 0.05, (w, stopwatch)
        assert blocked <= w["etl_ms"] * 1.02 + 0.05, w
        checked.append((w["etl_ms"], stopwatch, blocked))
    assert len(checked) >= 4, windows
    ours, stopwatch, rays = (sum(column) for column in zip(*checked, strict=True))
    assert ours >= 0.95 * stopwatch - len(checked), checked
    assert rays >= 0.75 * ours, checked
    assert any(w["extra"].get("ray_data_production_wait_ms", 0.0) > 1.0 for w in windows)
