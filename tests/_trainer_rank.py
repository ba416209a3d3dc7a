"""One rank of a two-rank Trainer run on the CPU (gloo), started by ``torch.distributed.run``: each rank
writes its windows to the run directory, and the real tokens of every micro-batch its model saw."""

from __future__ import annotations

import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import Trainer, TrainingArguments  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_transformers import Padded, seen_tokens, tiny_model  # noqa: E402
from trainperf.transformers import PerformanceCallback  # noqa: E402


def main(run_dir: str, out: str) -> None:
    model = tiny_model()
    seen = seen_tokens(model)
    args = TrainingArguments(output_dir=os.path.join(out, "out"), per_device_train_batch_size=4, max_steps=8,
                             gradient_accumulation_steps=2, logging_steps=100, report_to=[], save_strategy="no",
                             use_cpu=True, ddp_backend="gloo", dataloader_num_workers=0, disable_tqdm=True, seed=7)
    callback = PerformanceCallback(4, sinks=[], report_hardware=False, run_dir=run_dir)
    trainer = Trainer(model=model, args=args, train_dataset=Padded(400, delay=0.002), callbacks=[callback])
    trainer.train()
    rank = int(os.environ["RANK"])
    with open(os.path.join(out, f"seen-{rank}.json"), "w") as f:
        json.dump({"seen": seen, "tokens": [r.tokens for r in callback.listener.history],
                   "ranks": [r.rank for r in callback.listener.history],
                   "flops": [r.flops_per_step for r in callback.listener.history]}, f)
    torch.distributed.barrier()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
