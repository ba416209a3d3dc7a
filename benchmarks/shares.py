"""Where the time goes, against a stopwatch in the same run: each share trainperf reports next to
the loop's own stopwatch, window by window, and the verdict of each window next to the verdict the
stopwatch's own figures get under the same rule.

Every scenario is a real loop (real sleeps, the real clock): the loader sleeps per batch, the
forward sleeps its compute, and the loop does its own work between steps where the scenario says.
The loop times each phase itself with ``time.perf_counter`` (the stopwatch) while trainperf listens
with ``attach`` or ``timed``. An iteration runs from the end of one optimizer step to the end of
the next, as trainperf counts it: work after a step belongs to the next iteration. trainperf's own
time (a slow sink run on the training thread, inside ``opt.step()``) is taken out of the stopwatch's
compute: it is not the user's loop. Lightning scenarios are compared over the whole run.

Printed: per scenario, the stopwatch's and trainperf's mean data wait / compute / other / GC per
iteration, the worst error of any window in units of the bound (10% or 0.5 ms, whichever is
larger; at most 1.00 meets it), and how many windows' verdicts agree.

Run: ``python benchmarks/shares.py [--steps N]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from trainperf import PerformanceListener
from trainperf.records._verdict import judge
from trainperf.torch import attach, timed

torch.set_num_threads(1)
BATCH = 16
FREQ = 10
PHASES = ("data", "compute", "other", "gc")
clock = time.perf_counter
_DEVNULL = open(os.devnull, "w")  # noqa: SIM115 - the benchmark's lifetime


class Watch:
    """The loop's own stopwatch: per iteration, seconds per phase."""

    def __init__(self) -> None:
        self.done: list[dict[str, float]] = []
        self.cur = dict.fromkeys((*PHASES, "own"), 0.0)

    def add(self, phase: str, started: float) -> float:
        now = clock()
        self.cur[phase] += now - started
        return now

    def step_ended(self) -> None:
        cur = self.cur
        cur["compute"] -= cur.pop("own")  # trainperf's report ran inside opt.step()
        self.done.append(cur)
        self.cur = dict.fromkeys((*PHASES, "own"), 0.0)


class Loads(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, load_s: float, n: int, shape: str) -> None:
        self.load_s, self.n, self.shape = load_s, n, shape

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        time.sleep(self.load_s)
        x, y = torch.randn(BATCH, 8), torch.randint(0, 2, (BATCH,))
        if self.shape == "dict":
            return {"x": x, "y": y}
        if self.shape == "list":  # variable-length sequences of one sample each, and their labels
            return [torch.randn(3 + (i + k) % 5) for k in range(BATCH)], y
        return x, y


class SlowNet(torch.nn.Module):
    def __init__(self, compute_s: float) -> None:
        super().__init__()
        self.compute_s = compute_s
        self.fc = torch.nn.Linear(8, 2)

    def forward(self, x: Any) -> torch.Tensor:
        time.sleep(self.compute_s)
        if isinstance(x, list):  # a list of sequences: pool each
            x = torch.stack([torch.nn.functional.pad(s[:8], (0, max(0, 8 - len(s)))) for s in x])
        return self.fc(x)


def run_loop(
    steps: int, load: float, compute: float, *, other: float = 0.0, gc_between: bool = False,
    epoch_eval: float = 0.0, epoch_len: int = 0, sink_s: float = 0.0, two_models: bool = False,
    use_timed: bool = False, shape: str = "pair", validate_every: int = 0, print_loss: bool = False,
    run_dir: str | None = None,
) -> tuple[Watch, PerformanceListener]:
    watch = Watch()

    training = threading.get_ident()

    def slow_sink(record: Any) -> None:
        started = clock()
        time.sleep(sink_s)
        if threading.get_ident() == training:  # on the writer thread it takes nothing from the loop
            watch.cur["own"] += clock() - started

    model = SlowNet(compute)
    peer = SlowNet(compute / 2) if two_models else None
    lst = PerformanceListener(FREQ, sinks=[slow_sink] if sink_s else [], history=None, report_gc=True,
                              report_hardware=False, run_dir=run_dir)
    attach(model, lst)
    if peer is not None:
        attach(peer, PerformanceListener(FREQ, sinks=[], history=None))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    popt = torch.optim.SGD(peer.parameters(), lr=0.01) if peer is not None else None
    per_epoch = epoch_len or steps
    done = 0
    while done < steps:
        data = torch.utils.data.DataLoader(
            Loads(load, per_epoch, shape), batch_size=None, collate_fn=None if shape != "list" else lambda b: b
        )
        source = timed(data, model) if use_timed else data
        t = clock()
        it = iter(source)
        t = watch.add("data", t)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                watch.add("data", t)
                break
            t = watch.add("data", t)
            x, y = (batch["x"], batch["y"]) if shape == "dict" else batch
            if peer is not None and popt is not None:
                popt.zero_grad()
                torch.nn.functional.cross_entropy(peer(x), y).backward()
                popt.step()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            watch.add("compute", t)
            watch.step_ended()
            done += 1
            t = clock()
            if other:
                time.sleep(other)
            if print_loss:
                print(f"loss {loss.item():.3f}", file=_DEVNULL)  # reads the loss, as print() does
            if validate_every and done % validate_every == 0:
                with torch.no_grad():
                    for _ in range(5):
                        model(torch.randn(BATCH, 8))
            t = watch.add("other", t)
            if gc_between:
                t = _collect(watch, t)
            if done >= steps:
                break
        if epoch_eval and done < steps:
            t = clock()
            with torch.no_grad():
                model(torch.randn(BATCH, 8))
            time.sleep(epoch_eval)
            watch.add("other", t)
    lst.flush()
    return watch, lst


