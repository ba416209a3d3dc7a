"""Training jobs on a local Ray cluster, and the same loop under ``torchrun``, for tests/test_ray_train.py.

``python _ray_job.py ray OUT``: a 2-worker ``TorchTrainer`` whose storage is a file system other than the
local one (as cloud storage is: ``OUT/cloud`` seen through pyarrow's ``SubTreeFileSystem``); each worker
trains a small model under ``attach`` with a relative ``run_dir`` (so in its own working directory), rank
1's loader 25 ms slower a batch, reports through :func:`trainperf.ray.report` after every 20 iterations
and ends with :func:`trainperf.ray.hand_back`; the controller's :class:`PerformanceCallback` compares
them. Writes ``OUT/result.json``: the run directory the driver got (copied into ``OUT``) and how long it
all took.

``torchrun --nproc-per-node 2 _ray_job.py torchrun OUT``: the same loop, with ``OUT/torchrun`` as the run
directory and no Ray.

``python _ray_job.py lightning OUT``: the loader of the first job in a Lightning module, trained by a
Lightning ``Trainer`` as Ray Train's guide sets one up (``RayDDPStrategy``, ``RayLightningEnvironment``,
``prepare_trainer``) with trainperf's Lightning callback and a relative ``run_dir``, on local storage.

``python _ray_job.py data OUT``: on local storage (``OUT/storage``), the workers read a Ray Data shard
through :func:`trainperf.ray.batches`, with a stopwatch around each ``next()`` (kept in
``OUT/waits-rank<r>.json`` at every report); rank 1 dies (``os._exit``) after its iteration 30. Writes
``OUT/result.json`` with the error the driver got, when rank 1 died and when the driver heard of it."""

from __future__ import annotations

import json
import os
import sys
import time

ITERATIONS, REPORT_EVERY, DIE_AT = 80, 20, 30


def started(config: dict, rank: int) -> None:
    """Leave ``OUT/started-rank<r>``: the worker runs (Ray's own start-up, which trainperf has no part in,
    is over)."""
    if config.get("out"):
        with open(os.path.join(config["out"], f"started-rank{rank}"), "w"):
            pass


