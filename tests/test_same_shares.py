"""One model, one loader and the same injected delays through the three adapters: ``attach`` with a
plain loop, Lightning's and the Hugging Face Trainer's ``PerformanceCallback``. Each adapter's shares
(data wait, other host time, compute per iteration, ``eval_ms`` and ``checkpoint_ms``) are compared
with a stopwatch of the delays taken in the same run, and with each other.

The delays: each training batch's collate sleeps (data wait), each training forward sleeps
(compute), host work sleeps after every step, an evaluation of two batches whose collate sleeps
runs every ``EVAL_EVERY`` steps, and a checkpoint whose writing sleeps every ``SAVE_EVERY`` steps.
The stopwatch times the sleeps, and each evaluation and checkpoint as a whole (the framework's own
evaluation loop, its saving call). Framework overhead elsewhere (a Trainer's own loop between its
hooks, the real forward and backward) comes on top, hence a tolerance of a few milliseconds per
iteration besides a relative one.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from _needs import integration

transformers = integration("transformers")
integration("accelerate")
pl = pytest.importorskip("pytorch_lightning")

from transformers import PretrainedConfig, PreTrainedModel  # noqa: E402

from trainperf import MemorySink, PerformanceListener  # noqa: E402
from trainperf.torch import attach  # noqa: E402

pytestmark = [pytest.mark.realtime, pytest.mark.integration]

BATCH = 4
STEPS, FREQUENCY, EVAL_EVERY, SAVE_EVERY, EVAL_BATCHES = 16, 4, 4, 8, 2
DATA_S, COMPUTE_S, HOST_S, EVAL_S, SAVE_S = 0.012, 0.008, 0.006, 0.010, 0.024
#: Iterations compared: the windows after the first (its first iteration carries start-up).
FIRST = FREQUENCY + 1
#: What a framework may add per iteration to a share, in ms, besides 15% of it.
SLACK_MS = {"etl": 3.0, "other": 6.0, "compute": 10.0, "eval": 4.0, "checkpoint": 4.0}


class Stopwatch:
    """The injected delays and the evaluations and checkpoints as they ran, by kind and by the
    iteration they fall in (steps done + 1)."""

    def __init__(self) -> None:
        self.steps = 0
        self.spent: list[tuple[str, int, float]] = []

    def sleep(self, kind: str | None, seconds: float) -> None:
        """Sleep ``seconds``; ``kind``: keep how long it took (``None``: a span around it keeps it)."""
        began = time.perf_counter()
        time.sleep(seconds)
        if kind is not None:
            self.spent.append((kind, self.steps + 1, time.perf_counter() - began))

    @contextlib.contextmanager
    def span(self, kind: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.spent.append((kind, self.steps + 1, time.perf_counter() - began))

    def timed(self, kind: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.span(kind):
                return function(*args, **kwargs)

        return timed

    def per_iteration_ms(self, *kinds: str) -> float:
        total = sum(s for kind, it, s in self.spent if kind in kinds and FIRST <= it <= STEPS)
        return 1000.0 * total / (STEPS - FIRST + 1)


class Slow:
    """Pickled (``torch.save``) in ``SAVE_S``: the cost of writing a checkpoint."""

    def __init__(self, watch: Stopwatch) -> None:
        self.watch = watch

    def __reduce__(self):
        self.watch.sleep(None, SAVE_S)
        return (int, (0,))


class TinyConfig(PretrainedConfig):
    model_type = "trainperf-tiny"

    def __init__(self, features: int = 16, classes: int = 4, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.features, self.classes = features, classes


class Tiny(PreTrainedModel):
    """A linear classifier built from its config whose forward returns the loss (as the Trainer
    needs); a training forward costs ``COMPUTE_S`` more, and ``save_pretrained`` (how the Trainer
    writes a checkpoint) ``SAVE_S`` more."""

    config_class = TinyConfig
    watch: Stopwatch

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.fc = torch.nn.Linear(config.features, config.classes)
        self.post_init()

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        if torch.is_grad_enabled():
            self.watch.sleep("compute", COMPUTE_S)
        logits = self.fc(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out

    def save_pretrained(self, *args: Any, **kwargs: Any) -> Any:
        self.watch.sleep(None, SAVE_S)
        return super().save_pretrained(*args, **kwargs)


def tiny(watch: Stopwatch) -> Tiny:
    torch.manual_seed(0)
    model = Tiny(TinyConfig())
    model.watch = watch
    return model


class Samples(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(16, generator=g), "labels": torch.randint(0, 4, (), generator=g)}


def collate(watch: Stopwatch, kind: str | None, seconds: float):
    def stack(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        watch.sleep(kind, seconds)
        return {key: torch.stack([item[key] for item in items]) for key in items[0]}

    return stack


def loaders(watch: Stopwatch) -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    train = torch.utils.data.DataLoader(Samples(STEPS * BATCH), batch_size=BATCH,
                                        collate_fn=collate(watch, "data", DATA_S))
    val = torch.utils.data.DataLoader(Samples(EVAL_BATCHES * BATCH), batch_size=BATCH,
                                      collate_fn=collate(watch, None, EVAL_S))
    return train, val


def counting_steps(watch: Stopwatch):
    def counted(optimizer, args, kwargs):
        watch.steps += 1

    return register_optimizer_step_post_hook(counted)


# -- the three runs ------------------------------------------------------------------------------
def run_attach(tmp_path, watch: Stopwatch) -> list:
    model = tiny(watch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    listener = PerformanceListener(FREQUENCY, sinks=[], verdict=False, report_hardware=False)
    attach(model, listener)
    train, val = loaders(watch)
    model.train()
    for step, batch in enumerate(train, start=1):
        opt.zero_grad()
        model(**batch)["loss"].backward()
        opt.step()
        watch.sleep("host", HOST_S)
        if step % EVAL_EVERY == 0:
            with watch.span("eval"):
                model.eval()
                with torch.no_grad():
                    for vb in val:
                        model(**vb)
                model.train()
        if step % SAVE_EVERY == 0:
            with watch.span("checkpoint"):
                torch.save({"model": model.state_dict(), "slow": Slow(watch)}, tmp_path / "model.pt")
    listener.close()
    return list(listener.history)


def run_lightning(tmp_path, watch: Stopwatch) -> list:
    from trainperf.lightning import PerformanceCallback

    class Lit(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = tiny(watch)

        def training_step(self, batch, batch_idx):
            return self.net(**batch)["loss"]

        def validation_step(self, batch, batch_idx):
            self.net(**batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def on_save_checkpoint(self, checkpoint):
            checkpoint["slow"] = Slow(watch)

    class HostWork(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            watch.sleep("host", HOST_S)

    callback = PerformanceCallback(FREQUENCY, sinks=[], verdict=False, report_hardware=False)
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=SAVE_EVERY, save_top_k=-1)
    trainer = pl.Trainer(
        callbacks=[HostWork(), callback, saver], max_steps=STEPS, val_check_interval=EVAL_EVERY,
        limit_val_batches=EVAL_BATCHES, num_sanity_val_steps=0, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu", devices=1,
    )
    trainer.save_checkpoint = watch.timed("checkpoint", trainer.save_checkpoint)  # type: ignore[method-assign]
    val_loop = trainer.fit_loop.epoch_loop.val_loop
    val_loop.run = watch.timed("eval", val_loop.run)  # type: ignore[method-assign]
    train, val = loaders(watch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Lit(), train_dataloaders=train, val_dataloaders=val)
    return list(callback.history)


def run_trainer(tmp_path, watch: Stopwatch) -> list:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from trainperf.transformers import PerformanceCallback

    class HostWork(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            watch.sleep("host", HOST_S)

    memory = MemorySink()
    callback = PerformanceCallback(FREQUENCY, sinks=[memory], verdict=False, report_hardware=False,
                                   log_to_trainer=False)
    arguments = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=BATCH, per_device_eval_batch_size=BATCH,
        max_steps=STEPS, eval_strategy="steps", eval_steps=EVAL_EVERY, save_strategy="steps",
        save_steps=SAVE_EVERY, save_only_model=True, logging_steps=STEPS, report_to=[], use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, seed=7, optim="sgd", learning_rate=0.01,
        remove_unused_columns=False, lr_scheduler_type="constant",
    )
    trainer = Trainer(model=tiny(watch), args=arguments, train_dataset=Samples(STEPS * BATCH),
                      eval_dataset=Samples(EVAL_BATCHES * BATCH), data_collator=collate(watch, "data", DATA_S),
                      callbacks=[HostWork(), callback])
    evaluate = trainer.evaluate

    def evaluate_with_its_collate(*args: Any, **kwargs: Any) -> Any:  # the evaluation loader's own delay
        trainer.data_collator = collate(watch, None, EVAL_S)
        try:
            with watch.span("eval"):
                return evaluate(*args, **kwargs)
        finally:
            trainer.data_collator = collate(watch, "data", DATA_S)

    trainer.evaluate = evaluate_with_its_collate  # type: ignore[method-assign]
    trainer._save_checkpoint = watch.timed("checkpoint", trainer._save_checkpoint)  # type: ignore[method-assign]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return list(memory.records)


RUNS = {"attach": run_attach, "lightning": run_lightning, "transformers": run_trainer}
_done: dict[str, tuple[dict[str, float], dict[str, float]]] = {}


def shares(name: str, tmp_path_factory) -> tuple[dict[str, float], dict[str, float]]:
    """``(measured, stopwatch)``: per-iteration ms of each share over iterations FIRST..STEPS."""
    if name not in _done:
        watch = Stopwatch()
        handle = counting_steps(watch)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a tiny model: no thread contention on a busy machine
        try:
            records = RUNS[name](tmp_path_factory.mktemp(name), watch)
        finally:
            torch.set_num_threads(threads)
            handle.remove()
        assert watch.steps == STEPS
        compared = [r for r in records if r.first_iteration >= FIRST]
        assert sum(r.window_iterations for r in compared) == STEPS - FIRST + 1, [r.iteration for r in records]
        n = len(compared)
        measured = {
            "etl": sum(r.etl_ms for r in compared) / n,
            "other": sum(r.other_ms for r in compared) / n,
            "compute": sum(r.compute_ms for r in compared) / n,
            "eval": sum(r.extra.get("eval_ms", 0.0) for r in compared) / n,
            "checkpoint": sum(r.extra.get("checkpoint_ms", 0.0) for r in compared) / n,
        }
        truth = {
            "etl": watch.per_iteration_ms("data"),
            "other": watch.per_iteration_ms("host", "eval", "checkpoint"),
            "compute": watch.per_iteration_ms("compute"),
            "eval": watch.per_iteration_ms("eval"),
            "checkpoint": watch.per_iteration_ms("checkpoint"),
        }
        _done[name] = measured, truth
    return _done[name]


def near(measured: float, truth: float, kind: str) -> bool:
    """``measured`` holds ``truth`` (less a little for the sleeps' own reads) and at most the framework's slack."""
    return truth * 0.95 - 0.5 <= measured <= truth * 1.15 + SLACK_MS[kind]


@pytest.mark.parametrize("name", list(RUNS))
def test_each_adapters_shares_match_the_stopwatch_of_the_same_run(name, tmp_path_factory):
    measured, truth = shares(name, tmp_path_factory)
    assert truth["eval"] > 0.0 and truth["checkpoint"] > 0.0  # both happened inside the compared windows
    wrong = {kind: (round(measured[kind], 2), round(truth[kind], 2)) for kind in measured
             if not near(measured[kind], truth[kind], kind)}
    assert not wrong, f"{name}: (measured, stopwatch) ms per iteration: {wrong}"


def test_the_three_adapters_agree_on_every_share(tmp_path_factory):
    got = {name: shares(name, tmp_path_factory)[0] for name in RUNS}
    for kind in SLACK_MS:
        values = {name: round(got[name][kind], 2) for name in RUNS}
        low, high = min(values.values()), max(values.values())
        assert high - low <= 0.15 * high + SLACK_MS[kind], f"{kind}: {values}"