def _collect(watch: Watch, t: float) -> float:
    started = clock()
    gc.collect()
    return watch.add("gc", started)


def _windows(watch: Watch) -> list[dict[str, float]]:
    """The stopwatch's complete windows after the warm-up one, per-iteration means in seconds."""
    out = []
    for start in range(FREQ, len(watch.done) - FREQ + 1, FREQ):
        chunk = watch.done[start:start + FREQ]
        out.append({k: sum(it[k] for it in chunk) / FREQ for k in PHASES})
    return out


LOOPS: dict[str, Callable[[int], tuple[Watch, PerformanceListener]]] = {
    "plain": lambda n: run_loop(n, 0.004, 0.006),
    "plain, timed()": lambda n: run_loop(n, 0.004, 0.006, use_timed=True),
    "input-bound": lambda n: run_loop(n, 0.012, 0.003),
    "dict batches": lambda n: run_loop(n, 0.003, 0.006, shape="dict"),
    "list of variable-length sequences": lambda n: run_loop(n, 0.003, 0.006, shape="list"),
    "logging between steps": lambda n: run_loop(n, 0.002, 0.006, other=0.004),
    "logging between steps, timed()": lambda n: run_loop(n, 0.002, 0.006, other=0.004, use_timed=True),
    "print(loss.item()) every step": lambda n: run_loop(n, 0.002, 0.006, print_loss=True),
    "validation every 5 steps": lambda n: run_loop(n, 0.002, 0.006, validate_every=5),
    "gc.collect() between steps": lambda n: run_loop(n, 0.002, 0.004, gc_between=True),
    "50 ms sink at frequency 10": lambda n: run_loop(n, 0.003, 0.006, sink_s=0.05),
    "50 ms sink and a run directory": lambda n: run_loop(n, 0.003, 0.006, sink_s=0.05, run_dir=_tmp()),
    "epoch-end evaluation (0.1 s per 20 steps)": lambda n: run_loop(n, 0.002, 0.005, epoch_eval=0.1, epoch_len=20),
    "epoch-end evaluation, timed()": lambda n: run_loop(
        n, 0.002, 0.005, epoch_eval=0.1, epoch_len=20, use_timed=True
    ),
    "two models, a listener each": lambda n: run_loop(n, 0.003, 0.006, two_models=True),
}


def _tmp() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="trainperf-shares-")


def compare_loop(watch: Watch, lst: PerformanceListener) -> tuple[dict[str, float], dict[str, float], float, int, int]:
    records = [r for r in lst.history if not r.warmup and r.window_iterations == FREQ]
    truth_windows = _windows(watch)
    n = min(len(records), len(truth_windows))
    worst, agree, previous = 0.0, 0, None
    for record, truth in zip(records[:n], truth_windows[:n], strict=True):
        ours = {"data": record.etl_ms, "compute": record.compute_ms, "other": record.other_ms,
                "gc": (record.gc_total_ms or 0.0) / FREQ}
        for key in PHASES:
            t_ms = 1000.0 * truth[key]
            worst = max(worst, abs(ours[key] - t_ms) / max(0.5, 0.1 * t_ms))
        window_s = FREQ * sum(truth.values())
        expected = judge(window_s, FREQ * truth["data"], FREQ * truth["gc"], FREQ * truth["other"],
                         iterations=FREQ, previous=previous).kind
        previous = expected
        agree += expected == record.verdict.kind
    mean_truth = {k: 1000.0 * sum(w[k] for w in truth_windows[:n]) / max(1, n) for k in PHASES}
    mean_ours = {
        "data": sum(r.etl_ms for r in records[:n]) / max(1, n),
        "compute": sum(r.compute_ms for r in records[:n]) / max(1, n),
        "other": sum(r.other_ms for r in records[:n]) / max(1, n),
        "gc": sum((r.gc_total_ms or 0.0) / FREQ for r in records[:n]) / max(1, n),
    }
    return mean_truth, mean_ours, worst, agree, n


