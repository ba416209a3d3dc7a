"""What the Trainer callback costs per optimizer step: the same tiny GPT-2 ``Trainer`` run bare, with
``PerformanceCallback(10)`` (no sinks, and with the default logging sink), and with the Trainer's own
``include_num_input_tokens_seen="non_padding"``, in alternating rounds of one run.

Each round trains every variant twice, a short and a long run; the cost of a step is the difference
of their times over the difference of their steps, so building the Trainer and tearing down are
measured apart. The median over rounds is reported, and each variant's extra time per step over the
bare Trainer.

Run: ``python benchmarks/trainer_overhead.py [--steps N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging

from trainperf.transformers import PerformanceCallback

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()
torch.set_num_threads(1)
VOCAB, LENGTH = 256, 32


class Padded(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.items = []
        for i in range(n):
            k = 1 + (i * 7) % LENGTH
            ids = torch.randint(1, VOCAB, (LENGTH,), generator=torch.Generator().manual_seed(i))
            mask = (torch.arange(LENGTH) < k).long()
            self.items.append({"input_ids": ids * mask, "attention_mask": mask,
                               "labels": torch.where(mask.bool(), ids, -100)})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.items[i]


def run(variant: str, steps: int, data: Padded, folder: str) -> float:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2))
    callbacks = {
        "bare": [],
        "PerformanceCallback(10), no sinks": [PerformanceCallback(10, sinks=[], report_hardware=False)],
        "PerformanceCallback(10)": [PerformanceCallback(10)],
        "include_num_input_tokens_seen": [],
    }[variant]
    args = TrainingArguments(
        output_dir=folder, per_device_train_batch_size=8, max_steps=steps, logging_steps=50, report_to=[],
        save_strategy="no", use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
        include_num_input_tokens_seen="non_padding" if variant == "include_num_input_tokens_seen" else "no",
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
    began = time.perf_counter()
    trainer.train()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps of the long run (the short one has a sixth)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    short, long = args.steps // 6, args.steps
    data = Padded(8 * long)
    logging.getLogger().addHandler(logging.FileHandler(tempfile.mkdtemp() + "/train.log"))
    logging.getLogger().setLevel(logging.INFO)
    variants = ["bare", "PerformanceCallback(10), no sinks", "PerformanceCallback(10)", "include_num_input_tokens_seen"]
    per_step: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as folder:
        run("bare", 10, data, folder)  # warm-up
        for _ in range(args.rounds):
            for v in variants:
                t_short, t_long = run(v, short, data, folder), run(v, long, data, folder)
                per_step[v].append((t_long - t_short) / (long - short))
    step_us = {v: 1e6 * statistics.median(t) for v, t in per_step.items()}
    print(f"Trainer runs of {short} and {long} steps, {args.rounds} alternating rounds, medians:")
    for v in variants:
        extra = "" if v == "bare" else f"  ({step_us[v] - step_us['bare']:+.1f} us per step over bare)"
        print(f"  {v:<36} {step_us[v]:8.1f} us per step{extra}")


if __name__ == "__main__":
    main()
