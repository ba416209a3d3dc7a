"""Lightning's checkpoints as named spans: saves as ``checkpoint``, a fit resumed with ``ckpt_path=``
counting its iterations on from the checkpoint's step, its restore as ``checkpoint_load`` against a
stopwatch on the same restore, and a ``trainperf.span`` in a training step out of the step's time."""

from __future__ import annotations

import time
import warnings

import pytest

pl = pytest.importorskip("pytorch_lightning")
L = pytest.importorskip("lightning.pytorch")

import trainperf  # noqa: E402
from test_lightning import loader, module_class, trainer  # noqa: E402
from trainperf.lightning import PerformanceCallback  # noqa: E402

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*GPU available but not used.*")

LOAD_S, SAVE_S = 0.25, 0.05


def slow_checkpoints(base):
    """A module whose checkpoint hooks take ``SAVE_S`` to save and ``LOAD_S`` to restore."""

    class Slow(module_class(base)):
        def on_save_checkpoint(self, checkpoint):
            time.sleep(SAVE_S)

        def on_load_checkpoint(self, checkpoint):
            time.sleep(LOAD_S)

    return Slow


def stopwatch(owner, name: str, spent: list[float]) -> None:
    """Time ``owner.name`` on the instance (ours wraps this one): the save or restore as the machine took it."""
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            if name != "_restore_modules_and_callbacks" or args[:1] != (None,):  # None: no checkpoint
                spent.append(time.perf_counter() - began)

    setattr(owner, name, timed)


@pytest.mark.realtime
@pytest.mark.parametrize("package", [pl, L], ids=["pytorch_lightning", "lightning.pytorch"])
def test_a_resumed_fit_counts_on_and_its_restore_is_checkpoint_load_and_saves_are_checkpoint(tmp_path, package):
    checkpoints = package.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1)
    first = PerformanceCallback(3, sinks=[])
    fit = trainer(package, first, tmp_path, max_steps=6)
    fit.callbacks.append(checkpoints)
    saves: list[float] = []
    stopwatch(fit, "save_checkpoint", saves)
    fit.fit(slow_checkpoints(package.LightningModule)(), loader(n=12))
    saved = [r.extra["checkpoint_ms"] * r.window_iterations / 1000.0 for r in first.history]
    assert [r.iteration for r in first.history] == [3, 6]
    assert all("checkpoint_load_ms" not in r.extra for r in first.history)  # no restore in a fresh fit
    # saved after steps 2, 4 and 6: the last one after the last iteration, in no window
    assert len(saves) == 3 and min(saved) >= SAVE_S
    assert saved == [pytest.approx(s, rel=0.05, abs=0.020) for s in saves[:2]]
    # the job's account holds all three, the last one after the last iteration included
    assert first.summary().goodput.rows["checkpoint_save"] == pytest.approx(sum(saves), rel=0.05, abs=0.030)

    second = PerformanceCallback(3, sinks=[])
    resumed = trainer(package, second, tmp_path, max_steps=12)
    spent: list[float] = []
    for name in ("_restore_modules_and_callbacks", "restore_training_state"):
        stopwatch(resumed._checkpoint_connector, name, spent)
    ckpt = tmp_path / "ckpt" / "epoch=0-step=6.ckpt"
    resumed.fit(slow_checkpoints(package.LightningModule)(), loader(n=12), ckpt_path=str(ckpt))
    records = list(second.history)
    assert [(r.first_iteration, r.iteration) for r in records] == [(7, 9), (10, 12)]
    # the restore comes before training starts: the job's start-up, in its account, not in a window
    loaded = second.summary().goodput.rows["checkpoint_load"]
    assert len(spent) == 2 and loaded >= LOAD_S
    assert loaded == pytest.approx(sum(spent), rel=0.05, abs=0.020)
    assert all("checkpoint_load_ms" not in r.extra for r in records)


@pytest.mark.realtime
def test_a_span_inside_a_training_step_is_out_of_the_step_and_its_own_figure(tmp_path):
    sleeps: list[float] = []

    class Spanning(module_class(L.LightningModule)):
        def training_step(self, batch, batch_idx):
            with trainperf.span("upload"):
                began = time.perf_counter()
                time.sleep(0.06)
                sleeps.append(time.perf_counter() - began)
            return super().training_step(batch, batch_idx)

    callback = PerformanceCallback(4, sinks=[])
    trainer(L, callback, tmp_path, max_steps=8).fit(Spanning(), loader(n=8))
    records = list(callback.history)
    assert len(records) == 2
    for r, slept in zip(records, (sleeps[:4], sleeps[4:]), strict=True):
        assert r.extra["upload_ms"] >= 1000.0 * sum(slept) / 4  # the sleeps' stopwatch, inside the span
        assert r.other_ms >= r.extra["upload_ms"] - 1e-9  # other host time holds it
    # a step of a 16x4 linear layer after the warm-up: a few ms, not the 60 ms sleep it would hold otherwise
    assert records[1].compute_ms < 1000.0 * min(sleeps), records[1]
