"""The Lightning callback's split of each iteration into data wait, compute and other host time, on a
fake clock: the loader, the training step and the user's hooks each cost a known time, so every
figure is exact. Expected values are worked out by hand from Lightning's order of calls: a loader
with a length is fetched as each step needs it; one without is fetched a batch ahead (an epoch's
``iter()`` and first fetch come before its first step, and each step's ``next()`` fetches the batch
after the one it runs, finding the loader empty at the epoch's last step)."""

from __future__ import annotations

import warnings

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from clocked import ClockedData  # noqa: E402
from trainperf.lightning import PerformanceCallback  # noqa: E402

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*GPU available but not used.*")

LOAD, STEP = 0.005, 0.007  # seconds per batch fetched, per training step


@pytest.fixture
def early_clock():
    """A fake clock that starts near 0, where a quotient or remainder of two readings is far from
    their difference (the ``clock`` fixture starts at 100 s)."""
    from conftest import FakeClock

    return FakeClock(start=0.001)


class Costly(pl.LightningModule):
    """A training step costs ``STEP`` on the fake clock; validation batches ``val_s`` each."""

    def __init__(self, clock, val_s: float = 0.0) -> None:
        super().__init__()
        self.clock, self.val_s = clock, val_s
        self.fc = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        self.clock.advance(STEP)
        x, y = batch
        return torch.nn.functional.cross_entropy(self.fc(x), y)

    def validation_step(self, batch, batch_idx):
        self.clock.advance(self.val_s)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Spends(pl.Callback):
    """Spends ``seconds`` of fake time in the named hook."""

    def __init__(self, clock, hook: str, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds
        setattr(self, hook, self._spend)

    def _spend(self, *args, **kwargs) -> None:
        self.clock.advance(self.seconds)


class ClockedStream(torch.utils.data.IterableDataset):
    """``n`` batches, each costing ``LOAD`` on the fake clock; no length, so Lightning fetches ahead."""

    def __init__(self, clock, n: int) -> None:
        self.clock, self.n = clock, n

    def __iter__(self):
        for _ in range(self.n):
            self.clock.advance(LOAD)
            yield torch.ones(8, 4), torch.zeros(8, dtype=torch.long)


class SlowStart(torch.utils.data.DataLoader):
    """A loader whose iter() costs 20 ms on the fake clock, as starting workers does."""

    def __init__(self, clock, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.clock = clock

    def _get_iterator(self):  # inside DataLoader.__iter__, where workers start
        self.clock.advance(0.020)
        return super()._get_iterator()


def fit(clock, tmp_path, callbacks, n=8, module=None, val=None, stream=False, **trainer_kw):
    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False)
    trainer_kw.setdefault("max_epochs", 2)
    trainer = pl.Trainer(callbacks=[callback, *callbacks], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu", devices=1, num_sanity_val_steps=0, **trainer_kw)
    data = torch.utils.data.DataLoader(ClockedStream(clock, n) if stream else ClockedData(clock, LOAD, n),
                                       batch_size=None)
    trainer.fit(module or Costly(clock), data, val)
    return callback, trainer


def split(record) -> tuple[float, float, float, float]:
    """A window's mean data wait, compute, other and iteration time, in ms, rounded to 1 us."""
    return tuple(round(v, 3) for v in (record.etl_ms, record.compute_ms, record.other_ms, record.iteration_ms))


def test_a_sized_loaders_fetch_is_the_data_wait_of_the_step_it_feeds(tmp_path, clock):
    """8 batches, 2 epochs, windows of 4: every step waits 5 ms for its batch and computes 7 ms."""
    callback, _ = fit(clock, tmp_path, [])
    records = list(callback.history)
    assert [(r.first_iteration, r.iteration, r.epoch) for r in records] == [(1, 4, 0), (5, 8, 0), (9, 12, 1),
                                                                            (13, 16, 1)]
    assert [split(r) for r in records] == [(5.0, 7.0, 0.0, 12.0)] * 4
    assert [r.samples for r in records] == [32] * 4


def test_a_loader_fetched_ahead_puts_each_epochs_first_fetches_and_empty_last_fetch_in_the_right_steps(
        tmp_path, clock):
    """No length: an epoch's first step waits for its iter(), the first batch and the batch after
    (10 ms); steps 2-7 fetch one batch ahead (5 ms); the eighth finds the loader empty (0 ms).
    Window of steps 1-4: (10 + 5 + 5 + 5) / 4 = 6.25 ms of data wait; steps 5-8: 15 / 4 = 3.75 ms."""
    callback, _ = fit(clock, tmp_path, [], stream=True)
    records = list(callback.history)
    assert [(r.first_iteration, r.iteration, r.epoch) for r in records] == [(1, 4, 0), (5, 8, 0), (9, 12, 1),
                                                                            (13, 16, 1)]
    assert [split(r) for r in records] == [(6.25, 7.0, 0.0, 13.25), (3.75, 7.0, 0.0, 10.75)] * 2


def test_starting_each_epochs_iterator_is_data_wait_of_its_first_step_the_first_epochs_too(tmp_path, clock):
    """A loader whose iter() costs 20 ms (as starting workers does). Lightning makes the first epoch's
    iterator before ``on_train_start``: the first window starts there, so both epochs' first windows
    read (20 + 4 x 5) / 4 = 10 ms of data wait."""

    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False)
    trainer = pl.Trainer(callbacks=[callback], logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path, accelerator="cpu", devices=1,
                         max_epochs=2)
    trainer.fit(Costly(clock), SlowStart(clock, ClockedData(clock, LOAD, 8), batch_size=None))
    assert [split(r) for r in callback.history] == [(10.0, 7.0, 0.0, 17.0), (5.0, 7.0, 0.0, 12.0)] * 2


def test_work_at_an_epochs_edge_is_other_time_of_the_next_epochs_first_step(tmp_path, early_clock):
    """30 ms in on_train_epoch_end and 11 ms in on_train_epoch_start: the first window of epoch 1
    holds both (41 / 4 = 10.25 ms of other per step); epoch 0's start is in the first window (11 / 4),
    the last epoch's end is after the last step of the run."""
    callback, _ = fit(early_clock, tmp_path, [Spends(early_clock, "on_train_epoch_end", 0.030),
                                        Spends(early_clock, "on_train_epoch_start", 0.011)])
    assert [split(r) for r in callback.history] == [(5.0, 7.0, 2.75, 14.75), (5.0, 7.0, 0.0, 12.0),
                                                    (5.0, 7.0, 10.25, 22.25), (5.0, 7.0, 0.0, 12.0)]


def test_work_between_steps_in_batch_hooks_is_compute_or_other_by_where_it_runs(tmp_path, clock):
    """on_train_batch_start runs after the callback's (ours is first in the list): 2 ms of compute per
    step. on_train_batch_end runs after ours too, so its 3 ms are other time of the next step: 3 of
    them in the first window (9 / 4 ms), 4 in the second, and the last step's is after every window."""
    callback, _ = fit(clock, tmp_path, [Spends(clock, "on_train_batch_start", 0.002),
                                        Spends(clock, "on_train_batch_end", 0.003)], max_epochs=1)
    assert [split(r) for r in callback.history] == [(5.0, 9.0, 2.25, 16.25), (5.0, 9.0, 3.0, 17.0)]


def test_with_accumulation_every_micro_batchs_fetch_is_data_wait_of_its_step(tmp_path, clock):
    """Two micro-batches per optimizer step, windows of 4 steps, 16 batches (8 steps). Each step waits
    5 ms before its first micro-batch and 5 ms between them (data wait, though inside the step); its
    two training steps are 14 ms of compute."""
    callback, _ = fit(clock, tmp_path, [], n=16, max_epochs=1, accumulate_grad_batches=2)
    records = list(callback.history)
    assert [(r.iteration, r.batches, r.samples) for r in records] == [(4, 8, 64), (8, 8, 64)]
    assert [split(r) for r in records] == [(10.0, 14.0, 0.0, 24.0)] * 2


def test_accumulation_over_a_loader_fetched_ahead(tmp_path, clock):
    """As above without a length: step 1 waits 10 ms before its first micro-batch (iter() and two
    fetches) and 5 ms between them; the last step's second fetch finds the loader empty.
    Steps 1-4: (15 + 10 + 10 + 10) / 4 ms of data wait; steps 5-8: (10 + 10 + 10 + 5) / 4."""
    callback, _ = fit(clock, tmp_path, [], n=16, max_epochs=1, accumulate_grad_batches=2, stream=True)
    assert [split(r) for r in callback.history] == [(11.25, 14.0, 0.0, 25.25), (8.75, 14.0, 0.0, 22.75)]


def test_validation_inside_an_epoch_is_other_time_of_the_next_step_and_its_own_figure(tmp_path, clock):
    """Validation after every 4 training batches: 2 batches of 5 ms to load and 50 ms each to run
    (110 ms). The one after step 4 is other time of step 5 (110 / 4 ms in the second window), and
    reported as ``eval_ms`` there; the one after the last step is in no iteration."""
    val = torch.utils.data.DataLoader(ClockedData(clock, LOAD, 2), batch_size=None)
    callback, _ = fit(clock, tmp_path, [], module=Costly(clock, val_s=0.050), val=val, val_check_interval=4,
                      max_epochs=1)
    records = list(callback.history)
    assert [split(r) for r in records] == [(5.0, 7.0, 0.0, 12.0), (5.0, 7.0, 27.5, 39.5)]
    assert [r.extra.get("eval_ms") for r in records] == [None, pytest.approx(27.5)]


def test_a_checkpoint_saved_between_steps_is_other_time_and_its_own_figure(tmp_path, clock):
    """A callback saves a checkpoint after every step; writing it costs 40 ms (in on_save_checkpoint):
    other time of the next step, and ``checkpoint_ms``. Steps 1-3's checkpoints are in the first
    window (120 / 4 ms), steps 4-7's in the second (160 / 4 ms); the last step's is in no iteration."""

    class Saves(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            trainer.save_checkpoint(tmp_path / "last.ckpt")

        def on_save_checkpoint(self, *args):
            clock.advance(0.040)

    callback, trainer = fit(clock, tmp_path, [Saves()], max_epochs=1)
    assert (tmp_path / "last.ckpt").exists()
    records = list(callback.history)
    assert [split(r) for r in records] == [(5.0, 7.0, 30.0, 42.0), (5.0, 7.0, 40.0, 52.0)]
    assert [r.extra["checkpoint_ms"] for r in records] == pytest.approx([30.0, 40.0])
    assert "save_checkpoint" not in trainer.__dict__  # the wrapper is gone after the fit


def test_validate_and_test_stages_leave_the_listener_alone(tmp_path, clock):
    """Only ``fit`` opens and closes the listener: a ``validate`` before it neither closes the listener
    nor records anything, and the fit after it reports as usual."""
    module = Costly(clock)
    val = torch.utils.data.DataLoader(ClockedData(clock, LOAD, 2), batch_size=None)
    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False)
    trainer = pl.Trainer(callbacks=[callback], logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path, accelerator="cpu", devices=1,
                         max_epochs=1)
    listener = callback.listener
    trainer.validate(module, val, verbose=False)
    assert callback.listener is listener and not listener.closed and not list(listener.history)
    # a loader whose iter() costs 20 ms: told once, not once more per stage that came before
    trainer.fit(module, SlowStart(clock, ClockedData(clock, LOAD, 8), batch_size=None))
    assert [split(r) for r in callback.history] == [(10.0, 7.0, 0.0, 17.0), (5.0, 7.0, 0.0, 12.0)]
    assert not any("eval_ms" in r.extra for r in callback.history)  # the validate stage is no fit's
    assert listener.closed


def test_a_validate_that_fails_leaves_the_callback_ready_for_a_fit(tmp_path, clock):
    class Broken(Costly):
        def validation_step(self, batch, batch_idx):
            raise RuntimeError("bad validation")

    module = Broken(clock)
    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False)
    trainer = pl.Trainer(callbacks=[callback], logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path, accelerator="cpu", devices=1,
                         max_epochs=1)
    listener = callback.listener
    with pytest.raises(RuntimeError, match="bad validation"):
        trainer.validate(module, torch.utils.data.DataLoader(ClockedData(clock, LOAD, 2), batch_size=None),
                         verbose=False)
    assert callback.listener is listener and not listener.closed
    trainer.fit(module, torch.utils.data.DataLoader(ClockedData(clock, LOAD, 8), batch_size=None))
    assert [split(r) for r in callback.history] == [(5.0, 7.0, 0.0, 12.0)] * 2


