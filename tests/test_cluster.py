"""Ranks of a real ``torch.distributed`` run (gloo, spawned locally): rank 0's cluster line names the
rank whose loader holds the others back, clocks are estimated, and rank 0 gets every rank's files."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


class Sleepy(torch.utils.data.Dataset):
    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.randn(8, 4), torch.randn(8, 1)


def worker(rank: int, world: int, port: int, out: str, slow_rank: int) -> None:
    import warnings

    from trainperf import PerformanceListener
    from trainperf.torch import attach

    warnings.simplefilter("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    listener = PerformanceListener(5, sinks=[], run_dir=os.path.join(out, f"own-{rank}"), cluster_every=2,
                                   cluster_timeout_s=20)
    attach(model, listener)
    loader = torch.utils.data.DataLoader(Sleepy(0.03 if rank == slow_rank else 0.001), batch_size=None)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    cluster = next(s for s in listener.sinks if type(s).__name__ == "Cluster")
    listener.close()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"lines": cluster.lines, "offsets": {str(k): v for k, v in cluster.offsets.items()}}, f)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_rank_zero_names_the_rank_with_the_slow_loader_and_gets_every_ranks_files(tmp_path):
    mp.spawn(worker, args=(2, free_port(), str(tmp_path), 1), nprocs=2, join=True)
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    assert rank0["lines"], "rank 0 logged no cluster line"
    assert all("straggler rank 1 (data" in line for line in rank0["lines"]), rank0["lines"]
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    offset, uncertainty = rank1["offsets"]["1"]
    assert abs(offset) < 0.05 and 0 <= uncertainty < 0.05  # one machine: one clock
    # rank 0's own run directory alone holds both ranks (their disks are not shared here)
    assert (tmp_path / "own-0" / "rank-1" / "windows.jsonl").exists()
    from trainperf import build_report

    report = build_report(tmp_path / "own-0")
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert [s["rank"] for s in report["stragglers"]] == [1]
    assert report["stragglers"][0]["cause"] == "data"
