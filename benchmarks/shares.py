"""Where the time goes, against a stopwatch in the same run: each share trainperf reports next to
the loop's own stopwatch.

Every scenario is a real loop (real sleeps, the real clock): the loader sleeps ``load`` per batch,
the forward ``compute``, and the loop does its own work between steps where the scenario says. The
loop times each phase itself with ``time.perf_counter`` (the stopwatch) while trainperf listens with
``attach`` or ``timed``; both cover the same iterations (the listener's windows after warm-up).
trainperf's own time (a slow sink runs inside ``opt.step()``, in the step hook) is taken out of the
stopwatch's compute: it is not the user's loop.
Printed per scenario: data wait / compute / other / GC per iteration, stopwatch vs reported, the
worst error, and the verdicts of the windows.

Run: ``python benchmarks/shares.py [--steps N]``.
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from trainperf import PerformanceListener
from trainperf.torch import attach, timed

torch.set_num_threads(1)
BATCH = 16
FREQ = 10
clock = time.perf_counter


class Watch:
    """The loop's own stopwatch: seconds per phase."""

    def __init__(self) -> None:
        self.s = {"data": 0.0, "compute": 0.0, "other": 0.0, "gc": 0.0, "own": 0.0}

    def add(self, phase: str, started: float) -> float:
        now = clock()
        self.s[phase] += now - started
        return now


class Sleepy(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, load_s: float, n: int, lists: bool = False) -> None:
        self.load_s, self.n, self.lists = load_s, n, lists

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
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


def run_loop(
    steps: int, load: float, compute: float, *, other: float = 0.0, gc_between: bool = False,
    epoch_eval: float = 0.0, epoch_len: int = 0, sink_s: float = 0.0, two_models: bool = False,
    use_timed: bool = False,
) -> tuple[Watch, PerformanceListener, int]:
    model = SlowNet(compute)
    peer = SlowNet(compute / 2) if two_models else None
    watch = Watch()

    def slow_sink(record: Any) -> None:  # trainperf's own time: the stopwatch takes it out of the step
        started = clock()
        time.sleep(sink_s)
        if not record.warmup:
            watch.s["own"] += clock() - started

    sinks = [slow_sink] if sink_s else []
    lst = PerformanceListener(FREQ, sinks=sinks, history=None, report_gc=True, report_hardware=False)
    attach(model, lst)
    if peer is not None:
        attach(peer, PerformanceListener(FREQ, sinks=[], history=None))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    popt = torch.optim.SGD(peer.parameters(), lr=0.01) if peer is not None else None
    per_epoch = epoch_len or steps
    done = 0
    counted = 0
    while done < steps:
        data = torch.utils.data.DataLoader(Sleepy(load, per_epoch), batch_size=None)
        source = timed(data, model) if use_timed else data
        it = iter(source)
        while True:
            t = clock()
            try:
                x, y = next(it)
            except StopIteration:
                t = watch.add("data", t) if counted else clock()
                break
            if counted:
                t = watch.add("data", t)
            if peer is not None and popt is not None:
                popt.zero_grad()
                torch.nn.functional.cross_entropy(peer(x), y).backward()
                popt.step()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if counted:
                t = watch.add("compute", t)
            done += 1
            if done == FREQ:  # the warm-up window ends here: count from now on, as the listener does
                counted = 1
            if other:
                time.sleep(other)
            if gc_between:
                g = clock()
                gc.collect()
                if counted:
                    watch.add("gc", g)
                    t = g
            if other and counted:
                watch.add("other", t)
            if done >= steps:
                break
        if epoch_eval and done < steps:
            t = clock()
            with torch.no_grad():
                model(torch.randn(BATCH, 8))
            time.sleep(epoch_eval)
            watch.add("other", t)
    lst.flush()
    watch.s["compute"] -= watch.s.pop("own")  # the sink ran inside opt.step(): not the user's step
    return watch, lst, steps - FREQ


SCENARIOS: dict[str, Callable[[int], tuple[Watch, PerformanceListener, int]]] = {
    "plain": lambda n: run_loop(n, 0.004, 0.006),
    "plain, timed()": lambda n: run_loop(n, 0.004, 0.006, use_timed=True),
    "input-bound": lambda n: run_loop(n, 0.012, 0.003),
    "logging between steps": lambda n: run_loop(n, 0.002, 0.006, other=0.004),
    "gc.collect() between steps": lambda n: run_loop(n, 0.002, 0.004, gc_between=True),
    "50 ms sink at frequency 10": lambda n: run_loop(n, 0.003, 0.006, sink_s=0.05),
    "epoch-end evaluation (0.1 s per 20 steps)": lambda n: run_loop(n, 0.002, 0.005, epoch_eval=0.1, epoch_len=20),
    "two models, a listener each": lambda n: run_loop(n, 0.003, 0.006, two_models=True),
}


def reported(lst: PerformanceListener) -> dict[str, float]:
    s = lst.summary()
    n = max(1, s.iterations)
    return {"data": s.etl_s / n, "compute": s.compute_s / n, "other": s.other_s / n, "gc": s.gc_s / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=80)
    args = parser.parse_args()
    print(f"# {platform.machine()}, {platform.python_version()}, torch {torch.__version__}, {args.steps} steps")
    print("| scenario | data ms (watch / ours) | compute ms | other ms | GC ms | worst error | verdicts |")
    print("|---|---|---|---|---|---|---|")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, scenario in SCENARIOS.items():
            watch, lst, counted = scenario(args.steps)
            ours = reported(lst)
            truth = {k: 1000.0 * v / counted for k, v in watch.s.items()}
            cells, worst = [], 0.0
            for key in ("data", "compute", "other", "gc"):
                got = 1000.0 * ours[key]
                err = abs(got - truth[key])
                # the target: within 10% or 0.5 ms, whichever is larger
                worst = max(worst, err / max(0.5, 0.1 * truth[key]))
                cells.append(f"{truth[key]:.2f} / {got:.2f}")
            verdicts = lst.summary().verdict_counts
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
            print(f"| {name} | " + " | ".join(cells) + f" | {worst:.2f} of the bound | {kinds} |")
            lst.close()


if __name__ == "__main__":
    main()
