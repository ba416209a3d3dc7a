"""Lightning's DDP on CPU (two ranks, the script launched again for rank 1): the callback links the
ranks, each rank writes its own folder and rank 0's run directory reports both; a slow rank is named
with its cause, with and without gradient accumulation."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("pytorch_lightning")

pytestmark = [pytest.mark.realtime, pytest.mark.integration]  # Lightning's DDP launches: the integration command

SRC = Path(__file__).resolve().parents[1] / "src"

SCRIPT = textwrap.dedent(
    """
    import sys
    import warnings

    import pytorch_lightning as pl
    import torch

    from trainperf.lightning import PerformanceCallback

    warnings.simplefilter("ignore")


    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self):
            data = torch.utils.data.TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
            return torch.utils.data.DataLoader(data, batch_size=8)


    if __name__ == "__main__":
        torch.set_num_threads(1)
        callback = PerformanceCallback(5, run_dir=sys.argv[1], sinks=[], cluster_every=2, cluster_timeout_s=20)
        trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=30, enable_progress_bar=False,
                             logger=False, enable_checkpointing=False, enable_model_summary=False, callbacks=[callback])
        trainer.fit(Tiny())
        cluster = [s for s in callback.listener.sinks if type(s).__name__ == "Cluster"]
        print(f"rank {trainer.global_rank}: cluster lines {len(cluster[0].lines) if cluster else None}")
    """
)


def test_ddp_ranks_write_their_folders_and_rank_zero_reports_both(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script), str(run_dir)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0: cluster lines" in done.stdout and "rank 0: cluster lines None" not in done.stdout, done.stdout
    for rank in (0, 1):
        assert (run_dir / f"rank-{rank}" / "windows.jsonl").exists()
        assert (run_dir / f"rank-{rank}" / "clock.jsonl").exists()
    from trainperf import build_report

    report = build_report(run_dir)
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert all(r["iterations"] > 0 for r in report["ranks"])
    assert {c["rank"]: c["status"] for c in report["clocks"]} == {0: "reference", 1: "aligned"}


FAULT_SCRIPT = textwrap.dedent(
    """
    import sys
    import time
    import warnings

    import pytorch_lightning as pl
    import torch

    from trainperf.lightning import PerformanceCallback

    warnings.simplefilter("ignore")
    FAULT, SLOW = sys.argv[2], int(sys.argv[3])


    class Slow(torch.utils.data.Dataset):
        def __init__(self, rank):
            self.rank = rank

        def __len__(self):
            return 200

        def __getitem__(self, i):
            if FAULT == "data" and self.rank == SLOW:
                time.sleep(0.025)
            return torch.randn(16), torch.randn(1)


    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                                            torch.nn.Linear(32, 1))

        def forward(self, x):
            if FAULT == "forward" and self.global_rank == SLOW:
                time.sleep(0.025)
            return self.body(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            out = self(x)
            if FAULT == "loss" and self.global_rank == SLOW:
                time.sleep(0.025)  # work after self(x): a loss head
            return torch.nn.functional.mse_loss(out, y)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if FAULT == "host" and self.global_rank == SLOW:
                time.sleep(0.025)  # logging after the step

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(Slow(self.global_rank), batch_size=8)


    if __name__ == "__main__":
        torch.set_num_threads(1)
        callback = PerformanceCallback(5, run_dir=sys.argv[1], sinks=[], verdict=False, cluster_every=2,
                                       cluster_timeout_s=20)
        trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=45, enable_progress_bar=False,
                             logger=False, enable_checkpointing=False, enable_model_summary=False, callbacks=[callback])
        trainer.fit(Net())
    """
)


@pytest.mark.parametrize(("fault", "slow", "cause"), [("data", 1, "data"), ("loss", 1, "backward"),
                                                      ("host", 0, "host")])
def test_lightning_ddp_names_the_slow_rank_and_its_cause(tmp_path, fault, slow, cause):
    script = tmp_path / "train.py"
    script.write_text(FAULT_SCRIPT)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script), str(run_dir), fault, str(slow)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    from trainperf import build_report

    report = build_report(run_dir)
    assert [(s["rank"], s["cause"]) for s in report["stragglers"]][:1] == [(slow, cause)], report["stragglers"]
    top = report["stragglers"][0]
    assert top["windows"] >= 0.9 * report["analysed_windows"], (top, report["analysed_windows"])


ACCUMULATE_SCRIPT = textwrap.dedent(
    """
    import sys
    import time
    import warnings

    import pytorch_lightning as pl
    import torch

    from trainperf.lightning import PerformanceCallback

    warnings.simplefilter("ignore")
    RUN, ACCUMULATE, STEPS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

        def forward(self, x):
            return self.body(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self):
            slow = self.global_rank == 1

            def collate(items):  # rank 1's batches each take 25 ms longer
                if slow:
                    time.sleep(0.025)
                return torch.utils.data.default_collate(items)

            n = 8 * ACCUMULATE * STEPS * 2
            data = torch.utils.data.TensorDataset(torch.randn(n, 16), torch.randn(n, 1))
            return torch.utils.data.DataLoader(data, batch_size=8, collate_fn=collate)


    class Busy(pl.Callback):
        # the same host work on every rank around each batch, listed before the performance callback

        def on_train_batch_start(self, *args):
            time.sleep(0.002)

        def on_train_batch_end(self, *args):
            time.sleep(0.002)


    if __name__ == "__main__":
        torch.set_num_threads(1)
        callback = PerformanceCallback(5, run_dir=RUN, sinks=[], verdict=False, cluster_every=2, cluster_timeout_s=20)
        trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=STEPS, enable_progress_bar=False,
                             logger=False, enable_checkpointing=False, enable_model_summary=False,
                             accumulate_grad_batches=ACCUMULATE, callbacks=[Busy(), callback])
        trainer.fit(Net())
    """
)


def test_lightning_ddp_names_the_slow_loader_in_nearly_every_window_with_and_without_accumulation(tmp_path):
    """Rank 1's batches each take 25 ms longer; ``accumulate_grad_batches`` 1 (the control) and 4
    (Lightning runs the first three micro-batches under ``no_sync``), a callback listed before ours.
    Each steady window is judged as the report judges it: rank 1 and ``data``; its data wait holds
    every micro-batch's, and it waits least in the collectives."""
    import json
    import statistics

    from _faults import Plan, Scenario, judge

    script = tmp_path / "train.py"
    script.write_text(ACCUMULATE_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    scenario, steps = Scenario("data", 1), 105
    plan = Plan(2, (scenario,), frequency=5)
    outcomes = []
    for accumulate in (1, 4):
        run_dir = tmp_path / f"run-{accumulate}"
        done = subprocess.run([sys.executable, str(script), str(run_dir), str(accumulate), str(steps)], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        outcome = judge(run_dir, scenario, plan)
        assert outcome.acting >= 19 and outcome.right >= 0.9 * outcome.acting, (accumulate, outcome.wrong)
        assert outcome.report[:1] == [(1, "data")], (accumulate, outcome.report)
        outcomes.append(outcome)
        lines = {rank: (run_dir / f"rank-{rank}" / "windows.jsonl").read_text().splitlines() for rank in (0, 1)}
        steady = {rank: [w for w in map(json.loads, lines[rank]) if not w.get("warmup")] for rank in (0, 1)}
        assert all(w["batches"] == 5 * accumulate for w in steady[1]), accumulate
        assert statistics.median(w["etl_ms"] for w in steady[1]) >= 0.8 * accumulate * 25.0
        waits = [statistics.median(w["extra"]["wait_ms"] for w in steady[rank]) for rank in (1, 0)]
        assert waits[0] < waits[1], (accumulate, waits)
    assert sum(o.right for o in outcomes) >= 0.95 * sum(o.acting for o in outcomes), [o.wrong for o in outcomes]
