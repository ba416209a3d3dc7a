"""The loops people write, unchanged, against a stopwatch: what trainperf reports next to the truth.

Each scenario runs a real loop whose loader sleeps a known time per batch and whose forward sleeps
a known compute time, once bare (timed with a stopwatch) and once listened to with ``attach``. The
truth is the bare run's stopwatch: around the loader's ``next()`` for data wait, around the whole
loop for iteration time and samples/sec. Printed per scenario: truth, reported, error, and the verdict.

Run: ``python benchmarks/loops.py [--steps N]``.
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainperf import PerformanceListener
from trainperf.torch import attach

torch.set_num_threads(1)
BATCH = 16


class Sleepy(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, load_s: float, n: int) -> None:
        self.load_s, self.n = load_s, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.load_s)
        return torch.randn(BATCH, 8), torch.randint(0, 2, (BATCH,))


class SlowNet(torch.nn.Module):
    def __init__(self, compute_s: float) -> None:
        super().__init__()
        self.compute_s = compute_s
        self.fc = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.compute_s)
        return self.fc(x)


@dataclass
class Scenario:
    name: str
    load_s: float  # per batch
    batches_per_step: int
    run: Callable[[torch.nn.Module, torch.utils.data.DataLoader, int], None]  # type: ignore[type-arg]
    compute_s: float = 0.004


def loss_of(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(out, y)


def plain(model, loader, _):  # type: ignore[no-untyped-def]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        opt.zero_grad()
        loss_of(model(x), y).backward()
        opt.step()


def accumulation(model, loader, k):  # type: ignore[no-untyped-def]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i, (x, y) in enumerate(loader):
        loss_of(model(x), y).backward()
        if i % k == k - 1:
            opt.step()
            opt.zero_grad()


def teacher(model, loader, _):  # type: ignore[no-untyped-def]
    opt, big = torch.optim.SGD(model.parameters(), lr=0.01), SlowNet(0.008)
    for x, _y in loader:
        with torch.no_grad():
            target = big(x).argmax(1)
        opt.zero_grad()
        loss_of(model(x), target).backward()
        opt.step()


def eval_in_loop(model, loader, _):  # type: ignore[no-untyped-def]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        opt.zero_grad()
        loss_of(model(x), y).backward()
        opt.step()
        with torch.no_grad():
            model(x)
            time.sleep(0.004)  # logging, metrics


def two_optimizers(model, loader, _):  # type: ignore[no-untyped-def]
    head = torch.nn.Linear(2, 2)
    body_opt, head_opt = torch.optim.SGD(model.parameters(), lr=0.01), torch.optim.SGD(head.parameters(), lr=0.01)
    for x, y in loader:
        body_opt.zero_grad()
        head_opt.zero_grad()
        loss_of(head(model(x)), y).backward()
        body_opt.step()
        time.sleep(0.002)
        head_opt.step()


def skipped_steps(model, loader, _):  # type: ignore[no-untyped-def]
    opt, scaler = torch.optim.SGD(model.parameters(), lr=0.01), torch.amp.GradScaler("cpu")
    for i, (x, y) in enumerate(loader):
        opt.zero_grad()
        loss = loss_of(model(x), y) * (float("inf") if i % 4 == 0 else 1.0)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


SCENARIOS = [
    Scenario("plain, input-bound", 0.010, 1, plain),
    Scenario("gradient accumulation x4", 0.006, 4, accumulation),
    Scenario("no-grad teacher each step", 0.002, 1, teacher),
    Scenario("evaluation+logging in the loop", 0.002, 1, eval_in_loop),
    Scenario("two optimizers, one model", 0.004, 1, two_optimizers),
    Scenario("GradScaler skipping 1 in 4", 0.003, 1, skipped_steps),
]


class Stopwatch:
    """Iterates a loader and adds up the time its ``next()`` takes: the true data wait."""

    def __init__(self, loader: torch.utils.data.DataLoader) -> None:  # type: ignore[type-arg]
        self.loader, self.waited = loader, 0.0

    def __iter__(self):  # type: ignore[no-untyped-def]
        it = iter(self.loader)
        while True:
            started = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            self.waited += time.perf_counter() - started
            yield batch


def measure(s: Scenario, steps: int, listened: bool) -> tuple[float, float, list]:  # type: ignore[type-arg]
    """Wall seconds, stopwatch data-wait seconds (bare runs) and the records after warm-up (listened runs)."""
    torch.manual_seed(0)
    model = SlowNet(s.compute_s)
    loader = torch.utils.data.DataLoader(Sleepy(s.load_s, steps * s.batches_per_step), batch_size=None)
    listener = None
    source: object = loader
    if listened:
        listener = PerformanceListener(10, sinks=[], history=None)
        attach(model, listener)
    else:
        source = watch = Stopwatch(loader)
    started = time.perf_counter()
    s.run(model, source, s.batches_per_step)
    wall = time.perf_counter() - started
    records = []
    if listener is not None:
        listener.close()
        records = [r for r in listener.history if not r.warmup]
        return wall, 0.0, records
    return wall, watch.waited, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps per run (default 80)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''} torch {torch.__version__}")
    head = (f"{'scenario':<32} {'ETL true':>8} {'ETL':>7} {'iter true':>9} {'iter':>7} {'smp/s true':>10} "
            f"{'smp/s':>8}  verdict")
    print(head)
    print("-" * len(head))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        measure(SCENARIOS[0], 10, listened=False)  # warm torch up
        for s in SCENARIOS:
            bare_wall, bare_wait, _ = measure(s, args.steps, listened=False)
            _, _, records = measure(s, args.steps, listened=True)
            iterations = sum(r.window_iterations for r in records)
            etl = sum(r.etl_total_ms for r in records) / iterations
            it = sum(r.iteration_ms * r.window_iterations for r in records) / iterations
            rate = sum(r.samples or 0 for r in records) / sum(r.window_s for r in records)
            true_it = 1000 * bare_wall / args.steps
            true_etl = 1000 * bare_wait / args.steps
            true_rate = BATCH * s.batches_per_step * args.steps / bare_wall
            verdicts = sorted({r.verdict.kind for r in records if r.verdict})
            print(f"{s.name:<32} {true_etl:8.1f} {etl:7.1f} {true_it:9.1f} {it:7.1f} {true_rate:10.0f} {rate:8.0f}  "
                  f"{','.join(verdicts)}  (errors: ETL {100 * (etl / true_etl - 1):+.0f}%, "
                  f"iteration {100 * (it / true_it - 1):+.0f}%, samples/s {100 * (rate / true_rate - 1):+.0f}%)")


if __name__ == "__main__":
    main()
