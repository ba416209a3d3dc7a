"""A 2-rank run (gloo, two processes) with the trackers' sinks: rank 0's W&B run holds its own figures and
the world's, naming the rank whose loader is slow; every rank's figures reach one MLflow run under its rank's
prefix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _ranks import free_port
from _wandb_file import read_run, run_file

pytest.importorskip("torch")
wandb = pytest.importorskip("wandb")
mlflow = pytest.importorskip("mlflow")

pytestmark = [pytest.mark.realtime, pytest.mark.integration]

HERE = os.path.dirname(__file__)


def test_rank_zero_logs_the_world_and_every_rank_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    client = mlflow.tracking.MlflowClient()
    run_id = client.create_run(client.get_experiment_by_name("Default").experiment_id).info.run_id
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(HERE, "..", "src"), HERE])}
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "_tracker_rank.py"), str(rank), str(port),
                               str(tmp_path), run_id], env=env) for rank in (0, 1)]
    assert [p.wait(timeout=150) for p in procs] == [0, 0]
    iterations = {rank: json.loads((tmp_path / f"rank{rank}.json").read_text())["iterations"] for rank in (0, 1)}
    assert iterations[0] == iterations[1] == list(range(5, 81, 5))

    found = read_run(run_file(tmp_path / "wandb0"))
    rows = found["history"]
    ours = [row["trainperf/iteration"] for row in rows if "trainperf/data_wait_pct" in row]
    assert ours == [float(i) for i in iterations[0]]
    world = [row for row in rows if "trainperf/world/ranks" in row]
    assert len(world) >= 4, world
    assert all(row["trainperf/world/ranks"] == 2.0 for row in world)
    named = [row.get("trainperf/world/straggler_rank") for row in world]
    assert named.count(1.0) >= len(world) - 1, named
    assert "straggler rank 1 (data" in found["summary"]["trainperf/world/line"]
    assert not any(key.startswith("trainperf/rank1/") for row in rows for key in row)  # rank 1 logs to MLflow only

    for rank in (0, 1):
        steps = [m.step for m in client.get_metric_history(run_id, f"trainperf/rank{rank}/data_wait_pct")]
        assert sorted(steps) == iterations[rank]
    waits = {rank: [m.value for m in client.get_metric_history(run_id, f"trainperf/rank{rank}/etl_ms")]
             for rank in (0, 1)}
    assert min(waits[1]) > max(waits[0]) + 15.0, waits  # rank 1's loader: 25 ms slower a batch
    excess = client.get_metric_history(run_id, "trainperf/world/straggler_rank")
    assert len(excess) == len(world) and {m.value for m in excess} <= {1.0}
    assert "straggler rank 1" in client.get_run(run_id).data.tags["trainperf.world.line"]
