"""Spark's ``TorchDistributor`` (local mode, two CPU processes on gloo): each rank writes its folder,
and rank 0's return value, the run directory's files, builds the report of both ranks on the driver."""

from __future__ import annotations

import shutil

import pytest

from _needs import integration

pytest.importorskip("torch")
integration("pyspark")
integration("pyspark.ml.torch.distributor")

pytestmark = [
    pytest.mark.realtime,
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs Java"),
]


def test_torch_distributor_ranks_report_and_rank_zero_returns_the_run_directory(tmp_path):
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    from trainperf import build_report, write_run_dir_files

    def train_fn(run_dir: str):  # defined here: Spark pickles it by value for the ranks
        import warnings

        import torch
        import torch.distributed as dist

        from trainperf import PerformanceListener, run_dir_files
        from trainperf.torch import attach

        warnings.simplefilter("ignore")
        torch.set_num_threads(1)
        dist.init_process_group("gloo")  # TorchDistributor sets the rank, world size and address
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        listener = PerformanceListener(5, sinks=[], run_dir=run_dir, cluster_every=2, cluster_timeout_s=20)
        attach(model, listener)
        for _ in range(30):
            x, y = torch.randn(8, 4), torch.randn(8, 1)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
        listener.close()  # rank 0 now holds every rank's files
        dist.barrier()
        dist.destroy_process_group()
        # every rank returns them: in local mode each process writes its return value, the last one wins
        return run_dir_files(run_dir)

    spark = (SparkSession.builder.master("local[2]").appName("trainperf-test")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1").getOrCreate())
    try:
        run_dir = tmp_path / "run"
        files = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(train_fn, str(run_dir))
    finally:
        spark.stop()
    assert {"rank-0/windows.jsonl", "rank-1/windows.jsonl", "rank-0/meta.json", "rank-1/meta.json"} <= set(files)
    report = build_report(run_dir)
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    copy = write_run_dir_files(files, tmp_path / "driver")
    report = build_report(copy)
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert all(r["iterations"] == 30 for r in report["ranks"])
    assert {c["rank"]: c["status"] for c in report["clocks"]} == {0: "reference", 1: "aligned"}