def test_the_score_is_the_loss_of_the_windows_last_step_when_asked(tmp_path, clock):
    losses: list[float] = []

    class Keeps(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, *args):
            losses.append(float(outputs["loss"]))

    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_score=True)
    trainer = pl.Trainer(callbacks=[callback, Keeps()], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu", devices=1, max_epochs=1)
    trainer.fit(Costly(clock), torch.utils.data.DataLoader(ClockedData(clock, LOAD, 8), batch_size=None))
    assert [r.score for r in callback.history] == pytest.approx([losses[3], losses[7]])


def test_a_plain_iterable_of_batches_trains_with_no_loader_to_time(tmp_path, clock):
    """Lightning takes any iterable: with no DataLoader there is no fetch before training, and the
    first window starts at on_train_start; the iterable's next() costs nothing."""

    class Batches:
        def __iter__(self):
            for _ in range(8):
                clock.advance(0.003)  # read through Lightning's fetcher: no DataLoader hook sees it
                yield torch.ones(8, 4), torch.zeros(8, dtype=torch.long)

    batches = Batches()
    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False)
    trainer = pl.Trainer(callbacks=[callback, Spends(clock, "on_train_epoch_start", 0.002)], logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                         default_root_dir=tmp_path, accelerator="cpu", devices=1, max_epochs=1)
    trainer.fit(Costly(clock), batches)
    # no length: fetched a batch ahead; the first fetch, made before training began and seen by no
    # DataLoader hook, is in no window: steps 1-4 fetch batches 1-4, steps 5-7 the rest, step 8 none
    assert [split(r) for r in callback.history] == [(3.0, 7.0, 0.5, 10.5), (2.25, 7.0, 0.0, 9.25)]
    epoch_loop = trainer.fit_loop.epoch_loop  # the fit's wrappers are gone
    assert "_on_before_fetch" not in vars(epoch_loop) and "_on_after_fetch" not in vars(epoch_loop)
    assert "save_checkpoint" not in vars(trainer)


