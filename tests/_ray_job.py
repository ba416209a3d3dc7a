"""A 2-worker Ray Train job on a local cluster (``python _ray_job.py OUT``): each worker trains a small model
under ``attach`` with a relative ``run_dir``, rank 1's loader 25 ms slower a batch, and reports through
:func:`trainperf.ray.report` after every 20 iterations; the controller's :class:`PerformanceCallback`
compares them. Writes ``OUT/result.json``: the run directory on the driver and how long it all took.
Written for tests/test_ray_train.py."""

from __future__ import annotations

import json
import os
import sys
import time


def train_loop(config: dict) -> None:
    import warnings

    import torch
    import torch.distributed as dist

    from trainperf import PerformanceListener
    from trainperf.ray import report
    from trainperf.torch import attach, timed

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    rank = dist.get_rank()

    class Sleepy(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 80

        def __getitem__(self, i):
            time.sleep(0.005 + (0.025 if rank == 1 else 0.0))
            return torch.randn(8, 4), torch.randn(8, 1)

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    listener = PerformanceListener(5, sinks=[], run_dir="trainperf", cluster_every=2, cluster_timeout_s=30.0)
    attach(model, listener)
    loader = timed(torch.utils.data.DataLoader(Sleepy(), batch_size=None), model)
    for i, (x, y) in enumerate(loader, 1):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if i % 20 == 0:
            report({"step": i}, listener=listener)
    listener.close()


def main(out: str) -> None:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from trainperf.ray import PerformanceCallback, run_dir_of

    began = time.monotonic()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=True)
    trainer = TorchTrainer(train_loop, scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                           run_config=RunConfig(storage_path=os.path.join(out, "storage"), name="job",
                                                callbacks=[PerformanceCallback()]))
    result = trainer.fit()
    found = run_dir_of(result)
    ray.shutdown()
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"run_dir": found, "path": result.path, "seconds": time.monotonic() - began}, f)


if __name__ == "__main__":
    main(sys.argv[1])
