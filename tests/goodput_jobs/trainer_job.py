"""A Hugging Face ``Trainer`` with ``trainperf.transformers.PerformanceCallback``: one attempt of the
goodput job (see ``tests/test_goodput_jobs.py``). Under ``torch.distributed.run``, one of its ranks."""

from __future__ import annotations

import os
import time

import _child as job
from _child import WATCH


def main() -> None:
    job.start_up()
    import torch
    import transformers

    from trainperf.transformers import PerformanceCallback

    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    first = job.RESUME_AT if job.attempt() > 1 else 0
    output = os.path.join(job.work_dir(), "trainer")

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

        def forward(self, x, labels=None):
            out = self.net(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Collate:
        """Stacks a batch; the batches of the iterations in SLOW take SLOW_S more (counted per process)."""

        def __init__(self) -> None:
            self.fetched = first

        def __call__(self, items):
            self.fetched += 1
            if self.fetched in job.SLOW:
                time.sleep(job.SLOW_S)
            return {"x": torch.stack([i["x"] for i in items]), "labels": torch.stack([i["labels"] for i in items])}

    class TimedFetches:
        def __init__(self, inner) -> None:
            self.inner = inner

        def __iter__(self):
            return self

        def __next__(self):
            began = time.time()
            try:
                return next(self.inner)
            finally:
                WATCH.add("fetch", began, time.time())

    class Timed(transformers.Trainer):
        def get_batch_samples(self, epoch_iterator, *args, **kwargs):
            # the stopwatch times each batch's fetch from the loader, not the Trainer's work around it
            return super().get_batch_samples(TimedFetches(epoch_iterator), *args, **kwargs)

        def evaluate(self, *args, **kwargs):
            began = time.time()
            time.sleep(job.EVAL_S)
            WATCH.add("eval", began, time.time())
            return {}

        def _save_checkpoint(self, *args, **kwargs):
            began = time.time()
            time.sleep(job.SAVE_S)
            try:
                return super()._save_checkpoint(*args, **kwargs)
            finally:
                WATCH.add("save", began, time.time())

        def _load_from_checkpoint(self, *args, **kwargs):
            began = time.time()
            time.sleep(job.LOAD_S)
            try:
                return super()._load_from_checkpoint(*args, **kwargs)
            finally:
                WATCH.add("load", began, time.time())

    class Watch(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            WATCH.mark("train_start")

        def on_step_end(self, args, state, control, **kwargs):
            if job.attempt() == 1 and state.global_step == job.KILL_AT:
                performance.listener.flush()  # the window of this iteration reached the file
                job.kill_self(rank)

    torch.manual_seed(0)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    data = [{"x": torch.randn(32), "labels": torch.randn(1)} for _ in range(8 * 400 * world)]
    args = transformers.TrainingArguments(
        output_dir=output, max_steps=job.LAST, per_device_train_batch_size=8, learning_rate=0.01,
        save_strategy="steps", save_steps=job.SAVE_EVERY, eval_strategy="steps", eval_steps=job.EVAL_EVERY,
        logging_strategy="no", report_to=[], use_cpu=True, dataloader_num_workers=0, ignore_data_skip=True,
        disable_tqdm=True, save_only_model=False)
    performance = PerformanceCallback(job.FREQUENCY, sinks=[], run_dir=job.run_dir(), log_to_trainer=False)
    trainer = Timed(model=Model(), args=args, train_dataset=data, eval_dataset=data[:8], data_collator=Collate(),
                    callbacks=[performance, Watch()])
    trainer.train(resume_from_checkpoint=os.path.join(output, f"checkpoint-{first}") if first else None)
    performance.close()
    WATCH.mark("end")
    WATCH.write(rank)


if __name__ == "__main__":
    main()
