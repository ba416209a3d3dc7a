"""Fault injection on real DDP ranks (gloo, CPU): one rank slowed in one phase, every rank listened,
then each window judged as the report judges it. Used by ``tests/test_faults.py`` and
``benchmarks/fault_matrix.py``.

One process per rank runs every scenario in turn on one process group, each with a run directory
of its own. A scenario's slowed rank sleeps ``delay_s`` per iteration in its phase:

* ``data``: the batch takes longer to come (the loader's dataset, or the generator, sleeps);
* ``forward``: the model's forward pass; ``loss``: between the forward pass and ``backward()``;
* ``optimizer``: inside ``optimizer.step()`` (a step pre-hook);
* ``host``: after ``optimizer.step()`` (logging, a checkpoint);
* ``eval``: an evaluation forward (no grad) after the step, on the wrapped module;
* ``gc``: a full garbage collection after the step, over a heap sized to take ``delay_s``;
* ``hook``: the rank's own DDP comm hook before it launches the all-reduce;
* ``none``: nobody (healthy windows, to count false alarms).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _ranks import run_forked

#: The cause the report must give for each fault.
EXPECTED = {"data": "data", "forward": "forward", "loss": "backward", "optimizer": "optimizer", "host": "host",
            "eval": "host", "gc": "gc", "hook": "communication", "none": None}


@dataclass(frozen=True)
class Scenario:
    fault: str
    slow_rank: int = 1
    loop: str = "loader"  # or "generator"
    bn: bool = False
    every: int = 1  # the rank is slowed in one window of every ``every`` (intermittent when > 1)
    accumulate: int = 1  # micro-batches per optimizer step, all but the last under ``no_sync``

    @property
    def name(self) -> str:
        bn = "-bn" if self.bn else ""
        every = f"-1of{self.every}" if self.every > 1 else ""
        accumulate = f"-acc{self.accumulate}" if self.accumulate > 1 else ""
        return f"{self.fault}-r{self.slow_rank}-{self.loop}{bn}{every}{accumulate}"

    @property
    def expected(self) -> str | None:
        return EXPECTED[self.fault]


@dataclass(frozen=True)
class Plan:
    world: int
    scenarios: tuple[Scenario, ...]
    windows: int = 8  # steady windows per scenario, after one warm-up window
    frequency: int = 5
    delay_s: float = 0.025


def _slowed(scenario: Scenario, rank: int, iteration: int, frequency: int) -> bool:
    if rank != scenario.slow_rank or scenario.fault == "none":
        return False
    window = (iteration - 1) // frequency
    return window % scenario.every == scenario.every - 1


def _worker(rank: int, port: int, out: str, plan: Plan) -> None:
    import torch
    import torch.distributed as dist

    from trainperf import PerformanceListener
    from trainperf.torch import attach

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=plan.world)
    heap: list[Any] = []
    gc_per_object = _gc_cost(heap)
    for scenario in plan.scenarios:
        _run_scenario(rank, Path(out), plan, scenario, heap, gc_per_object, torch, dist, PerformanceListener, attach)
        dist.barrier()
    dist.destroy_process_group()


def _gc_cost(heap: list[Any]) -> float:
    probe = [[i] for i in range(200_000)]
    gc.collect()
    began = time.perf_counter()
    gc.collect()
    cost = (time.perf_counter() - began) / len(probe)
    del probe
    return cost


def _run_scenario(rank, out, plan, scenario, heap, gc_per_object, torch, dist, listener_cls, attach) -> None:
    delay = plan.delay_s
    micro = scenario.accumulate
    iterations = plan.frequency * (plan.windows + 1) * micro  # micro-batches
    state = {"i": 0}

    def slowed() -> bool:
        return _slowed(scenario, rank, state["i"], plan.frequency)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers = [torch.nn.Linear(16, 32)]
            if scenario.bn:
                layers.append(torch.nn.BatchNorm1d(32))
            layers += [torch.nn.ReLU(), torch.nn.Linear(32, 1)]
            self.body = torch.nn.Sequential(*layers)

        def forward(self, x):
            if torch.is_grad_enabled():
                if scenario.fault == "forward" and slowed():
                    time.sleep(delay)
            elif scenario.fault == "eval" and slowed():
                time.sleep(delay)
            return self.body(x)

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return iterations

        def __getitem__(self, i):
            if scenario.fault == "data" and _slowed(scenario, rank, i // micro + 1, plan.frequency):
                time.sleep(delay)
            return torch.randn(8, 16), torch.randn(8, 1)

    def generator() -> Iterator[tuple[Any, Any]]:
        for i in range(iterations):
            if scenario.fault == "data" and _slowed(scenario, rank, i // micro + 1, plan.frequency):
                time.sleep(delay)
            yield torch.randn(8, 16), torch.randn(8, 1)

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if scenario.fault == "optimizer":
        opt.register_step_pre_hook(lambda *_: time.sleep(delay) if slowed() else None)
    listener = listener_cls(plan.frequency, sinks=[], verdict=False, report_gc=True, run_dir=out / scenario.name,
                            cluster_every=2, cluster_timeout_s=20.0)
    attach(model, listener)
    if scenario.fault == "hook":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def hook(state, bucket):  # noqa: ANN001, ANN202 - DDP checks the annotations it finds
            if slowed():
                time.sleep(delay)
            return default_hooks.allreduce_hook(state, bucket)

        model.register_comm_hook(dist.group.WORLD, hook)
    if scenario.fault == "gc":
        heap[:] = [[i] for i in range(int(delay / gc_per_object))]
    source = torch.utils.data.DataLoader(Data(), batch_size=None) if scenario.loop == "loader" else generator()
    for k, (x, y) in enumerate(source):
        last = k % micro == micro - 1  # the step's last micro-batch: the one whose backward pass syncs
        if k % micro == 0:
            state["i"] += 1
            opt.zero_grad()
        with contextlib.nullcontext() if last else model.no_sync():
            out_ = model(x)
            if scenario.fault == "loss" and slowed():
                time.sleep(delay)
            torch.nn.functional.mse_loss(out_, y).backward()
        if not last:
            continue
        opt.step()
        if scenario.fault == "host" and slowed():
            time.sleep(delay)
        if scenario.fault == "eval":
            with torch.no_grad():
                model.module(x)
        if scenario.fault == "gc" and slowed():
            gc.collect()
    heap.clear()
    listener.close()


def run(plan: Plan, out: Path, limit_s: float = 600.0) -> list[int | None]:
    """Run ``plan``'s ranks (forked) into ``out``; their exit codes (``None``: killed at ``limit_s``)."""
    return run_forked(_worker, plan.world, (str(out), plan), limit_s)