def train_loop(config: dict) -> None:
    import warnings

    import torch
    import torch.distributed as dist

    from trainperf import PerformanceListener
    from trainperf.torch import attach, timed

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    started(config, rank)

    class Sleepy(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return ITERATIONS

        def __getitem__(self, i):
            time.sleep(0.005 + (0.025 if rank == 1 else 0.0))
            return torch.randn(8, 4), torch.randn(8, 1)

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    listener = PerformanceListener(5, sinks=[], run_dir=config["run_dir"], cluster_every=2, cluster_timeout_s=30.0)
    attach(model, listener)
    loader = timed(torch.utils.data.DataLoader(Sleepy(), batch_size=None), model)
    for i, (x, y) in enumerate(loader, 1):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if i % REPORT_EVERY == 0 and config["ray"]:
            from trainperf.ray import report

            report({"step": i}, listener=listener)
    if config["ray"]:
        from trainperf.ray import hand_back

        hand_back({"done": True}, listener=listener)
    else:
        listener.close()


def data_loop(config: dict) -> None:
    import warnings

    import ray.train
    import torch
    import torch.distributed as dist

    from trainperf import PerformanceListener
    from trainperf.ray import batches, report
    from trainperf.torch import attach

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    started(config, rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    listener = PerformanceListener(5, sinks=[], run_dir="trainperf", cluster_every=2, cluster_timeout_s=30.0)
    attach(model, listener)
    shard = ray.train.get_dataset_shard("train")
    batches_ = iter(batches(shard, model, batch_size=8, prefetch_batches=1))
    waits: list[float] = []
    i = 0
    while True:
        began = time.perf_counter()
        try:
            batch = next(batches_)
        except StopIteration:
            break
        waits.append(time.perf_counter() - began)
        i += 1
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(batch["x"]), batch["y"]).backward()
        opt.step()
        if i % 10 == 0:
            report({"step": i}, listener=listener)
            with open(os.path.join(config["out"], f"waits-rank{rank}.json.tmp"), "w") as f:
                json.dump(waits, f)
            os.replace(os.path.join(config["out"], f"waits-rank{rank}.json.tmp"),
                       os.path.join(config["out"], f"waits-rank{rank}.json"))
        if rank == 1 and i == DIE_AT:
            with open(os.path.join(config["out"], "died.json"), "w") as f:
                json.dump({"wall": time.time()}, f)
            os._exit(1)
    listener.close()


def lightning_loop(config: dict) -> None:
    import warnings

    import lightning.pytorch as pl
    import torch
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, prepare_trainer

    from trainperf.lightning import PerformanceCallback

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    started(config, rank)

    class Sleepy(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 8 * 2 * 20  # 20 steps a rank

        def __getitem__(self, i):
            time.sleep(0.001 + (0.003 if rank == 1 else 0.0))  # a batch of 8: 8 and 32 ms
            return torch.randn(4), torch.randn(1)

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 1)

        def training_step(self, batch, index):
            x, y = batch
            return torch.nn.functional.mse_loss(self.fc(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    callback = PerformanceCallback(frequency=5, sinks=[], run_dir="trainperf", cluster_every=1)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices="auto", strategy=RayDDPStrategy(),
                         plugins=[RayLightningEnvironment()], callbacks=[callback], enable_progress_bar=False,
                         logger=False, enable_checkpointing=False)
    prepare_trainer(trainer).fit(Model(), torch.utils.data.DataLoader(Sleepy(), batch_size=8))


def make_rows(rows: dict) -> dict:
    import numpy as np

    time.sleep(0.010)  # the dataset's own stage: 10 ms a batch of 8 rows
    n = len(rows["id"])
    return {"x": np.random.randn(n, 4).astype("float32"), "y": np.random.randn(n, 1).astype("float32")}


def on_ray(out: str, mode: str) -> None:
    import pyarrow.fs
    import ray
    import ray.data
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from trainperf.ray import PerformanceCallback, run_dir_of

    began = time.monotonic()
    data = mode == "data"
    ray.init(address="local", num_cpus=4 if data else 2, include_dashboard=False, log_to_driver=True)
    if mode != "ray":
        storage: dict = {"storage_path": os.path.join(out, "storage")}
    else:
        os.makedirs(os.path.join(out, "cloud"))
        storage = {"storage_path": "runs",
                   "storage_filesystem": pyarrow.fs.SubTreeFileSystem(os.path.join(out, "cloud"),
                                                                      pyarrow.fs.LocalFileSystem())}
    run_config = RunConfig(name="job", callbacks=[PerformanceCallback()], failure_config=FailureConfig(max_failures=0),
                           **storage)
    scaling = ScalingConfig(num_workers=2, use_gpu=False)
    result: dict = {"path": os.path.join(out, "storage", "job"), "out": out}
    if data:
        rows = ray.data.range(640, override_num_blocks=16).map_batches(make_rows, batch_size=8)
        trainer = TorchTrainer(data_loop, train_loop_config={"out": out}, scaling_config=scaling,
                               run_config=run_config, datasets={"train": rows})
        try:
            trainer.fit()
            result["error"] = None
        except Exception as error:  # noqa: BLE001 - what the driver got is the result
            result["heard"] = time.time()
            result["error"] = type(error).__name__
            result["failed_ranks"] = sorted(getattr(error, "worker_failures", {}) or {})
    elif mode == "lightning":
        TorchTrainer(lightning_loop, train_loop_config={"out": out}, scaling_config=scaling,
                     run_config=run_config).fit()
    else:
        trainer = TorchTrainer(train_loop, train_loop_config={"ray": True, "run_dir": "trainperf", "out": out},
                               scaling_config=scaling, run_config=run_config)
        done = trainer.fit()
        os.chdir(out)  # where run_dir_of copies the run directory to
        result["run_dir"] = run_dir_of(done)
        result["path"] = done.path
    ray.shutdown()
    result["seconds"] = time.monotonic() - began
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f)


def under_torchrun(out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        train_loop({"ray": False, "run_dir": os.path.join(out, "torchrun"), "out": out})
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    mode, where = sys.argv[1], sys.argv[2]
    if mode == "torchrun":
        under_torchrun(where)
    else:
        on_ray(where, mode)
