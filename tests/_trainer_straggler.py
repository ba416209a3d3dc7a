"""One rank of a two-rank Trainer run on the CPU (gloo), started by ``torch.distributed.run``: one rank is
25 ms slower per batch in its collator (``data``, rank 1), or per step in a callback's ``on_step_end``
(``host``, rank 0). The Trainer counts the tokens of both ranks for the loss
(``average_tokens_across_devices``, its default) and, when it logs, gathers the loss of both ranks.
Each rank writes its windows to the run directory.

Arguments: run directory, output folder, optimizer steps, and optionally the gradient accumulation
steps (1), the logging steps (1000) and the fault (``data``)."""

from __future__ import annotations

import os
import sys
import time
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_transformers import Padded, tiny_model  # noqa: E402
from trainperf.transformers import PerformanceCallback  # noqa: E402

SLOW_RANK = {"data": 1, "host": 0}
DELAY_S = 0.025


class SlowStepEnd(TrainerCallback):
    """The slow rank's host work after each step (a user's callback), before the Trainer logs."""

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(DELAY_S)


def main(run_dir: str, out: str, steps: int, accumulation: int = 1, logging_steps: int = 1000,
         fault: str = "data") -> None:
    torch.set_num_threads(1)
    slow = int(os.environ["RANK"]) == SLOW_RANK[fault]

    def collate(items: list) -> dict:
        if slow and fault == "data":
            time.sleep(DELAY_S)
        return default_data_collator(items)

    args = TrainingArguments(output_dir=os.path.join(out, "out"), per_device_train_batch_size=4, max_steps=steps,
                             report_to=[], save_strategy="no", use_cpu=True, ddp_backend="gloo",
                             dataloader_num_workers=0, disable_tqdm=True, seed=7, logging_steps=logging_steps,
                             gradient_accumulation_steps=accumulation)
    assert args.average_tokens_across_devices
    callback = PerformanceCallback(5, sinks=[], report_hardware=False, verdict=False, run_dir=run_dir,
                                   cluster_every=2, cluster_timeout_s=20)
    callbacks = [callback, SlowStepEnd()] if slow and fault == "host" else [callback]
    trainer = Trainer(model=tiny_model(), args=args, train_dataset=Padded(4000 * accumulation), data_collator=collate,
                      callbacks=callbacks)
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:6]), *sys.argv[6:7])
