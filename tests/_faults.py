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
from collections.abc import Callable, Iterator, Sequence
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
    width: int = 32  # the model's hidden width (1024: real compute on every rank)
    delay_ms: float | None = None  # the fault's delay, else the plan's
    period: int = 1  # the fault acts in every ``period``-th iteration only (a checkpoint every 5th step)
    also: tuple[str, int, float] | None = None  # a second fault: (fault, rank, delay in ms), every iteration
    frequencies: tuple[int, ...] = ()  # each rank's listener frequency, else the plan's
    hook_before: bool = False  # the ``hook`` fault's comm hook is registered before attach (DDP's usual order)
    wrap: str = "ddp"  # how the model is wrapped: a key of WRAPS

    @property
    def name(self) -> str:
        bn = "-bn" if self.bn else ""
        every = f"-1of{self.every}" if self.every > 1 else ""
        accumulate = f"-acc{self.accumulate}" if self.accumulate > 1 else ""
        shape = (f"-w{self.width}" if self.width != 32 else "") + (f"-{self.delay_ms:g}ms" if self.delay_ms else "")
        shape += f"-every{self.period}" if self.period > 1 else ""
        shape += f"-and-{self.also[0]}-r{self.also[1]}" if self.also else ""
        shape += "-freq" + "_".join(map(str, self.frequencies)) if self.frequencies else ""
        shape += "-before" if self.hook_before else ""
        wrap = f"-{self.wrap}" if self.wrap != "ddp" else ""
        return f"{self.fault}-r{self.slow_rank}-{self.loop}{bn}{every}{accumulate}{shape}{wrap}"

    @property
    def named(self) -> set[tuple[int, str]]:
        """The (rank, cause) pairs the report must name."""
        out = set() if self.fault == "none" else {(self.slow_rank, EXPECTED[self.fault])}
        if self.also:
            out.add((self.also[1], EXPECTED[self.also[0]]))
        return out  # type: ignore[return-value]

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


def _ddp(net: Any) -> Any:
    import torch

    return torch.nn.parallel.DistributedDataParallel(net)


#: How a scenario's model is wrapped, by ``Scenario.wrap`` (other runners add theirs before forking).
WRAPS: dict[str, Callable[[Any], Any]] = {"ddp": _ddp}


def _slowed(scenario: Scenario, rank: int, iteration: int, frequency: int) -> bool:
    if rank != scenario.slow_rank or scenario.fault == "none":
        return False
    window = (iteration - 1) // frequency
    return window % scenario.every == scenario.every - 1


