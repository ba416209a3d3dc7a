"""The same small Lightning fit with no callback, with a no-op callback that has the same two batch
hooks, with ``PerformanceCallback`` and with Lightning's ``ThroughputMonitor``, in alternating rounds
of one run. Ours must cost at most 5 us per step more than the no-op callback, and no more than
ThroughputMonitor.

Each round fits every variant twice, a short and a long fit; the cost of a step is the difference
of their times over the difference of their steps, so what a fit costs once (building the
trainer, setting callbacks up, tearing down) is measured apart and does not blur the figure.
The median over rounds is reported.

Run: ``python benchmarks/lightning_overhead.py [--steps N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ThroughputMonitor

from trainperf.lightning import PerformanceCallback

warnings.filterwarnings("ignore")
for _name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning"):
    logging.getLogger(_name).setLevel(logging.ERROR)
torch.set_num_threads(1)


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(32, 4)

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        return torch.nn.functional.cross_entropy(self.fc(x), y)

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.01)


class NoOp(pl.Callback):
    """The two batch hooks PerformanceCallback uses, doing nothing: what any such callback costs."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):  # type: ignore[no-untyped-def]
        pass

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):  # type: ignore[no-untyped-def]
        pass


def fit(variant: str, steps: int) -> float:
    data = [(torch.randn(16, 32), torch.randint(0, 4, (16,))) for _ in range(steps)]
    callbacks = {
        "none": [],
        "no-op callback": [NoOp()],
        "PerformanceCallback(10)": [PerformanceCallback(10)],
        "PerformanceCallback+gc+score": [PerformanceCallback(10, sinks=[], report_gc=True, report_score=True)],
        "ThroughputMonitor": [ThroughputMonitor(batch_size_fn=lambda b: b[0].shape[0], window_size=10)],
    }[variant]
    trainer = pl.Trainer(
        max_epochs=1, callbacks=callbacks, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, accelerator="cpu", devices=1,
    )
    model = Tiny()
    started = time.perf_counter()
    trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=None))
    return (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="steps of the long fit (the short one has a sixth)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    short, long = args.steps // 6, args.steps
    variants = ["none", "no-op callback", "PerformanceCallback(10)", "PerformanceCallback+gc+score",
                "ThroughputMonitor"]
    # The default LoggingSink's lines go where the application's logging sends them: a file here.
    root = logging.getLogger()
    root.addHandler(logging.FileHandler(tempfile.mkdtemp() + "/train.log"))
    root.setLevel(logging.INFO)
    per_step: dict[str, list[float]] = {v: [] for v in variants}
    once: dict[str, list[float]] = {v: [] for v in variants}
    fit("none", 20)  # warm-up
    for _ in range(args.rounds):
        for v in variants:
            t_short, t_long = fit(v, short) * short, fit(v, long) * long
            step = (t_long - t_short) / (long - short)
            per_step[v].append(step)
            once[v].append(t_short - step * short)
    step_us = {v: 1e6 * statistics.median(t) for v, t in per_step.items()}
    once_ms = {v: 1e3 * statistics.median(t) for v, t in once.items()}
    print(f"fits of {short} and {long} steps, {args.rounds} alternating rounds, medians:")
    for v in variants:
        extra = "" if v == "none" else f"  ({step_us[v] - step_us['none']:+.1f} us per step over no callback)"
        print(f"  {v:<30} {step_us[v]:8.1f} us per step, {once_ms[v]:6.1f} ms per fit{extra}")
    print(f"PerformanceCallback(10) over the no-op callback: "
          f"{step_us['PerformanceCallback(10)'] - step_us['no-op callback']:+.1f} us per step")


if __name__ == "__main__":
    main()