@dataclass
class Outcome:
    """How the windows of one scenario were judged."""

    scenario: Scenario
    acting: int = 0  # windows in which the slowed rank was slowed
    right: int = 0  # ... in which the right rank and cause were named
    healthy: int = 0  # windows in which no rank was slowed
    false_alarms: int = 0  # ... in which a straggler was named anyway
    wrong: list[str] | None = None  # what was named instead, in the acting windows
    report: list[tuple[int, str]] | None = None  # the report's stragglers (rank, cause)
    report_windows: list[int] | None = None  # the windows the report lists for the expected straggler

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "scenario": self.scenario.name}


def judge(run_dir: Path, scenario: Scenario, plan: Plan) -> Outcome:
    """Each steady window judged as the report judges it (``rank_figures`` then ``find_stragglers``
    over the ranks), and the report's own list of stragglers."""
    from trainperf import build_report
    from trainperf.ranks._stragglers import find_stragglers, rank_figures

    by_window: dict[int, list[Any]] = {}
    for rank in range(plan.world):
        path = run_dir / f"rank-{rank}" / "windows.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            w = json.loads(line)
            if w.get("warmup"):
                continue
            f = rank_figures(rank, w)
            if f is not None:
                by_window.setdefault(int(w["iteration"]), []).append(f)
    outcome = Outcome(scenario, wrong=[])
    for last, figures in sorted(by_window.items()):
        if len(figures) < plan.world:
            continue
        found = [(s.rank, s.cause) for s in find_stragglers(figures)]
        if _slowed(scenario, scenario.slow_rank, last, plan.frequency):
            outcome.acting += 1
            if found == [(scenario.slow_rank, scenario.expected)]:
                outcome.right += 1
            else:
                outcome.wrong.append(f"{last}: {found}")  # type: ignore[union-attr]
        else:
            outcome.healthy += 1
            outcome.false_alarms += bool(found)
    report = build_report(run_dir)
    outcome.report = [(s["rank"], s["cause"]) for s in report["stragglers"]]
    outcome.report_windows = next((s["iterations"] for s in report["stragglers"]
                                   if (s["rank"], s["cause"]) == (scenario.slow_rank, scenario.expected)), [])
    return outcome


def matrix(world: int, *, loops: Sequence[str] = ("loader", "generator"), bns: Sequence[bool] = (False, True),
           faults: Sequence[str] = tuple(EXPECTED)) -> tuple[Scenario, ...]:
    """Every fault on the last rank, for each loop kind and with and without BatchNorm."""
    return tuple(Scenario(f, world - 1 if f != "host" else 0, loop, bn) for loop in loops for bn in bns for f in faults)


def share(outcomes: Sequence[Outcome]) -> tuple[float, int, int]:
    """Right share over the acting windows, false alarms and healthy windows, over ``outcomes``."""
    acting = sum(o.acting for o in outcomes)
    right = sum(o.right for o in outcomes)
    return (right / acting if acting else math.nan, sum(o.false_alarms for o in outcomes),
            sum(o.healthy for o in outcomes))