def test_validation_and_batch_end_work_are_both_other_time_and_only_validation_is_eval(tmp_path, early_clock):
    """3 ms of on_train_batch_end work, then validation (2 batches: 5 ms to load, 50 ms to run each)
    after every 4th step: the second window's other time holds four hooks' 12 ms and the 110 ms
    validation ((12 + 110) / 4 ms), its ``eval_ms`` the validation alone."""
    val = torch.utils.data.DataLoader(ClockedData(early_clock, LOAD, 2), batch_size=None)
    callback, _ = fit(early_clock, tmp_path, [Spends(early_clock, "on_train_batch_end", 0.003)],
                      module=Costly(early_clock, val_s=0.050), val=val, val_check_interval=4, max_epochs=1)
    records = list(callback.history)
    assert [split(r) for r in records] == [(5.0, 7.0, 2.25, 14.25), (5.0, 7.0, 30.5, 42.5)]
    assert [r.extra.get("eval_ms") for r in records] == [None, pytest.approx(27.5)]


def test_a_single_device_fit_has_no_rank_and_tells_the_listener_its_cpu_threads(tmp_path, clock, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    callback, _ = fit(clock, tmp_path, [], max_epochs=1)
    assert [r.rank for r in callback.history] == [None, None]
    assert callback.listener._readings.step_threads == torch.get_num_threads()  # for the cpu-contention verdict


def test_time_in_lightnings_own_collective_between_steps_is_a_wait_not_other_time(clock):
    """Lightning 2.5+ broadcasts between steps whether rank 0 got SIGTERM; the callback times it
    (waiting for a late rank 0 there is not host work: the collective timer gets it) and unwraps it
    after the fit."""
    from types import SimpleNamespace

    from trainperf.core._accountant import StepAccountant

    calls: list[int] = []

    class EpochLoop:
        def _broadcast_sigterm_tensor(self):
            clock.advance(0.004)
            calls.append(1)
            return "sent"

    loop = EpochLoop()
    trainer = SimpleNamespace(fit_loop=SimpleNamespace(epoch_loop=loop))
    callback = PerformanceCallback(4, sinks=[], clock=clock)
    recorded: list[tuple] = []
    waits: list[float] = []
    clock.now = 0.003  # near 0: a remainder or quotient of two readings is far from their difference
    callback._account = StepAccountant(lambda *args: recorded.append(args), at=0.001, add_wait=waits.append)
    callback._wrap_loop_collective(trainer)
    assert loop._broadcast_sigterm_tensor() == "sent" and loop._broadcast_sigterm_tensor() == "sent"
    # each as it happens: the wait of the step's all-reduce that follows holds both
    assert waits == [pytest.approx(0.004, abs=1e-12)] * 2 and len(calls) == 2
    callback._account.begin(clock.now + 0.001)  # 3 ms of the loop's own work around 8 ms of broadcasts
    callback._account.end(clock.now + 0.005)
    assert recorded[0][5] == pytest.approx(0.003, abs=1e-12)  # other: 0.001 -> 0.012, less the 8 ms
    callback._setup.undo()  # the wrappers undone (and the listener closed)
    assert "_broadcast_sigterm_tensor" not in vars(loop)
    callback.listener.close()


def test_an_unknown_option_is_named():
    with pytest.raises(TypeError, match="unexpected keyword argument 'alpha'"):
        PerformanceCallback(1, zeta=1, alpha=2)
    assert PerformanceCallback().listener.frequency == 1


@pytest.mark.parametrize("hook", ["on_fit_start", "training_step"])
def test_a_fit_that_fails_raises_the_users_error_and_undoes_everything(tmp_path, clock, hook):
    """The listener is closed (the iterations before the failure reported), the loader hooks are gone
    and the trainer's and loop's wrappers too."""
    from trainperf.torch import _loop_hooks

    def fail(*args):
        raise RuntimeError("the user's own error")

    broken = Costly(clock)
    setattr(broken, hook, fail)
    callback = PerformanceCallback(4, sinks=[], clock=clock)
    trainer = pl.Trainer(callbacks=[callback], logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path, accelerator="cpu", devices=1,
                         max_epochs=1)
    with pytest.raises(RuntimeError, match="the user's own error"):
        trainer.fit(broken, torch.utils.data.DataLoader(ClockedData(clock, LOAD, 8), batch_size=None))
    assert callback.listener.closed and not _loop_hooks._observers
    assert "save_checkpoint" not in vars(trainer) and "_on_before_fetch" not in vars(trainer.fit_loop.epoch_loop)


@pytest.mark.parametrize("as_list", [False, True], ids=["a dict of loaders", "a list of loaders"])
def test_three_loaders_zipped_count_the_samples_of_all_three(tmp_path, clock, as_list):
    class Three(Costly):
        def training_step(self, batch, batch_idx):
            self.clock.advance(STEP)
            parts = batch if as_list else list(batch.values())
            return sum(torch.nn.functional.cross_entropy(self.fc(x), y) for x, y in parts)

    def part(rows):
        return [(torch.ones(rows, 4), torch.zeros(rows, dtype=torch.long)) for _ in range(8)]

    loaders = [torch.utils.data.DataLoader(part(rows), batch_size=None) for rows in (8, 4, 2)]
    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False)
    trainer = pl.Trainer(callbacks=[callback], logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path, accelerator="cpu", devices=1,
                         max_epochs=1)
    trainer.fit(Three(clock), loaders if as_list else dict(zip("abc", loaders, strict=True)))
    assert [r.samples for r in callback.history] == [4 * 14, 4 * 14]


