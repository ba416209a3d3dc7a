"""One rank of a three-rank gloo run started as its own interpreter (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT`` set), as a launcher starts it: trains 500 iterations with a listener
(frequency 5, a gather every 10 reports: the last is a clock round), closes it unless it is rank 2,
writes what it saw to ``OUT/rank<r>.json``, destroys the process group and ends normally."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import warnings

import torch
import torch.distributed as dist

from trainperf import PerformanceListener
from trainperf.torch import attach


def main(out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(4, 1)  # gradients all-reduced by hand: no DDP reducer to free at exit
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    listener = PerformanceListener(5, sinks=[], verdict=False, run_dir=os.path.join(out, f"own-{rank}"),
                                   cluster_every=10, cluster_timeout_s=12.0)
    attach(model, listener)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(500):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
        began = time.perf_counter()
        if rank != 2:
            listener.close()
        took = time.perf_counter() - began
    ours = [t.name for t in threading.enumerate() if t.name.startswith("trainperf-cluster")]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"took": took, "threads": ours,
                   "warnings": [str(w.message) for w in caught if "trainperf" in str(w.message)]}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
