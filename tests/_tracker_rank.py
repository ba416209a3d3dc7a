"""One rank of a 2-rank gloo run logging to W&B (rank 0, offline) and MLflow (every rank, one run, under
its rank's prefix): ``python _tracker_rank.py RANK PORT OUT RUN_ID``. Rank 1's loader is 25 ms slower per
batch. Written for tests/test_tracker_ranks.py."""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist

from trainperf import PerformanceListener
from trainperf.sinks import MlflowSink, WandbSink
from trainperf.torch import attach, timed


class Sleepy(torch.utils.data.Dataset):
    def __init__(self, delay: float, n: int) -> None:
        self.delay, self.n = delay, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.randn(8, 4), torch.randn(8, 1)


def main(rank: int, port: int, out: str, run_id: str) -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WANDB_SILENT="true",
                      MLFLOW_ALLOW_FILE_STORE="true")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    import mlflow

    mlflow.set_tracking_uri(os.path.join(out, "mlruns") if "://" in out else f"file://{out}/mlruns")
    sinks = [MlflowSink(run_id, all_ranks=True)]
    if rank == 0:
        import wandb

        wandb.init(project="ranks", dir=os.path.join(out, "wandb0"), mode="offline")
        sinks.append(WandbSink())
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    listener = PerformanceListener(5, sinks=sinks, cluster_every=2, cluster_timeout_s=20.0)
    attach(model, listener)
    loader = timed(torch.utils.data.DataLoader(Sleepy(0.005 + (0.025 if rank == 1 else 0.0), 80), batch_size=None),
                   model)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
    listener.close()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"iterations": [r.iteration for r in listener.history]}, f)
    if rank == 0:
        wandb.finish()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