def test_with_log_to_loggers_off_the_trainers_loggers_get_nothing_of_ours(tmp_path, clock):
    logged: list[dict] = []

    class Logger(pl.loggers.Logger):
        name, version = "memory", 0

        def log_metrics(self, metrics, step=None):
            logged.append(dict(metrics))

        def log_hyperparams(self, *args, **kwargs):
            return None

    callback = PerformanceCallback(4, sinks=[], clock=clock, log_to_loggers=False)
    trainer = pl.Trainer(callbacks=[callback], logger=Logger(), log_every_n_steps=1, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu", devices=1, max_epochs=1)
    trainer.fit(Costly(clock), torch.utils.data.DataLoader(ClockedData(clock, LOAD, 8), batch_size=None))
    assert len(callback.history) == 2
    assert not any(key.startswith("trainperf/") for metrics in logged for key in metrics)


def test_a_step_with_one_micro_batch_of_unknown_size_has_unknown_samples(tmp_path, clock):
    """Micro-batches of 8 rows, every other one with targets of another length (its size cannot be
    known): each optimizer step's samples are unknown, not counted from the known half."""

    class AnyShape(Costly):
        def training_step(self, batch, batch_idx):
            self.clock.advance(STEP)
            return self.fc(batch[0]).sum()

    batches = [(torch.ones(8, 4), torch.zeros(8 if i % 2 == 0 else 5)) for i in range(8)]
    callback = PerformanceCallback(2, sinks=[], clock=clock, verdict=False)
    trainer = pl.Trainer(callbacks=[callback], logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path, accelerator="cpu", devices=1,
                         max_epochs=1, accumulate_grad_batches=2)
    with pytest.warns(RuntimeWarning, match="could not find the batch size"):
        trainer.fit(AnyShape(clock), torch.utils.data.DataLoader(batches, batch_size=None))
    assert [(r.iteration, r.batches, r.samples) for r in callback.history] == [(2, 4, None), (4, 4, None)]



@pytest.mark.parametrize("package_name", ["pytorch_lightning", "lightning.pytorch"])
@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_users_batch_end_work_is_other_time_whether_listed_before_or_after_the_callback(
        tmp_path, clock, package_name, accumulate):
    """8 ms of work in a user's on_train_batch_end: the step ends at the optimizer step itself, so
    wherever the user's callback is listed its work is other time of the next step (after every
    micro-batch but the last with accumulation: then it is inside the step). Steps 2-8 each hold one
    (or ``accumulate``) of them; the first window holds three steps' worth."""
    package = pytest.importorskip(package_name)

    class Module(package.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            clock.advance(STEP)
            return torch.nn.functional.cross_entropy(self.fc(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Work(package.Callback):
        def on_train_batch_end(self, *args) -> None:
            clock.advance(0.008)

    def run(first: bool) -> list[tuple[float, ...]]:
        work = Work()
        callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False)
        trainer = package.Trainer(callbacks=[work, callback] if first else [callback, work], logger=False,
                                  enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                                  default_root_dir=tmp_path, accelerator="cpu", devices=1, max_epochs=1,
                                  accumulate_grad_batches=accumulate)
        trainer.fit(Module(), torch.utils.data.DataLoader(ClockedData(clock, LOAD, 8 * accumulate),
                                                               batch_size=None))
        return [split(r) for r in callback.history]

    k = accumulate
    etl, step = 5.0 * k, 7.0 * k + 8.0 * (k - 1)  # the micro-batches' own batch-end work is inside the step
    expected = [(etl, step, 6.0, etl + step + 6.0), (etl, step, 8.0, etl + step + 8.0)]
    assert run(first=True) == run(first=False) == expected


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_callback_listed_before_ours_moves_no_time_between_the_step_and_other(tmp_path, clock, accumulate):
    """2 ms of work in a user's on_train_batch_start and 3 ms in its on_train_batch_end: the callback
    goes first among the trainer's callbacks, so the split is the same with the user's callback listed
    before it or after it. Per step: the first micro-batch's batch-start work is the step's (as it is
    when listed after), and each micro-batch's batch-end work but the last is inside the step too."""

    def run(first: bool) -> list[tuple[float, ...]]:
        work = [Spends(clock, "on_train_batch_start", 0.002), Spends(clock, "on_train_batch_end", 0.003)]
        callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False)
        trainer = pl.Trainer(callbacks=[*work, callback] if first else [callback, *work], logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                             default_root_dir=tmp_path, accelerator="cpu", devices=1, max_epochs=1,
                             accumulate_grad_batches=accumulate)
        trainer.fit(Costly(clock), torch.utils.data.DataLoader(ClockedData(clock, LOAD, 8 * accumulate),
                                                               batch_size=None))
        assert trainer.callbacks[0] is callback
        return [split(r) for r in callback.history]

    k = accumulate
    etl, step = 5.0 * k, (7.0 + 2.0) * k + 3.0 * (k - 1)
    # the last micro-batch's batch-end work is other time of the next step: three of them in the first window
    expected = [(etl, step, 2.25, etl + step + 2.25), (etl, step, 3.0, etl + step + 3.0)]
    assert run(first=True) == run(first=False) == expected


def test_validation_and_checkpoints_count_in_their_windows_and_the_parts_add_up(tmp_path, early_clock):
    """Validation every 3 steps (one 5 ms batch, run for 20 ms) and ``ModelCheckpoint`` every 2 steps
    (writing costs 30 ms), 12 steps in windows of 4: each window's other time is its share of both,
    ``eval_ms`` and ``checkpoint_ms`` are present where they happened, and the parts add up."""
    clock = early_clock

    class Writes(pl.Callback):
        def on_save_checkpoint(self, *args):
            clock.advance(0.030)

    val = torch.utils.data.DataLoader(ClockedData(clock, LOAD, 1), batch_size=None)
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)
    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False)
    trainer = pl.Trainer(callbacks=[callback, Writes(), checkpoint], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu", devices=1,
                         max_epochs=1, num_sanity_val_steps=0, val_check_interval=3)
    trainer.fit(Costly(clock, val_s=0.020), torch.utils.data.DataLoader(ClockedData(clock, LOAD, 12), batch_size=None),
                val)
    records = list(callback.history)
    # validation after steps 3, 6, 9 (and 12: after the last); checkpoints after steps 2, 4, ..., 10 (12: after)
    # window 1 (steps 1-4) holds validation 3 and checkpoint 2; window 2 (5-8) validation 6, checkpoints 4, 6;
    # window 3 (9-12) validation 9, checkpoints 8, 10
    assert [r.extra.get("eval_ms") for r in records] == pytest.approx([25.0 / 4] * 3)
    assert [r.extra.get("checkpoint_ms") for r in records] == pytest.approx([30.0 / 4, 60.0 / 4, 60.0 / 4])
    assert [round(r.other_ms, 3) for r in records] == [13.75, 21.25, 21.25]
    for r in records:
        assert (round(r.etl_ms, 3), round(r.compute_ms, 3)) == (5.0, 7.0)
        total = r.etl_ms + r.compute_ms + r.other_ms + (r.gc_total_ms or 0.0) / r.window_iterations
        assert total == pytest.approx(r.iteration_ms, rel=1e-9)


