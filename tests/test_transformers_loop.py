"""The Hugging Face Trainer callback's iteration on a fake clock (data wait, host time, the step, the
Trainer's count of tokens across ranks and its gather of the loss when it logs as collective wait,
evaluation and checkpoints as their own figures, the boundary at the optimizer step's end), its
loader workers and advice, a resumed run's iteration count, everything undone when ``train()``
fails, and the slow rank of a two-rank run named with and without accumulation."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

from _needs import integration

integration("transformers")
integration("accelerate")

pytestmark = pytest.mark.integration

from transformers import Trainer, TrainerCallback  # noqa: E402

from test_transformers import Padded, arguments, tiny_model, train  # noqa: E402
from trainperf import MemorySink  # noqa: E402
from trainperf.transformers import PerformanceCallback, _trainer  # noqa: E402

LOAD_S, FORWARD_S, BEFORE_STEP_S, AFTER_STEP_S = 0.001, 0.010, 0.002, 0.005


class Clocked(Padded):
    """Each item costs LOAD_S on the fake clock (a batch of 4: 4 ms)."""

    def __init__(self, n: int, clock) -> None:  # type: ignore[no-untyped-def]
        super().__init__(n)
        self.clock = clock

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        self.clock.advance(LOAD_S)
        return super().__getitem__(i)


class AroundTheStep(TrainerCallback):
    """Time just before the optimizer step (the step's: clipping done, a gradient check) and after it
    (the loop's: a user's callback on the step's end)."""

    def __init__(self, clock) -> None:  # type: ignore[no-untyped-def]
        self.clock = clock

    def on_pre_optimizer_step(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.clock.advance(BEFORE_STEP_S)

    def on_optimizer_step(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.clock.advance(AFTER_STEP_S)


def clocked_run(tmp_path, clock, trainer_class=Trainer, eval_dataset=None, late=False, **kw):  # type: ignore[no-untyped-def]
    model = tiny_model()

    def forward(module, args):  # type: ignore[no-untyped-def]
        if torch.is_grad_enabled():
            clock.advance(FORWARD_S)

    model.register_forward_pre_hook(forward)
    memory = MemorySink()
    callback = PerformanceCallback(4, clock=clock, sinks=[memory], sink_thread=False, report_hardware=False)
    trainer = trainer_class(model=model, args=arguments(tmp_path, **kw), train_dataset=Clocked(400, clock),
                            eval_dataset=eval_dataset, callbacks=[AroundTheStep(clock)] + ([] if late else [callback]))
    if late:  # added to a built Trainer: it finds the Trainer when training begins
        trainer.add_callback(callback)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return memory.records, callback


@pytest.mark.parametrize("late", [False, True])
def test_the_iteration_ends_where_the_optimizer_step_ends_whatever_the_callbacks_do_after_it(tmp_path, clock, late):
    records, _ = clocked_run(tmp_path, clock, late=late)
    assert [r.window_iterations for r in records] == [4, 4]
    second = records[1]  # the first fetches two batches (accelerate's one ahead): the warm-up
    assert second.etl_ms == pytest.approx(4 * LOAD_S * 1e3)
    assert second.other_ms == pytest.approx(AFTER_STEP_S * 1e3)  # after the step: the loop's host time
    assert second.iteration_ms == pytest.approx((4 * LOAD_S + FORWARD_S + BEFORE_STEP_S + AFTER_STEP_S) * 1e3)
    assert second.compute_ms == pytest.approx((FORWARD_S + BEFORE_STEP_S) * 1e3)


GATHER_S = 0.007


class CountsAcrossRanks(Trainer):
    """The Trainer's count of label tokens across ranks (``average_tokens_across_devices`` with more than
    one rank), in one process: its gather blocks GATHER_S, as a rank waiting there for a slower one."""

    def _get_num_items_in_batch(self, batch_samples, device):  # type: ignore[no-untyped-def]
        self.accelerator.gather(torch.ones(1))
        return super()._get_num_items_in_batch(batch_samples, device)


def test_the_trainers_count_of_tokens_across_ranks_is_collective_wait_not_host_time(tmp_path, clock):
    original = CountsAcrossRanks.__init__

    def built(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        gather = self.accelerator.gather

        def slow_gather(tensor):  # type: ignore[no-untyped-def]
            clock.advance(GATHER_S)
            return gather(tensor)

        self.accelerator.gather = slow_gather

    CountsAcrossRanks.__init__ = built  # type: ignore[method-assign]
    try:
        records, callback = clocked_run(tmp_path, clock, trainer_class=CountsAcrossRanks)
    finally:
        CountsAcrossRanks.__init__ = original  # type: ignore[method-assign]
    second = records[1]
    assert second.etl_ms == pytest.approx(4 * LOAD_S * 1e3)
    assert second.other_ms == pytest.approx(AFTER_STEP_S * 1e3)  # the wait is not the loop's host time
    assert second.iteration_ms == pytest.approx(
        (4 * LOAD_S + GATHER_S + FORWARD_S + BEFORE_STEP_S + AFTER_STEP_S) * 1e3)


class LogsAcrossRanks(Trainer):
    """The Trainer's gather of the loss when it logs (``nested_gather``, ``torch.distributed.all_gather``
    with more than one rank), in one process."""

    def _maybe_log_save_evaluate(self, tr_loss, *args, **kwargs):  # type: ignore[no-untyped-def]
        if self.control.should_log and self.state.global_step > self._globalstep_last_logged:
            torch.distributed.all_gather([torch.zeros(1)], torch.zeros(1))
        return super()._maybe_log_save_evaluate(tr_loss, *args, **kwargs)


def test_the_trainers_gather_of_the_loss_when_it_logs_is_collective_wait_not_host_time(tmp_path, clock, monkeypatch):
    def all_gather(outputs, tensor, group=None, async_op=False):  # type: ignore[no-untyped-def]
        clock.advance(GATHER_S)  # blocked, as a rank waiting there for a slower one

    waits: list[float] = []
    waited = PerformanceCallback.waited

    def spy(self, seconds):  # type: ignore[no-untyped-def]
        waits.append(seconds)
        waited(self, seconds)

    monkeypatch.setattr(torch.distributed, "all_gather", all_gather)
    monkeypatch.setattr(PerformanceCallback, "waited", spy)
    records, _ = clocked_run(tmp_path, clock, trainer_class=LogsAcrossRanks, logging_steps=1)
    assert waits == [pytest.approx(GATHER_S)] * 8  # after each of the 8 steps
    assert torch.distributed.all_gather is all_gather  # given back when training ended
    second = records[1]
    assert second.etl_ms == pytest.approx(4 * LOAD_S * 1e3)
    assert second.other_ms == pytest.approx(AFTER_STEP_S * 1e3)  # the gather is not the loop's host time
    assert second.iteration_ms == pytest.approx(
        (4 * LOAD_S + GATHER_S + FORWARD_S + BEFORE_STEP_S + AFTER_STEP_S) * 1e3)


SAVE_S = 0.030


class SlowSave(Trainer):
    def _save_checkpoint(self, model, trial):  # type: ignore[no-untyped-def]
        (around,) = [c for c in self.callback_handler.callbacks if isinstance(c, AroundTheStep)]
        around.clock.advance(SAVE_S)
        return super()._save_checkpoint(model, trial)


def test_evaluation_and_checkpoints_are_host_time_and_their_own_figures(tmp_path, clock):
    eval_set = Clocked(8, clock)  # two batches of 4: 8 ms per evaluation, its fetches not data wait
    records, _ = clocked_run(tmp_path, clock, trainer_class=SlowSave, eval_dataset=eval_set, eval_strategy="steps",
                             eval_steps=4, per_device_eval_batch_size=4, save_strategy="steps", save_steps=4)
    first, second = records
    eval_s = 8 * LOAD_S
    # after step 4: the first iteration of the second window
    assert second.extra["eval_ms"] == pytest.approx(eval_s * 1e3 / 4)
    assert second.extra["checkpoint_ms"] == pytest.approx(SAVE_S * 1e3 / 4)
    assert second.etl_ms == pytest.approx(4 * LOAD_S * 1e3)
    assert second.other_ms == pytest.approx(AFTER_STEP_S * 1e3 + (eval_s + SAVE_S) * 1e3 / 4)
    assert "eval_ms" not in first.extra and "checkpoint_ms" not in first.extra


def test_a_resumed_run_counts_its_iterations_on_from_the_trainers_global_step(tmp_path):
    full, _, _ = train(tmp_path / "full", Padded(200), save_strategy="steps", save_steps=4)
    resumed, _, trainer = train(tmp_path / "full", Padded(200), resume=str(tmp_path / "full" / "checkpoint-4"))
    assert [(r.first_iteration, r.iteration) for r in full] == [(1, 4), (5, 8)]
    assert [(r.first_iteration, r.iteration) for r in resumed] == [(5, 8)]
    assert resumed[0].warmup  # the first window of this process all the same
    steps = [entry["step"] for entry in trainer.state.log_history if "trainperf/iteration_ms" in entry]
    assert steps == [4, 8]  # the checkpoint's history holds the first run's window, this run adds its own


def _writers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "trainperf-writer" and t.is_alive()}


def _trainperf_hooks_left(writers_before: tuple[threading.Thread, ...] | set[threading.Thread] = ()) -> list[str]:
    from torch.optim.optimizer import _global_optimizer_post_hooks

    from trainperf.torch import _loop_hooks

    left = []
    if _loop_hooks._observers or torch.utils.data.DataLoader.__iter__ is not _loop_hooks._originals.get(
            "iter", torch.utils.data.DataLoader.__iter__):
        left.append("loader hooks")
    hooks = _global_optimizer_post_hooks.values()
    if any(isinstance(getattr(h, "__self__", None), PerformanceCallback) for h in hooks):
        left.append("optimizer step hook")
    if _writers() - set(writers_before):  # a writer started here (other tests' listeners may still be closing)
        left.append("writer thread")
    return left


class Fails(TrainerCallback):
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if state.global_step == 3:
            raise self.error


@pytest.mark.parametrize("error", [RuntimeError("broken"), KeyboardInterrupt()])
def test_a_train_that_fails_leaves_nothing_behind_and_reports_what_it_did(tmp_path, error):
    memory = MemorySink()
    writers = _writers()
    callback = PerformanceCallback(2, sinks=[memory], report_hardware=False)  # the writer thread on
    trainer = Trainer(model=tiny_model(), args=arguments(tmp_path), train_dataset=Padded(200),
                      callbacks=[Fails(error), callback])
    with warnings.catch_warnings(), pytest.raises(type(error)):
        warnings.simplefilter("ignore")
        trainer.train()
    assert callback.listener.closed
    assert _trainperf_hooks_left(writers) == []
    assert not {"get_batch_samples", "evaluate", "_save_checkpoint"} & set(vars(trainer))
    assert "gather" not in vars(trainer.accelerator)
    assert [r.iteration for r in memory.records] == [2, 3]  # the step before the failure, flushed
    trainer.callback_handler.callbacks = [c for c in trainer.callback_handler.callbacks if not isinstance(c, Fails)]
    with warnings.catch_warnings():  # the same Trainer trains again, reported by a new listener
        warnings.simplefilter("ignore")
        trainer.train()
    assert [r.iteration for r in callback.listener.history] == [2, 4, 6, 8]
    callback.close()
    assert callback not in _trainer._watched  # its trainings' ends are no longer watched
    assert _trainperf_hooks_left(writers) == []


class FailsAt(Padded):
    """The dataset raises ``error`` on its ``at``-th fetch."""

    def __init__(self, n: int, at: int, error: BaseException) -> None:
        super().__init__(n)
        self.at, self.error, self.fetches = at, error, 0

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        self.fetches += 1
        if self.fetches == self.at:
            raise self.error
        return super().__getitem__(i)


def _fail_in_forward(model: torch.nn.Module, at: int, error: BaseException) -> None:
    """The model raises ``error`` in its ``at``-th training forward pass."""
    forwards = [0]

    def hook(module, args):  # type: ignore[no-untyped-def]
        if torch.is_grad_enabled():
            forwards[0] += 1
            if forwards[0] == at:
                raise error

    model.register_forward_pre_hook(hook)


@pytest.mark.parametrize("where, added_later", [("data", True), ("model", False)])
def test_an_exception_in_train_closes_the_run_names_it_and_goes_on_unchanged(tmp_path, where, added_later):
    """Whether the callback was given to the Trainer or added to it later, an exception from the data
    or the model inside ``train()`` reaches the caller as it was, and leaves no hook, no writer thread
    and no open run directory behind: the last, partial window is reported (and in the log history)
    and ``meta.json`` says when and why the training ended."""
    import json

    error = ValueError("broken at step 6")
    model = tiny_model()
    dataset = Padded(200)
    if where == "data":  # batches of 4, one fetched ahead: the 25th item is the 7th batch's, fetched in step 6
        dataset = FailsAt(200, 25, error)
    else:
        _fail_in_forward(model, 6, error)
    memory, writers = MemorySink(), _writers()
    callback = PerformanceCallback(4, sinks=[memory], report_hardware=False, run_dir=tmp_path / "run")
    trainer = Trainer(model=model, args=arguments(tmp_path, max_steps=10), train_dataset=dataset,
                      callbacks=[] if added_later else [callback])
    if added_later:
        trainer.add_callback(callback)
    with warnings.catch_warnings(), pytest.raises(ValueError) as raised:
        warnings.simplefilter("ignore")
        trainer.train()
    assert raised.value is error  # the very exception, not one of ours
    assert _trainperf_hooks_left(writers) == []
    assert callback.listener.closed
    assert [(r.first_iteration, r.iteration) for r in memory.records] == [(1, 4), (5, 5)]
    assert [e["step"] for e in trainer.state.log_history if "trainperf/iteration_ms" in e] == [4, 5]
    meta = json.loads((tmp_path / "run" / "rank-0" / "meta.json").read_text())
    assert meta["ended"] is not None and meta["end_reason"] == "ValueError: broken at step 6"
    callback.close()


def test_the_trainers_train_is_given_back_when_the_last_callback_closes(monkeypatch):
    import weakref

    monkeypatch.setattr(_trainer, "_watched", weakref.WeakSet())
    monkeypatch.setattr(_trainer, "_installed", None)
    before = vars(Trainer)["train"]
    first, second = PerformanceCallback(4, sinks=[]), PerformanceCallback(4, sinks=[])
    wrapper = vars(Trainer)["train"]
    assert wrapper is not before and wrapper.__wrapped__ is before
    first.close()
    assert vars(Trainer)["train"] is wrapper  # the second one still watches
    second.close()
    second.close()
    assert vars(Trainer)["train"] is before


def _listener_after(tmp_path, **kw):  # type: ignore[no-untyped-def]
    memory = MemorySink()
    callback = PerformanceCallback(4, sinks=[memory])
    trainer = Trainer(model=tiny_model(), args=arguments(tmp_path, **kw), train_dataset=Padded(400, delay=0.002),
                      callbacks=[callback])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return callback.listener, memory.records


@pytest.mark.realtime
def test_the_training_loaders_workers_are_measured_and_its_settings_advised(tmp_path):
    from trainperf.records._advice import dataloader_tips

    listener, records = _listener_after(tmp_path / "two", dataloader_num_workers=2, max_steps=12)
    assert len(records) == 3 and all(r.workers_cpu_pct is not None for r in records), records
    tips = dataloader_tips(num_workers=2, persistent_workers=False, prefetch_factor=2, pin_memory=False, cuda=False)
    assert tips and set(tips) <= set(listener.fixes_for("input-bound"))
    listener, records = _listener_after(tmp_path / "none", dataloader_num_workers=0)
    assert all(r.workers_cpu_pct is None for r in records)
    tips = listener.fixes_for("input-bound")
    assert any("num_workers=0" in tip for tip in tips), tips


def _two_ranks(tmp_path, name: str, steps: int, accumulation: int, logging_steps: int, fault: str):
    """Run ``_trainer_straggler.py`` on two ranks; the run directory and its steady windows per rank."""
    import json
    import os
    import subprocess
    import sys

    from _ranks import free_port

    here = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(here, "..", "src"), here]),
           "OMP_NUM_THREADS": "1"}
    run_dir = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
         os.path.join(here, "_trainer_straggler.py"), str(run_dir), str(tmp_path / f"{name}-out"), str(steps),
         str(accumulation), str(logging_steps), fault],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steady = {}
    for rank in (0, 1):
        lines = (run_dir / f"rank-{rank}" / "windows.jsonl").read_text().splitlines()
        steady[rank] = [w for w in map(json.loads, lines) if not w.get("warmup")]
    return run_dir, steady


