"""The Hugging Face Trainer's checkpoints as named spans, on a tiny GPT-2 built from a config (nothing
downloaded): saves as ``checkpoint``, and a training resumed with ``resume_from_checkpoint=`` counting
its iterations on from the checkpoint's step, its loads (most before ``on_train_begin``) as
``checkpoint_load`` against a stopwatch on the same loads."""

from __future__ import annotations

import time
import warnings

import pytest

from _needs import integration

integration("transformers")
integration("accelerate")

pytestmark = pytest.mark.integration

from transformers import Trainer  # noqa: E402

from test_transformers import Padded, arguments, tiny_model  # noqa: E402
from trainperf import MemorySink  # noqa: E402
from trainperf.transformers import PerformanceCallback  # noqa: E402

LOAD_S, SAVE_S = 0.25, 0.05
#: What the Trainer calls to resume, each timed by the stopwatch below.
RESUME_LOADS = ("_load_from_checkpoint", "_load_optimizer_and_scheduler", "_load_scaler", "_load_rng_state",
                "_load_callback_state")


class Stopwatched(Trainer):
    """A Trainer whose optimizer load takes ``LOAD_S`` more and whose saves ``SAVE_S`` more, each load
    and save timed (ours wraps these on the instance, so it times them from outside)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loads: list[tuple[str, float]] = []
        self.saves: list[float] = []

    def _save_checkpoint(self, *args, **kwargs):
        began = time.perf_counter()
        time.sleep(SAVE_S)
        try:
            return super()._save_checkpoint(*args, **kwargs)
        finally:
            self.saves.append(time.perf_counter() - began)


def _stopwatched(name: str):
    def load(self, *args, **kwargs):
        began = time.perf_counter()
        try:
            if name == "_load_optimizer_and_scheduler":
                time.sleep(LOAD_S)
            return getattr(super(Stopwatched, self), name)(*args, **kwargs)
        finally:
            self.loads.append((name, time.perf_counter() - began))

    return load


for _name in RESUME_LOADS:
    setattr(Stopwatched, _name, _stopwatched(_name))


def run(tmp_path, resume=None, **kw):
    memory = MemorySink()
    callback = PerformanceCallback(4, sinks=[memory], report_hardware=False)
    trainer = Stopwatched(model=tiny_model(), args=arguments(tmp_path, **kw), train_dataset=Padded(64),
                          callbacks=[callback])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(resume_from_checkpoint=resume)
    trainer.performance = callback
    return memory.records, trainer


@pytest.mark.realtime
def test_a_resumed_training_counts_on_and_its_loads_are_checkpoint_load_and_saves_are_checkpoint(tmp_path):
    records, trainer = run(tmp_path, save_strategy="steps", save_steps=4)
    assert [r.iteration for r in records] == [4, 8]
    assert all("checkpoint_load_ms" not in r.extra for r in records) and trainer.loads == []
    # saved after steps 4 and 8: the first in the second window, the last after the last iteration
    assert "checkpoint_ms" not in records[0].extra and len(trainer.saves) == 2
    saved = records[1].extra["checkpoint_ms"] * records[1].window_iterations / 1000.0
    assert saved >= SAVE_S and saved == pytest.approx(trainer.saves[0], rel=0.05, abs=0.020)

    records, trainer = run(tmp_path, resume=str(tmp_path / "checkpoint-4"))
    assert [(r.first_iteration, r.iteration) for r in records] == [(5, 8)]
    # most loads come before the first window (the job's start-up, in its account), the random generators'
    # inside it
    loaded = trainer.performance.listener.summary().goodput.rows["checkpoint_load"]
    assert {name for name, _ in trainer.loads} >= {"_load_from_checkpoint", "_load_optimizer_and_scheduler"}
    spent = sum(seconds for _, seconds in trainer.loads)
    assert loaded >= LOAD_S and loaded == pytest.approx(spent, rel=0.05, abs=0.020)
    in_window = records[0].extra.get("checkpoint_load_ms", 0.0) * records[0].window_iterations / 1000.0
    assert in_window < LOAD_S  # the optimizer's load (the slow one) was before the first window


def test_a_training_that_fails_to_load_its_checkpoint_gives_the_trainer_its_methods_back(tmp_path):
    memory = MemorySink()
    callback = PerformanceCallback(4, sinks=[memory], report_hardware=False)
    trainer = Trainer(model=tiny_model(), args=arguments(tmp_path), train_dataset=Padded(16), callbacks=[callback])
    with pytest.raises((ValueError, OSError)):
        trainer.train(resume_from_checkpoint=str(tmp_path / "missing"))
    assert not any(name in vars(trainer) for name in RESUME_LOADS)
    assert callback.listener.closed
    records, _ = run(tmp_path / "after")  # a later training of another Trainer is unaffected
    assert [r.iteration for r in records] == [4, 8]