def _pause(scenario: Scenario, plan: Plan, kind: str, rank: int, iteration: int) -> float:
    """Seconds the ``kind`` fault holds ``rank`` in ``iteration`` (1-based), 0 when it does not act."""
    seconds = 0.0
    if (scenario.fault == kind and _slowed(scenario, rank, iteration, plan.frequency)
            and iteration % scenario.period == 0):
        seconds += scenario.delay_ms / 1000.0 if scenario.delay_ms is not None else plan.delay_s
    if scenario.also and scenario.also[0] == kind and scenario.also[1] == rank:
        seconds += scenario.also[2] / 1000.0
    return seconds


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
    micro = scenario.accumulate
    iterations = plan.frequency * (plan.windows + 1) * micro  # micro-batches
    width = scenario.width
    state = {"i": 0}

    def pause(kind: str, iteration: int | None = None) -> float:
        return _pause(scenario, plan, kind, rank, state["i"] if iteration is None else iteration)

    def sleep(kind: str, iteration: int | None = None) -> None:
        seconds = pause(kind, iteration)
        if seconds:
            time.sleep(seconds)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers = [torch.nn.Linear(16, width)]
            if scenario.bn:
                layers.append(torch.nn.BatchNorm1d(width))
            layers += [torch.nn.ReLU()]
            if width > 32:
                layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
            layers += [torch.nn.Linear(width, 1)]
            self.body = torch.nn.Sequential(*layers)

        def forward(self, x):
            sleep("forward" if torch.is_grad_enabled() else "eval")
            return self.body(x)

    rows = 64 if width > 32 else 8

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return iterations

        def __getitem__(self, i):
            sleep("data", i // micro + 1)
            return torch.randn(rows, 16), torch.randn(rows, 1)

    def generator() -> Iterator[tuple[Any, Any]]:
        for i in range(iterations):
            sleep("data", i // micro + 1)
            yield torch.randn(rows, 16), torch.randn(rows, 1)

    torch.manual_seed(0)
    model = WRAPS[scenario.wrap](Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt.register_step_pre_hook(lambda *_: sleep("optimizer"))
    frequency = scenario.frequencies[rank] if scenario.frequencies else plan.frequency
    listener = listener_cls(frequency, sinks=[], verdict=False, report_gc=True, run_dir=out / scenario.name,
                            cluster_every=2, cluster_timeout_s=20.0)
    if scenario.fault == "hook" or (scenario.also and scenario.also[0] == "hook"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def hook(state, bucket):  # noqa: ANN001, ANN202 - DDP checks the annotations it finds
            sleep("hook")
            return default_hooks.allreduce_hook(state, bucket)

        if scenario.hook_before:
            model.register_comm_hook(dist.group.WORLD, hook)
            attach(model, listener)
        else:
            attach(model, listener)
            model.register_comm_hook(dist.group.WORLD, hook)
    else:
        attach(model, listener)
    if scenario.fault == "gc":
        seconds = _pause(scenario, plan, "gc", scenario.slow_rank, _first_acting(scenario, plan))
        heap[:] = [[i] for i in range(int(seconds / gc_per_object))]
    source = torch.utils.data.DataLoader(Data(), batch_size=None) if scenario.loop == "loader" else generator()
    for k, (x, y) in enumerate(source):
        last = k % micro == micro - 1  # the step's last micro-batch: the one whose backward pass syncs
        if k % micro == 0:
            state["i"] += 1
            opt.zero_grad()
        with contextlib.nullcontext() if last else model.no_sync():
            out_ = model(x)
            sleep("loss")
            torch.nn.functional.mse_loss(out_, y).backward()
        if not last:
            continue
        opt.step()
        sleep("host")
        if scenario.fault == "eval":
            with torch.no_grad():
                model.module(x)
        if pause("gc"):
            gc.collect()
    heap.clear()
    listener.close()


def _first_acting(scenario: Scenario, plan: Plan) -> int:
    """The first iteration in which the scenario's fault acts (sizes the GC fault's heap)."""
    return next(i for i in range(1, 10 * plan.frequency * scenario.every * scenario.period + 2)
                if _slowed(scenario, scenario.slow_rank, i, plan.frequency) and i % scenario.period == 0)


def run(plan: Plan, out: Path, limit_s: float = 600.0) -> list[int | None]:
    """Run ``plan``'s ranks (forked) into ``out``; their exit codes (``None``: killed at ``limit_s``)."""
    return run_forked(_worker, plan.world, (str(out), plan), limit_s)


@dataclass
class Outcome:
    """How the windows of one scenario were judged."""

    scenario: Scenario
    acting: int = 0  # windows in which the slowed rank was slowed
    right: int = 0  # ... in which the right rank(s) and cause(s) were named
    healthy: int = 0  # windows in which no rank was slowed
    false_alarms: int = 0  # ... in which a straggler was named anyway
    wrong: list[str] | None = None  # what was named instead, in the acting windows
    report: list[tuple[int, str]] | None = None  # the report's stragglers (rank, cause)
    report_windows: list[int] | None = None  # the windows the report lists for the expected straggler
    pattern: str | None = None  # the pattern the report gives the expected straggler
    headline: str | None = None  # the report's cluster line

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "scenario": self.scenario.name}

    @property
    def named_over_run(self) -> bool:
        """Every expected straggler is in the report's list (with a pattern when it acts every n-th iteration)."""
        listed = set(self.report or [])
        return self.scenario.named <= listed and (self.scenario.period == 1 or self.pattern is not None)


def judged_windows(run_dir: Path, plan: Plan) -> list[tuple[int, list[Any]]]:
    """What the report's rule names in each steady window every rank reported, by the window's last
    iteration: the ranks' common windows, judged against the run (``judge_windows``)."""
    from trainperf.ranks._stragglers import rank_figures
    from trainperf.ranks._windows import common_windows, judge_windows

    by_rank: dict[int, list[tuple[int, Any]]] = {}
    for rank in range(plan.world):
        path = run_dir / f"rank-{rank}" / "windows.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            w = json.loads(line)
            if w.get("warmup"):
                continue
            f = rank_figures(rank, w)
            if f is not None:
                by_rank.setdefault(rank, []).append((int(w["iteration"]), f))
    windows = [(last, figures) for last, figures in common_windows(by_rank) if len(figures) == plan.world]
    judged, _ = judge_windows([figures for _, figures in windows])
    return [(last, stragglers) for (last, _), stragglers in zip(windows, judged, strict=True)]


def judge(run_dir: Path, scenario: Scenario, plan: Plan) -> Outcome:
    """Each steady window judged as the report judges it (the ranks' common windows, each rank's
    figures over the run, ``find_stragglers``), and the report's own list of stragglers. A scenario
    whose fault acts in some iterations of every window (``period``) is judged over the run only."""
    from trainperf import build_report

    outcome = Outcome(scenario, wrong=[])
    for last, stragglers in judged_windows(run_dir, plan):
        found = {(s.rank, s.cause) for s in stragglers}
        if scenario.period > 1:
            continue
        if scenario.named and _slowed(scenario, scenario.slow_rank, last, plan.frequency):
            outcome.acting += 1
            if found == scenario.named:
                outcome.right += 1
            else:
                outcome.wrong.append(f"{last}: {sorted(found)}")  # type: ignore[union-attr]
        else:
            outcome.healthy += 1
            outcome.false_alarms += bool(found)
    report = build_report(run_dir)
    outcome.report = [(s["rank"], s["cause"]) for s in report["stragglers"]]
    expected = (scenario.slow_rank, scenario.expected)
    entry = next((s for s in report["stragglers"] if (s["rank"], s["cause"]) == expected), None)
    outcome.report_windows = entry["iterations"] if entry else []
    outcome.pattern = entry.get("pattern") if entry else None
    outcome.headline = report.get("cluster")
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