def _median(windows, key: str) -> float:
    import statistics

    return statistics.median(w[key] if key in w else w["extra"][key] for w in windows)


def test_two_ranks_name_the_rank_with_the_slow_loader_in_nearly_every_window_with_and_without_accumulation(tmp_path):
    """Rank 1's collator takes 25 ms longer per batch; the Trainer logs every step (so it gathers the
    loss across ranks between steps as well as the count of tokens); one micro-batch per step (the
    control) and four. Each steady window is judged as the report judges it: rank 1 and ``data``. Its
    data wait holds every micro-batch's, and it waits least in the collectives."""
    from _faults import Plan, Scenario, judge

    scenario = Scenario("data", 1)
    plan = Plan(2, (scenario,), frequency=5)
    outcomes = []
    for accumulation in (1, 4):
        run_dir, steady = _two_ranks(tmp_path, f"acc{accumulation}", 105, accumulation, 1, "data")
        outcome = judge(run_dir, scenario, plan)
        assert outcome.acting >= 19 and outcome.right >= 0.9 * outcome.acting, (accumulation, outcome.wrong)
        assert outcome.report[:1] == [(1, "data")], (accumulation, outcome.report)
        outcomes.append(outcome)
        assert all(w["batches"] == 5 * accumulation for w in steady[1])
        assert _median(steady[1], "etl_ms") >= 0.8 * accumulation * 25.0
        assert _median(steady[1], "wait_ms") < _median(steady[0], "wait_ms")
        for windows in steady.values():  # the step split around DDP's collectives
            assert all(w["extra"].get(f"{part}_ms") is not None for w in windows
                       for part in ("forward", "backward", "step", "wait"))
    assert sum(o.right for o in outcomes) >= 0.95 * sum(o.acting for o in outcomes), [o.wrong for o in outcomes]


def test_two_ranks_name_the_rank_slow_after_the_step_when_the_other_waits_for_it_in_the_loss_gather(tmp_path):
    """Rank 0 spends 25 ms in a callback's ``on_step_end``; the Trainer then logs (every step) and gathers
    the loss of both ranks, where rank 1 waits for rank 0. That wait is collective wait, not rank 1's
    host time: most windows name rank 0 with cause ``host`` (none did while it counted as host time;
    on a busy machine both ranks' waits jitter by a few tens of ms, so a window in ten may name no one)."""
    from _faults import Plan, Scenario, judge

    scenario = Scenario("host", 0)
    run_dir, steady = _two_ranks(tmp_path, "host", 105, 1, 1, "host")
    outcome = judge(run_dir, scenario, Plan(2, (scenario,), frequency=5))
    assert outcome.acting >= 19 and outcome.right >= 0.8 * outcome.acting, outcome.wrong
    assert outcome.report[:1] == [(0, "host")], outcome.report
    assert _median(steady[1], "other_ms") < 0.5 * _median(steady[0], "other_ms")
    assert _median(steady[1], "wait_ms") > _median(steady[0], "wait_ms")
