"""A Ray Train job (``TorchTrainer``, 2 CPU workers, a local cluster) watched as a ``torchrun`` job is: the
relative run directory lands on the run's storage with both ranks, the driver finds it, and ``trainperf
report`` names the rank whose loader is slow and ``data``; the controller's callback logs the same rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ray.train", reason="ray is not installed (pip install 'trainperf[ray]')")
pytest.importorskip("torch")

pytestmark = [pytest.mark.realtime, pytest.mark.integration]

HERE = os.path.dirname(__file__)


def test_a_ray_train_job_gives_a_run_directory_whose_report_names_the_slow_rank(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(HERE, "..", "src"), HERE]),
           "RAY_DEDUP_LOGS": "0"}
    done = subprocess.run([sys.executable, os.path.join(HERE, "_ray_job.py"), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    run_dir = result["run_dir"]
    assert run_dir == os.path.join(result["path"], "trainperf")
    assert sorted(os.listdir(run_dir)) == ["rank-0", "rank-1"]
    from trainperf import build_report

    report = build_report(run_dir)
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    top = report["stragglers"][0]
    assert (top["rank"], top["cause"]) == (1, "data"), report["stragglers"]
    assert top["windows"] >= 0.95 * report["analysed_windows"], (top["windows"], report["analysed_windows"])
    output = done.stdout + done.stderr
    lines = [line for line in output.splitlines() if "cluster at report" in line]
    assert len(lines) >= 3 and all("straggler rank 1 (data" in line for line in lines), lines