def lightning_run(kind: str, steps: int) -> tuple[dict[str, float], dict[str, float], float, str]:
    """A Lightning fit with on_train_epoch_end work or validation every few steps, compared over the
    whole run: data wait (the loads' stopwatch), other time (the hook's and the validation's
    stopwatches) and compute (what the fit's wall time leaves, the warm-up window taken out)."""
    try:
        import pytorch_lightning as pl
    except ImportError:
        return {}, {}, 0.0, "Lightning not installed"
    from trainperf.lightning import PerformanceCallback

    loads: list[float] = []
    epoch_end: list[float] = []
    validation: list[float] = []

    class Data(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 20

        def __getitem__(self, i: int) -> Any:
            started = clock()
            time.sleep(0.003)
            out = torch.randn(BATCH, 8), torch.randint(0, 2, (BATCH,))
            loads.append(clock() - started)
            return out

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 2)

        def training_step(self, batch: Any, i: int) -> torch.Tensor:
            time.sleep(0.006)
            return torch.nn.functional.cross_entropy(self.fc(batch[0]), batch[1])

        def validation_step(self, batch: Any, i: int) -> None:
            time.sleep(0.01)

        def on_train_epoch_end(self) -> None:
            if kind == "epoch-end":
                started = clock()
                time.sleep(0.1)
                epoch_end.append(clock() - started)

        def on_validation_start(self) -> None:
            self._val_started = clock()

        def on_validation_end(self) -> None:
            validation.append(clock() - self._val_started)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    callback = PerformanceCallback(FREQ, sinks=[], history=None, report_hardware=False)
    loader = torch.utils.data.DataLoader(Data(), batch_size=None)
    extra: dict[str, Any] = {"limit_val_batches": 0}
    if kind == "validation":
        extra = {"val_check_interval": 5, "limit_val_batches": 3, "num_sanity_val_steps": 0}
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, callbacks=[callback], **extra)
    trainer.fit(Module(), loader, loader if kind == "validation" else None)
    records = [r for r in callback.history if not r.warmup]
    iterations = sum(r.window_iterations for r in records)
    ours = {
        "data": sum(r.etl_ms * r.window_iterations for r in records) / iterations,
        "compute": sum(r.compute_ms * r.window_iterations for r in records) / iterations,
        "other": sum(r.other_ms * r.window_iterations for r in records) / iterations,
    }
    # the windows after the warm-up hold loads FREQ+1.. (Lightning prefetches one batch ahead)
    # validation every 5 steps is other time of the step after it: the one after step FREQ is the first
    # after the warm-up, the one after the last step is in no window
    in_windows = validation[FREQ // 5: (FREQ + iterations) // 5 - 1] if kind == "validation" else []
    truth = {"data": 1000.0 * sum(loads[FREQ + 1:FREQ + 1 + iterations]) / iterations,
             "other": 1000.0 * (sum(epoch_end[: max(0, (FREQ + iterations) // 20 - 1)]) + sum(in_windows)) / iterations}
    wall_ms = sum(r.iteration_ms * r.window_iterations for r in records) / iterations
    truth["compute"] = wall_ms - truth["data"] - truth["other"]
    worst = max(abs(ours[k] - truth[k]) / max(0.5, 0.1 * truth[k]) for k in ("data", "other"))
    verdicts = ", ".join(sorted({r.verdict.kind for r in records}))
    return truth, ours, worst, verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    args = parser.parse_args()
    print(f"# {platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}, "
          f"{args.steps} steps, windows of {FREQ}")
    print("| loop | data ms (watch / ours) | compute ms | other ms | GC ms | worst window error | verdicts agree |")
    print("|---|---|---|---|---|---|---|")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, loop in LOOPS.items():
            watch, lst = loop(args.steps)
            truth, ours, worst, agree, n = compare_loop(watch, lst)
            cells = " | ".join(f"{truth[k]:.2f} / {ours[k]:.2f}" for k in PHASES)
            print(f"| {name} | {cells} | {worst:.2f} | {agree} of {n} |", flush=True)
            lst.close()
        for kind in ("epoch-end", "validation"):
            truth, ours, worst, verdicts = lightning_run(kind, args.steps)
            if not truth:
                print(f"| Lightning, {kind} | {verdicts} |")
                continue
            cells = " | ".join(f"{truth[k]:.2f} / {ours[k]:.2f}" for k in ("data", "compute", "other"))
            print(f"| Lightning, {kind} (whole run) | {cells} | | {worst:.2f} (data, other) | {verdicts} |",
                  flush=True)


if __name__ == "__main__":
    main()
