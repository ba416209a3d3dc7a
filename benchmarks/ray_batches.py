"""What reading Ray Data's figures costs a batch: :func:`trainperf.ray.batches` on a stand-in shard whose
iterator hands out ready batches (no wait: all that is timed is trainperf's own work), against
:func:`trainperf.torch.timed` on the same batches (the data wait alone) and a bare loop over them, under
``attach``. Rounds alternate between the three; the median round counts. No Ray is needed: the shard
keeps Ray Data's timers as Ray's ``DataIterator`` does (``_iter_stats``), each moved at every batch.

Target: the figures from Ray Data's timers add at most a few microseconds a batch to ``timed()``.

    python benchmarks/ray_batches.py [--batches 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from trainperf import PerformanceListener
from trainperf.ray import RAY_DATA_TIMERS, batches
from trainperf.torch import attach, timed


class Timer:
    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0.0

    def get(self) -> float:
        return self.total


class Shard:
    """Ready batches, each moving every one of Ray Data's timers a little."""

    def __init__(self, items: list[dict[str, torch.Tensor]]) -> None:
        self.items = items
        self._iter_stats = type("Stats", (), {})()
        self.timers = []
        for attribute, _ in RAY_DATA_TIMERS:
            timer = Timer()
            setattr(self._iter_stats, attribute, timer)
            self.timers.append(timer)

    def iter_torch_batches(self, **options: object) -> Shard:
        return self

    def __iter__(self):
        timers = self.timers
        for item in self.items:
            for timer in timers:
                timer.total += 1e-6
            yield item


def one_round(kind: str, items: list[dict[str, torch.Tensor]]) -> float:
    model = torch.nn.Linear(4, 1)
    listener = PerformanceListener(100, sinks=[], verdict=False, report_hardware=False)
    attach(model, listener)
    shard = Shard(items)
    source = {"bare": shard, "timed": timed(shard, model), "batches": batches(shard, model)}[kind]
    started = time.perf_counter()
    with torch.no_grad():
        for _batch in source:
            pass
    elapsed = time.perf_counter() - started
    listener.close()
    return elapsed / len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    items = [{"x": torch.zeros(8, 4)} for _ in range(args.batches)]
    kinds = ("bare", "timed", "batches")
    rounds: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            rounds[kind].append(one_round(kind, items))
    med = {k: 1e6 * statistics.median(v) for k, v in rounds.items()}
    for kind in kinds:
        spread = 1e6 * (max(rounds[kind]) - min(rounds[kind]))
        print(f"{kind:8s} {med[kind]:7.2f} us a batch (rounds spread {spread:.2f} us)")
    print(f"Ray Data's figures: +{med['batches'] - med['timed']:.2f} us a batch over timed(); "
          f"timed() +{med['timed'] - med['bare']:.2f} us over the bare loop")


if __name__ == "__main__":
    main()
