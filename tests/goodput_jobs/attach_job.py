"""A plain PyTorch loop under ``trainperf.torch.attach``: one attempt of the goodput job (see
``tests/test_goodput_jobs.py``). With ``WORLD_SIZE`` 2, a DDP rank on gloo."""

from __future__ import annotations

import os
import time

import _child as job
from _child import WATCH


def main() -> None:
    job.start_up()
    import torch

    import trainperf
    from trainperf.torch import attach

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    listener = trainperf.PerformanceListener(job.FREQUENCY, sinks=[], run_dir=job.run_dir(), rank=rank)
    first = job.RESUME_AT if job.attempt() > 1 else 0
    attach(model, listener, start_iteration=first)  # attached first: its torch.load is timed
    if first:
        began = time.time()
        state = torch.load(os.path.join(job.work_dir(), f"ckpt-{first}-{rank}.pt"), weights_only=False)
        WATCH.add("load", began, time.time())
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loader = job.loader(job.SlowBatches(first, 400))
    i = first
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        i += 1
        if job.attempt() == 1 and i == job.KILL_AT:
            listener.flush()  # the window of this iteration reached the file
            job.kill_self(rank)
        if i % job.EVAL_EVERY == 0:
            began = time.time()
            with torch.no_grad():
                model(x)
            time.sleep(job.EVAL_S)
            WATCH.add("eval", began, time.time())
        if i % job.SAVE_EVERY == 0:
            began = time.time()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "slow": job.SleepyPickle()},
                       os.path.join(job.work_dir(), f"ckpt-{i}-{rank}.pt"))
            WATCH.add("save", began, time.time())
        if i == job.LAST:
            break
    listener.close()
    WATCH.mark("end")
    WATCH.write(rank)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
