"""The cost of the ranks' traffic per report: ``world`` gloo ranks on this machine's CPU, each with a
listener linked to the others (``cluster_every=1``), time each call of the cluster's ``gather``
(rank 0: receive every rank's figures and name the straggler; the others: send theirs).

Reported: the median and 95th percentile per rank over ``gathers`` gathers, the first ones left out.
Target: at most 5 ms per gather at 4 ranks.

Run: ``python benchmarks/gather_cost.py [--world N] [--gathers N]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import statistics
import time
import warnings


def rank_main(rank: int, world: int, port: int, gathers: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    import torch
    import torch.distributed as dist

    from trainperf import PerformanceListener
    from trainperf.torch._cluster import Cluster
    from trainperf.torch.shared import join_cluster

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    listener = PerformanceListener(1, sinks=[], cluster_every=1, cluster_timeout_s=60, report_hardware=False)
    join_cluster(listener, None)
    cluster = next(s for s in listener.sinks if isinstance(s, Cluster))
    times: list[float] = []
    gather = cluster.gather

    def timed_gather() -> None:  # what each report costs this rank, clock estimates every 10th included
        started = time.perf_counter()
        gather()
        times.append(time.perf_counter() - started)

    cluster.gather = timed_gather  # type: ignore[method-assign]
    listener.start()
    for _ in range(gathers):
        time.sleep(0.002)  # some work between reports
        dist.barrier()  # the ranks arrive together, as after an all-reduce: no rank's lateness is timed
        listener.record_iteration(32, 1, 0.001)  # frequency 1: every iteration reports and gathers
    queue.put((rank, times, cluster.lines[-1] if cluster.lines else ""))
    listener.close()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--gathers", type=int, default=500)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, args.world, port, args.gathers, queue)) for r in range(args.world)]
    for p in procs:
        p.start()
    results = sorted(queue.get() for _ in procs)
    for p in procs:
        p.join()
    skip = min(20, args.gathers // 10)
    cores = os.cpu_count()
    print(f"gather cost, {args.world} gloo ranks on CPU ({cores} cores), {args.gathers} gathers, cluster_every=1")
    for rank, times, _ in results:
        kept = sorted(times[skip:])
        p95 = kept[int(0.95 * (len(kept) - 1))]
        print(f"rank {rank}: median {1000 * statistics.median(kept):.3f} ms, p95 {1000 * p95:.3f} ms")
    print("target: <= 5 ms per gather at 4 ranks (rank 0's median)")
    print("last line:", results[0][2])


if __name__ == "__main__":
    main()
