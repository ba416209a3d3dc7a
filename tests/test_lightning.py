from __future__ import annotations

import csv
import statistics
import time
import warnings

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")
L = pytest.importorskip("lightning.pytorch")

from trainperf import SinkError  # noqa: E402
from trainperf.lightning import PerformanceCallback  # noqa: E402

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*GPU available but not used.*")


class SleepyDataset(torch.utils.data.Dataset):
    """Sleeps ``delay`` per batch and keeps a stopwatch of each load (what the machine really took)."""

    def __init__(self, n=30, batch=8, delay=0.0):
        self.n, self.batch, self.delay = n, batch, delay
        self.loads = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        started = time.perf_counter()
        if self.delay:
            time.sleep(self.delay)
        g = torch.Generator().manual_seed(i)
        out = torch.randn(self.batch, 16, generator=g), torch.randint(0, 4, (self.batch,), generator=g)
        self.loads.append(time.perf_counter() - started)
        return out


def module_class(base, val_sleep=0.0):
    class Model(base):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 4)
            self.losses = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.fc(x), y)
            self.losses.append(loss.item())
            return loss

        def validation_step(self, batch, batch_idx):
            time.sleep(val_sleep)
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self.fc(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model


def loader(**kw):
    return torch.utils.data.DataLoader(SleepyDataset(**kw), batch_size=None)


def trainer(package, callback, tmp_path, **kw):
    kw.setdefault("max_epochs", 1)
    kw.setdefault("logger", False)
    return package.Trainer(
        callbacks=[callback], enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        default_root_dir=tmp_path, accelerator="cpu", devices=1, **kw,
    )


def test_callback_subclasses_the_callback_of_both_package_names():
    callback = PerformanceCallback(10)
    assert isinstance(callback, pl.Callback) and isinstance(callback, L.Callback)


@pytest.mark.realtime
def test_data_wait_of_a_20ms_loader_reads_20ms_and_loggers_get_the_metrics(tmp_path):
    callback = PerformanceCallback(5, report_score=True, report_gc=True, sinks=[])
    logger = pl.loggers.CSVLogger(tmp_path, name="run")
    data = loader(n=25, delay=0.020)
    model = module_class(pl.LightningModule)()
    trainer(pl, callback, tmp_path, logger=logger, max_epochs=2).fit(model, data)
    recs = [r for r in callback.history if not r.warmup]
    assert [r.iteration for r in callback.history] == [5, 10, 15, 20, 25, 30, 35, 40, 45, 50]
    mean = statistics.mean(r.etl_ms for r in recs)
    truth = 1000.0 * statistics.mean(data.dataset.loads[5:])  # the loads' own stopwatch, after the warm-up
    assert truth * 0.98 <= mean <= truth * 1.10, (truth, [r.etl_ms for r in recs])
    assert [r.score for r in recs] == pytest.approx([model.losses[r.iteration - 1] for r in recs])  # the last loss
    assert [r.epoch for r in callback.history][-1] == 1
    with open(logger.log_dir + "/metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row.get("trainperf/etl_ms")]
    assert [int(r["step"]) for r in rows] == [4, 9, 14, 19, 24, 29, 34, 39, 44, 49]  # Lightning's logging step
    assert statistics.mean(float(r["trainperf/etl_ms"]) for r in rows[1:]) == pytest.approx(mean)


def test_works_with_the_lightning_package_name_and_accumulation(tmp_path):
    callback = PerformanceCallback(2, sinks=[])
    trainer(L, callback, tmp_path, accumulate_grad_batches=3).fit(
        module_class(L.LightningModule)(), loader(n=12, batch=8)
    )
    assert [(r.iteration, r.samples, r.batches) for r in callback.history] == [(2, 48, 6), (4, 48, 6)]


@pytest.mark.realtime
def test_validation_time_is_other_time_and_eval_ms_not_data_wait(tmp_path):
    """A 200 ms validation pass after every 4th step: in the other time of the window after it, and
    its ``eval_ms``; never data wait; the window's parts still add up."""
    callback = PerformanceCallback(4, sinks=[])
    trainer(pl, callback, tmp_path, val_check_interval=4, limit_val_batches=2, num_sanity_val_steps=0).fit(
        module_class(pl.LightningModule, val_sleep=0.1)(), loader(n=16), loader(n=4)
    )
    recs = list(callback.history)
    assert len(recs) == 4
    assert "eval_ms" not in recs[0].extra  # the sanity check is off, and no validation came before step 4
    for r in recs[1:]:
        assert r.etl_max_ms < 50, r
        eval_s = r.extra["eval_ms"] * r.window_iterations / 1000.0
        assert 0.2 <= eval_s <= r.other_ms * r.window_iterations / 1000.0 + 1e-9, r
        total = r.etl_ms + r.compute_ms + r.other_ms + (r.gc_total_ms or 0.0) / r.window_iterations
        assert total == pytest.approx(r.iteration_ms, rel=1e-6)


@pytest.mark.realtime
def test_checkpoint_saving_is_other_time_and_checkpoint_ms(tmp_path):
    callback = PerformanceCallback(2, sinks=[])
    t = trainer(pl, callback, tmp_path, max_steps=8)
    original = t.save_checkpoint

    def slow_save(*args, **kwargs):
        time.sleep(0.2)
        return original(*args, **kwargs)

    t.save_checkpoint = slow_save
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)
    t.callbacks.append(checkpoint)
    t.fit(module_class(pl.LightningModule)(), loader(n=8))
    assert len(list(tmp_path.glob("*.ckpt"))) == 4
    assert t.save_checkpoint is slow_save  # the user's own attribute is back after the fit
    for r in list(callback.history)[1:]:  # each window after the first holds one save, after its first step
        saved_s = r.extra["checkpoint_ms"] * r.window_iterations / 1000.0
        assert r.etl_max_ms < 100 and 0.2 <= saved_s <= r.other_ms * r.window_iterations / 1000.0 + 1e-9, r


def test_callback_is_reusable_and_closes_its_listener(tmp_path):
    import gc

    before = len(gc.callbacks)
    callback = PerformanceCallback(2, sinks=[], report_gc=True)
    for _ in range(2):
        trainer(pl, callback, tmp_path, max_steps=4).fit(module_class(pl.LightningModule)(), loader(n=4))
        assert [r.iteration for r in callback.history] == [2, 4]
        assert callback.listener.closed
    assert len(gc.callbacks) == before


@pytest.mark.parametrize("package", [pl, L], ids=["pytorch_lightning", "lightning.pytorch"])
def test_every_fit_of_one_callback_reaches_the_users_sinks_and_close_closes_them(tmp_path, package):
    """Three fits (a validate and a test between them) on one callback: every record of every fit is
    in every user sink; a fit's end leaves the sinks open; the callback's close() closes them."""
    import json

    from trainperf import MemorySink
    from trainperf.sinks import CsvSink, JsonLinesSink

    memory = MemorySink()
    jsonl = JsonLinesSink(tmp_path / "perf.jsonl")
    table = CsvSink(tmp_path / "perf.csv")
    closed: list[str] = []

    class Closing:
        def __call__(self, record):
            pass

        def close(self):
            closed.append("closed")

    callback = PerformanceCallback(2, sinks=[memory, jsonl, table, Closing()])
    with warnings.catch_warnings():
        warnings.simplefilter("error", category=SinkError)  # a sink used after it was closed fails
        for fit in range(3):
            run = trainer(package, callback, tmp_path, max_steps=4, limit_val_batches=1, limit_test_batches=1)
            model = module_class(package.LightningModule)()
            run.fit(model, loader(n=4))
            assert callback.listener.closed and not jsonl.closed and closed == []
            run.validate(model, loader(n=2), verbose=False)
            if fit == 1:
                model.test_step = model.validation_step
                run.test(model, loader(n=2), verbose=False)
    iterations = [2, 4] * 3
    assert [r.iteration for r in memory.records] == iterations
    lines = (tmp_path / "perf.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == iterations
    with open(tmp_path / "perf.csv", newline="") as f:
        assert [int(row["iteration"]) for row in csv.DictReader(f)] == iterations
    callback.close()
    assert jsonl.closed and table.closed and closed == ["closed"]
    callback.close()  # idempotent
    assert closed == ["closed"]


def test_sinks_given_to_a_callback_are_closed_when_it_is_collected(tmp_path):
    import gc

    from trainperf.sinks import JsonLinesSink

    jsonl = JsonLinesSink(tmp_path / "perf.jsonl")
    callback = PerformanceCallback(2, sinks=[jsonl])
    trainer(pl, callback, tmp_path, max_steps=2).fit(module_class(pl.LightningModule)(), loader(n=2))
    assert not jsonl.closed
    del callback
    gc.collect()
    assert jsonl.closed


class ClockedDataset(torch.utils.data.Dataset):
    """Each batch advances a fake clock by ``load_s``."""

    def __init__(self, clock, load_s, batch, n=40):
        self.clock, self.load_s, self.batch, self.n = clock, load_s, batch, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.clock.advance(self.load_s)
        return torch.randn(self.batch, 16), torch.randint(0, 4, (self.batch,))


def test_combined_loader_counts_the_samples_of_every_loader(tmp_path, clock):
    """Two loaders zipped into each batch (8 + 4 rows): 12 samples per iteration, timed by the fake clock."""

    class TwoLoaders(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            clock.advance(0.005)
            return sum(torch.nn.functional.cross_entropy(self.fc(x), y) for x, y in batch.values())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return {
                name: torch.utils.data.DataLoader(ClockedDataset(clock, 0.005, size), batch_size=None)
                for name, size in (("a", 8), ("b", 4))
            }

    callback = PerformanceCallback(10, sinks=[], clock=clock, verdict=False)
    trainer(pl, callback, tmp_path).fit(TwoLoaders())
    records = list(callback.history)
    assert [r.samples for r in records] == [120] * 4
    for r in records[1:]:
        assert r.samples_per_sec == pytest.approx(12 / 0.015, rel=0.1)


def test_manual_optimization_with_two_optimizers_is_one_iteration_per_batch(tmp_path):
    class Gan(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.gen, self.disc = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            x, y = batch
            opt_g, opt_d = self.optimizers()
            for opt, make_loss in ((opt_d, lambda: self.disc(x)), (opt_g, lambda: self.disc(self.gen(x)))):
                opt.zero_grad()
                self.manual_backward(torch.nn.functional.cross_entropy(make_loss(), y))
                opt.step()

        def configure_optimizers(self):
            return torch.optim.SGD(self.gen.parameters(), lr=0.1), torch.optim.SGD(self.disc.parameters(), lr=0.1)

    callback = PerformanceCallback(4, sinks=[])
    t = trainer(pl, callback, tmp_path)
    t.fit(Gan(), loader(n=12, batch=8))
    assert t.global_step == 24  # Lightning counts optimizer steps
    records = [(r.iteration, r.samples, r.optimizer_steps) for r in callback.history]
    assert records == [(4, 32, 8), (8, 32, 8), (12, 32, 8)]


def test_logger_rows_are_shared_with_the_modules_metrics_and_continue_after_resume(tmp_path):
    class Logged(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.fc(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def fit(max_steps, ckpt_path=None):
        logger = pl.loggers.CSVLogger(tmp_path, name="run", version=0)
        callback = PerformanceCallback(5, sinks=[])
        t = pl.Trainer(callbacks=[callback], logger=logger, max_steps=max_steps, log_every_n_steps=1,
                       enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                       accelerator="cpu", devices=1, enable_checkpointing=False)
        t.fit(Logged(), loader(n=40), ckpt_path=ckpt_path)
        fit.records = callback.listener.history.records
        return t, logger

    t, logger = fit(10)
    t.save_checkpoint(tmp_path / "ten.ckpt")
    with open(logger.log_dir + "/metrics.csv") as f:
        rows = list(csv.DictReader(f))
    ours = [r for r in rows if r.get("trainperf/etl_ms")]
    assert [int(r["step"]) for r in ours] == [4, 9]
    assert all(r["epoch"] == "0" for r in ours)
    module_steps = {int(r["step"]) for r in rows if r.get("train_loss")}
    assert {4, 9} <= module_steps  # the module's loss of the same batches is logged at the same steps
    _, logger = fit(20, ckpt_path=tmp_path / "ten.ckpt")
    with open(logger.log_dir + "/metrics.csv") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f) if r.get("trainperf/etl_ms")]
    assert steps == [14, 19]  # after the checkpoint's step 10, not from 0 again
    assert [r.iteration for r in fit.records] == [15, 20]  # the records count on from the checkpoint's step too


def test_callback_on_a_device_timeline_never_waits_while_fitting(tmp_path):
    """A fake device stands in for CUDA: a begin event per batch, an end per step, records for the
    iterations they cover once the device is done, and one wait, at the end of the fit."""
    from fake_device import FakeDevice, FakeTimeline, RealClock

    device = FakeDevice(RealClock(), max_ahead_s=1.0)
    timeline = FakeTimeline(device)

    class DeviceModel(module_class(L.LightningModule)):
        def training_step(self, batch, batch_idx):
            device.launch(0.003)
            return super().training_step(batch, batch_idx)

    callback = PerformanceCallback(5, sinks=[], report_hardware=False, verdict=False,
                                   timeline_factory=lambda dev: timeline)
    trainer(L, callback, tmp_path, max_steps=20).fit(DeviceModel(), loader(n=20))
    assert timeline.calls["begin"] == 20 and timeline.calls["end"] == 20
    assert timeline.calls["wait"] <= 1
    records = list(callback.history)
    assert [(r.first_iteration, r.iteration) for r in records] == [(1, 5), (6, 10), (11, 15), (16, 20)]
    assert all(r.device_idle_ms is not None and r.speedup_if_data_free is not None for r in records)
    assert all(r.iteration_ms >= 2.9 for r in records[1:])


@pytest.mark.realtime
def test_work_in_on_train_epoch_end_is_other_time_not_compute(tmp_path):
    """Time spent in on_train_epoch_end (measured with a stopwatch in the hook) is other host time; the
    shares add up to the iteration time in every window."""
    spent: list[float] = []

    class EpochEnd(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            started = time.perf_counter()
            time.sleep(0.15)
            spent.append(time.perf_counter() - started)

    callback = PerformanceCallback(4, sinks=[], history=None)
    t = trainer(pl, callback, tmp_path, max_epochs=3)
    t.callbacks.append(EpochEnd())
    t.fit(module_class(pl.LightningModule)(), loader(n=8))
    records = list(callback.history)
    other_s = sum(r.other_ms * r.window_iterations for r in records) / 1000.0
    # the two epoch ends that fall between steps (the last one is after the final step)
    assert other_s >= 0.95 * sum(spent[:2])
    assert other_s <= sum(spent[:2]) + 0.05 * len(records)
    for r in records:
        total = r.etl_ms + r.compute_ms + r.other_ms + (r.gc_total_ms or 0.0) / r.window_iterations
        assert total == pytest.approx(r.iteration_ms, rel=1e-6)


@pytest.mark.realtime
def test_starting_non_persistent_workers_each_epoch_is_data_wait(tmp_path):
    """A DataLoader whose workers restart every epoch: the time its iter() takes (timed here by a
    stopwatch in the loader itself) is in the data wait of the iteration after it."""

    class StopwatchLoader(torch.utils.data.DataLoader):
        def __iter__(self):
            started = time.perf_counter()
            iterator = super().__iter__()
            self.iter_s.append(time.perf_counter() - started)
            return iterator

    data = StopwatchLoader(SleepyDataset(n=10), batch_size=None, num_workers=1, persistent_workers=False)
    data.iter_s = []
    callback = PerformanceCallback(5, sinks=[], history=None)
    trainer(pl, callback, tmp_path, max_epochs=3).fit(module_class(pl.LightningModule)(), data)
    records = [r for r in callback.history if not r.warmup]
    starts = data.iter_s[1:]  # epochs 2 and 3 start inside windows after the warm-up
    assert len(starts) == 2 and min(starts) > 0.005  # starting a worker takes milliseconds
    edge_windows = [r for r in records if r.first_iteration in (11, 21)]
    assert len(edge_windows) == 2
    for window, started in zip(edge_windows, starts, strict=True):
        assert window.etl_total_ms >= 0.9 * 1000.0 * started, (window.etl_total_ms, started)


@pytest.mark.realtime
def test_a_callbacks_8ms_of_batch_end_work_is_other_time_listed_before_or_after(tmp_path):
    """A user callback busy for 8 ms in on_train_batch_end (its own stopwatch keeps what it took):
    listed before or after ours, its work is in other time (all of it, after the first step), and
    other time less that work is the same either way within what a busy machine allows."""

    class Busy(pl.Callback):
        def __init__(self):
            self.spent = []

        def on_train_batch_end(self, *args):
            started = time.perf_counter()
            while time.perf_counter() - started < 0.008:
                pass
            self.spent.append(time.perf_counter() - started)

    rest = {}
    for first in (True, False):
        busy, callback = Busy(), PerformanceCallback(10, sinks=[], history=None)
        t = trainer(pl, callback, tmp_path, max_steps=40)
        t.callbacks.insert(t.callbacks.index(callback) + (0 if first else 1), busy)
        t.fit(module_class(pl.LightningModule)(), loader(n=40))
        records = [r for r in callback.history if not r.warmup]
        other_s = sum(r.other_ms * r.window_iterations for r in records) / 1000.0
        work_s = sum(busy.spent[9:39])  # steps 11-40 (after the warm-up) hold the work after steps 10-39
        assert other_s >= 0.98 * work_s, (first, other_s, work_s)
        rest[first] = (other_s - work_s) / 30 * 1000.0  # ms per iteration that is not the callback's
    assert abs(rest[True] - rest[False]) < 1.5, rest
