"""One rank of a two-rank Trainer run on the CPU (gloo), started by ``torch.distributed.run``: rank 1's
collator takes 25 ms longer per batch; the Trainer counts the tokens of both ranks for the loss
(``average_tokens_across_devices``, its default). Each rank writes its windows to the run directory."""

from __future__ import annotations

import os
import sys
import time
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import Trainer, TrainingArguments, default_data_collator  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_transformers import Padded, tiny_model  # noqa: E402
from trainperf.transformers import PerformanceCallback  # noqa: E402

SLOW_RANK, DELAY_S = 1, 0.025


def main(run_dir: str, out: str, steps: int) -> None:
    torch.set_num_threads(1)
    slow = int(os.environ["RANK"]) == SLOW_RANK

    def collate(items: list) -> dict:
        if slow:
            time.sleep(DELAY_S)
        return default_data_collator(items)

    args = TrainingArguments(output_dir=os.path.join(out, "out"), per_device_train_batch_size=4, max_steps=steps,
                             report_to=[], save_strategy="no", use_cpu=True, ddp_backend="gloo",
                             dataloader_num_workers=0, disable_tqdm=True, seed=7, logging_steps=1000)
    assert args.average_tokens_across_devices
    callback = PerformanceCallback(5, sinks=[], report_hardware=False, verdict=False, run_dir=run_dir,
                                   cluster_every=2, cluster_timeout_s=20)
    trainer = Trainer(model=tiny_model(), args=args, train_dataset=Padded(4000), data_collator=collate,
                      callbacks=[callback])
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