class Manual(Costly):
    """Manual optimization: one step per batch, optionally with a loss that is infinite at given steps."""

    def __init__(self, clock, inf_at=(), **kw) -> None:
        super().__init__(clock, **kw)
        self.automatic_optimization = False
        self.inf_at, self.losses = set(inf_at), []

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        self.clock.advance(STEP)
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.fc(x), y) * (float("inf") if batch_idx in self.inf_at else 1.0)
        self.losses.append(float(loss))
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return loss


@pytest.mark.parametrize("first", [True, False], ids=["user callback first", "user callback last"])
def test_manual_optimization_ends_the_iteration_where_training_step_returns(tmp_path, clock, first):
    """An iteration is a training batch; what follows its training_step (a user's 3 ms of
    on_train_batch_end, wherever it is listed) is other time of the next batch."""
    work = Spends(clock, "on_train_batch_end", 0.003)
    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False, report_score=True)
    trainer = pl.Trainer(callbacks=[work, callback] if first else [callback, work], logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                         default_root_dir=tmp_path, accelerator="cpu", devices=1, max_epochs=1)
    module = Manual(clock)
    trainer.fit(module, torch.utils.data.DataLoader(ClockedData(clock, LOAD, 8), batch_size=None))
    records = list(callback.history)
    assert [split(r) for r in records] == [(5.0, 7.0, 2.25, 14.25), (5.0, 7.0, 3.0, 15.0)]
    assert [r.optimizer_steps for r in records] == [4, 4]
    assert [r.score for r in records] == pytest.approx([module.losses[3], module.losses[7]])
    assert "training_step" not in vars(module)  # unwrapped after the fit


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
@pytest.mark.parametrize("manual", [False, True], ids=["automatic", "manual"])
def test_mixed_precision_keeps_the_split_the_score_and_counts_a_step_the_scaler_skipped(
        tmp_path, clock, precision, manual):
    """With 16-mixed (its plugin made for the CPU, where the Trainer's flag would mean bf16) the loss
    of step 3 is infinite: the GradScaler skips that optimizer step (no step hook runs), and the
    iteration still ends where the step would have, counted as skipped. The score is the loss
    itself, not the scaled one the scaler hands to backward."""
    from pytorch_lightning.plugins.precision import MixedPrecision

    scaled = precision == "16-mixed"
    inf_at = {2} if scaled else set()
    if manual:
        module = Manual(clock, inf_at=inf_at)
    else:
        class Automatic(Costly):
            losses: list[float] = []

            def training_step(self, batch, batch_idx):
                loss = super().training_step(batch, batch_idx) * (float("inf") if batch_idx in inf_at else 1.0)
                self.losses.append(float(loss))
                return loss

        module = Automatic(clock)
    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False, report_score=True)
    how = {"plugins": [MixedPrecision("16-mixed", "cpu")]} if scaled else {"precision": precision}
    trainer = pl.Trainer(callbacks=[callback], logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path, accelerator="cpu", devices=1,
                         max_epochs=1, **how)
    trainer.fit(module, torch.utils.data.DataLoader(ClockedData(clock, LOAD, 8), batch_size=None))
    assert str(trainer.precision) == precision
    records = list(callback.history)
    assert [split(r) for r in records] == [(5.0, 7.0, 0.0, 12.0)] * 2
    assert [r.optimizer_steps for r in records] == [4, 4]
    assert [r.skipped_steps for r in records] == ([1, 0] if scaled else [0, 0])
    assert [r.score for r in records] == pytest.approx([module.losses[3], module.losses[7]], rel=1e-3)


def test_an_optimizer_whose_step_calls_its_base_classs_step_ends_the_iteration_once_at_the_outer_end(
        tmp_path, clock):
    """torch runs the step hooks once per class level; the iteration ends after the outer step, so
    the 2 ms it spends after its base class's step are compute, not other time."""

    class Outer(torch.optim.SGD):
        def step(self, closure=None):
            out = super().step(closure)
            clock.advance(0.002)
            return out

    class Module(Costly):
        def configure_optimizers(self):
            return Outer(self.parameters(), lr=0.1)

    work = Spends(clock, "on_train_batch_end", 0.003)
    callback = PerformanceCallback(4, sinks=[], clock=clock, verdict=False, report_hardware=False)
    trainer = pl.Trainer(callbacks=[work, callback], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu", devices=1, max_epochs=1)
    trainer.fit(Module(clock), torch.utils.data.DataLoader(ClockedData(clock, LOAD, 8), batch_size=None))
    records = list(callback.history)
    assert [split(r) for r in records] == [(5.0, 9.0, 2.25, 16.25), (5.0, 9.0, 3.0, 17.0)]
    assert [r.optimizer_steps for r in records] == [4, 4]
