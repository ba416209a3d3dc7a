"""A LightningModule trained with ``trainperf.lightning.PerformanceCallback``: one attempt of the goodput
job (see ``tests/test_goodput_jobs.py``). With ``GPJOB_WORLD`` 2, Lightning's DDP on CPU: Lightning
runs this script again for rank 1, so it stays importable and does everything under ``__main__``."""

from __future__ import annotations

import os
import time

import _child as job
from _child import WATCH


def main() -> None:
    job.start_up()
    job.stamp_launches()  # rank 1, when Lightning starts it, is told when
    import pytorch_lightning as pl
    import torch

    from trainperf.lightning import PerformanceCallback

    torch.set_num_threads(1)
    world = int(os.environ.get("GPJOB_WORLD", "1"))
    first = job.RESUME_AT if job.attempt() > 1 else 0
    checkpoints = os.path.join(job.work_dir(), "checkpoints")

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            time.sleep(job.EVAL_S)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self):
            return job.loader(job.SlowBatches(first, 400))

        def val_dataloader(self):
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(1, 32)), batch_size=1)

        def on_save_checkpoint(self, checkpoint) -> None:
            time.sleep(job.SAVE_S)

        def on_load_checkpoint(self, checkpoint) -> None:
            began = time.time()
            time.sleep(job.LOAD_S)
            WATCH.add("load", began, time.time())

    class TimedCheckpoint(pl.callbacks.ModelCheckpoint):
        def _save_checkpoint(self, trainer, filepath) -> None:
            began = time.time()
            super()._save_checkpoint(trainer, filepath)
            WATCH.add("save", began, time.time())

    class Watch(pl.Callback):
        def on_validation_start(self, trainer, pl_module) -> None:
            self.began = time.time()

        def on_validation_end(self, trainer, pl_module) -> None:
            WATCH.add("eval", self.began, time.time())

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if job.attempt() == 1 and trainer.global_step == job.KILL_AT:
                performance.listener.flush()  # the window of this iteration reached the file
                job.kill_self(trainer.global_rank)

    performance = PerformanceCallback(job.FREQUENCY, sinks=[], run_dir=job.run_dir(), log_to_loggers=False)
    saver = TimedCheckpoint(dirpath=checkpoints, filename="{step}", every_n_train_steps=job.SAVE_EVERY,
                            save_top_k=-1)
    trainer = pl.Trainer(accelerator="cpu", devices=world, strategy="ddp" if world > 1 else "auto",
                         max_steps=job.LAST, val_check_interval=job.EVAL_EVERY, check_val_every_n_epoch=None,
                         limit_val_batches=1, num_sanity_val_steps=0, use_distributed_sampler=False,
                         enable_progress_bar=False, logger=False, enable_model_summary=False,
                         callbacks=[performance, saver, Watch()])
    resume = os.path.join(checkpoints, f"step={first}.ckpt") if first else None
    trainer.fit(Model(), ckpt_path=resume)
    performance.close()
    WATCH.mark("end")
    WATCH.write(trainer.global_rank)


if __name__ == "__main__":
    main()
