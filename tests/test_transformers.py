"""The Hugging Face Trainer callback on a tiny GPT-2 built from a config (nothing downloaded), with
padded batches: data wait against a stopwatch in the dataset, with gradient accumulation 1 and 4;
real tokens per step exactly those the model was given; evaluation's fetches not data wait; the
figures in the logs a reporting callback gets; the same tokens after resuming from a checkpoint."""

from __future__ import annotations

import time
import warnings

import pytest
import torch

from _needs import integration

transformers = integration("transformers")
integration("accelerate")

pytestmark = pytest.mark.integration

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from trainperf import MemorySink, SinkError  # noqa: E402
from trainperf.transformers import PerformanceCallback  # noqa: E402

VOCAB, LENGTH = 64, 16


class Padded(torch.utils.data.Dataset):
    """Sequences of 1 to LENGTH real tokens, padded; each fetch sleeps ``delay`` and the time spent
    in fetches is kept (the stopwatch)."""

    def __init__(self, n: int, delay: float = 0.0) -> None:
        self.n, self.delay, self.spent = n, delay, 0.0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        began = time.perf_counter()
        if self.delay:
            time.sleep(self.delay)
        k = 1 + (i * 7) % LENGTH
        ids = torch.randint(1, VOCAB, (LENGTH,), generator=torch.Generator().manual_seed(i))
        mask = (torch.arange(LENGTH) < k).long()
        item = {"input_ids": ids * mask, "attention_mask": mask, "labels": torch.where(mask.bool(), ids, -100)}
        self.spent += time.perf_counter() - began
        return item


def tiny_model() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=16, n_layer=1, n_head=2))


def seen_tokens(model: torch.nn.Module) -> list[int]:
    """The real tokens of every micro-batch the model trains on, in order (a forward hook)."""
    seen: list[int] = []

    def hook(module, args, kwargs):  # type: ignore[no-untyped-def]
        mask = kwargs.get("attention_mask")
        if torch.is_grad_enabled() and mask is not None:
            seen.append(int(mask.sum()))

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def arguments(tmp_path, **kw) -> TrainingArguments:
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=8, logging_steps=4,
                report_to=[], save_strategy="no", use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
                seed=7)
    return TrainingArguments(**{**base, **kw})


def train(tmp_path, dataset, frequency=4, callbacks=(), resume=None, eval_dataset=None, **kw):
    model = tiny_model()
    seen = seen_tokens(model)
    memory = MemorySink()
    callback = PerformanceCallback(frequency, sinks=[memory], report_hardware=False)
    trainer = Trainer(model=model, args=arguments(tmp_path, **kw), train_dataset=dataset,
                      eval_dataset=eval_dataset, callbacks=[*callbacks, callback])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(resume_from_checkpoint=resume)
    return memory.records, seen, trainer


@pytest.mark.parametrize("accumulation", [1, 4])
def test_data_wait_matches_the_stopwatch_and_tokens_are_those_the_model_trained_on(tmp_path, accumulation):
    dataset = Padded(400, delay=0.004)
    records, seen, _ = train(tmp_path, dataset, gradient_accumulation_steps=accumulation)
    assert [r.window_iterations for r in records] == [4, 4]
    assert all(r.batches == 4 * accumulation for r in records)
    assert all(r.samples == 16 * accumulation for r in records)
    etl_s = sum(r.etl_total_ms for r in records) / 1000.0
    assert etl_s == pytest.approx(dataset.spent, rel=0.10)  # every fetch was a training fetch
    per_window = 4 * accumulation
    assert [r.tokens for r in records] == [sum(seen[k:k + per_window]) for k in (0, per_window)]
    for r in records:
        assert r.tokens_per_sec == pytest.approx(r.tokens / r.window_s)
        assert r.etl_source == "loader"


def test_the_figures_reach_a_reporting_callback_that_runs_before_ours_in_the_list(tmp_path):
    logged: list[dict] = []

    class Reporter(TrainerCallback):  # stands for the TensorBoard or W&B integration
        def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
            logged.append(dict(logs or {}))

    records, _, trainer = train(tmp_path, Padded(200), callbacks=[Reporter()])
    assert isinstance(trainer.callback_handler.callbacks[0], PerformanceCallback)
    with_figures = [log for log in logged if "trainperf/iteration_ms" in log]
    assert [log["trainperf/tokens_per_sec"] for log in with_figures] == [r.tokens_per_sec for r in records]
    assert "loss" in with_figures[0]  # in the Trainer's own log, at its step


def _in_log_history(trainer) -> list[dict]:
    return [entry for entry in trainer.state.log_history if any(key.startswith("trainperf/") for key in entry)]


def test_each_record_is_a_dict_of_its_own_in_the_trainers_log_history_at_its_step(tmp_path):
    """As the Trainer's own logs are there: the figures, and the step the window ended at (the last,
    partial window's too, reported when training ends)."""
    from trainperf.sinks import scalar_metrics

    records, _, trainer = train(tmp_path, Padded(200), frequency=3, max_steps=7)
    assert [(r.first_iteration, r.iteration) for r in records] == [(1, 3), (4, 6), (7, 7)]
    assert _in_log_history(trainer) == [{**scalar_metrics(r), "step": r.iteration} for r in records]
    assert "trainperf/tokens_per_sec" in _in_log_history(trainer)[0]
    own = [entry["step"] for entry in trainer.state.log_history if "loss" in entry]
    assert own == [4]  # the Trainer's own logs are as they were (logging_steps=4)


def test_log_to_trainer_false_keeps_the_figures_out_of_the_log_history(tmp_path):
    model = tiny_model()
    callback = PerformanceCallback(1, sinks=[MemorySink()], report_hardware=False, log_to_trainer=False)
    trainer = Trainer(model=model, args=arguments(tmp_path, max_steps=2), train_dataset=Padded(200),
                      callbacks=[callback])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    assert len(callback.listener.history) == 2 and _in_log_history(trainer) == []


def test_on_the_cpu_the_line_shows_the_tflops_measured_and_why_mfu_is_missing_once(tmp_path, caplog):
    """A tiny model on the CPU does some 1e-5 TFLOP/s: never ``TFLOP/s: 0.00``, the figure reads back
    from the line; MFU is absent, and a note says once that the CPU has no known peak."""
    from trainperf import format_line, parse_log

    memory = MemorySink()
    callback = PerformanceCallback(2, sinks=[memory], report_hardware=False)
    trainer = Trainer(model=tiny_model(), args=arguments(tmp_path, max_steps=6), train_dataset=Padded(200),
                      callbacks=[callback])
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("INFO", logger="trainperf"):
        warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in caught if "MFU" in str(w.message)]
    notes = [r.getMessage() for r in caplog.records if "MFU" in r.getMessage()]
    assert notes == ["trainperf: no dense peak is known for 'cpu' in fp32: MFU is left out (pass peak_flops= to "
                     "give one)"]
    measured = [r for r in memory.records if r.tflops_per_sec is not None]
    assert len(measured) >= 2 and all(0 < r.tflops_per_sec < 0.005 for r in measured)  # rounds to 0.00
    lines = [format_line(r) for r in measured]
    assert not any("TFLOP/s: 0.00;" in line or "MFU" in line for line in lines)
    assert parse_log(lines).column("tflops_per_sec") == [pytest.approx(r.tflops_per_sec, rel=5e-3) for r in measured]


def test_evaluation_between_steps_is_other_time_and_its_fetches_are_not_data_wait(tmp_path):
    train_set, eval_set = Padded(200), Padded(40, delay=0.005)
    records, _, _ = train(tmp_path, train_set, eval_dataset=eval_set, eval_strategy="steps", eval_steps=2,
                          per_device_eval_batch_size=4)
    assert eval_set.spent > 0.15
    etl_s = sum(r.etl_total_ms for r in records) / 1000.0
    other_s = sum(r.other_ms * r.window_iterations for r in records) / 1000.0
    assert etl_s < 0.05  # the training set sleeps not at all
    assert other_s >= eval_set.spent * 0.9  # the evaluations (four of them, the last after the last step aside)


def test_tokens_per_step_are_the_same_after_resuming_from_a_checkpoint(tmp_path):
    dataset = Padded(200)
    full, _, _ = train(tmp_path / "full", dataset, save_strategy="steps", save_steps=4)
    resumed, _, _ = train(tmp_path / "full", dataset, resume=str(tmp_path / "full" / "checkpoint-4"))
    assert len(full) == 2 and len(resumed) == 1
    assert resumed[0].tokens == full[1].tokens and resumed[0].samples == full[1].samples == 16


def test_unknown_options_are_named():
    with pytest.raises(TypeError, match="unexpected keyword argument 'report_everything'"):
        PerformanceCallback(10, report_everything=True)
    with pytest.raises(TypeError, match="log_to_trainer"):
        PerformanceCallback(10, log_to_trainer="yes")


class Streamed(torch.utils.data.IterableDataset):
    """The same sequences as a stream (no length): a resumed run fetches and drops the ones it trained on."""

    def __init__(self, n: int) -> None:
        self.items = Padded(n)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (self.items[i] for i in range(len(self.items)))


def test_a_resumed_stream_gives_each_step_the_batches_it_trained_on_not_the_ones_skipped(tmp_path):
    full, full_seen, _ = train(tmp_path / "s", Streamed(200), save_strategy="steps", save_steps=4)
    resumed, seen, _ = train(tmp_path / "s", Streamed(200), resume=str(tmp_path / "s" / "checkpoint-4"))
    assert seen == full_seen[4:8]  # it trained on the batches after the skipped ones
    assert [r.tokens for r in resumed] == [sum(seen)] == [full[1].tokens]


def _one_counted_step(per_device: int, accumulation: int) -> float:
    """FlopCounterMode over one optimizer step of the same model, done by hand: the reference."""
    from torch.utils.flop_counter import FlopCounterMode

    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters())
    data = Padded(per_device * accumulation)
    with FlopCounterMode(display=False) as counter:
        for k in range(accumulation):
            items = [data[per_device * k + i] for i in range(per_device)]
            batch = {key: torch.stack([item[key] for item in items]) for key in items[0]}
            (model(**batch).loss / accumulation).backward()
        opt.step()
    return float(counter.get_total_flops())


def test_flops_per_step_match_flop_counter_mode_over_the_same_step_and_do_not_move_with_accumulation(tmp_path):
    one, _, _ = train(tmp_path / "a", Padded(400), per_device_train_batch_size=8)
    four, _, _ = train(tmp_path / "b", Padded(400), per_device_train_batch_size=2, gradient_accumulation_steps=4)
    reference = _one_counted_step(8, 1)
    assert one[0].flops_per_step == pytest.approx(reference, rel=0.05)
    assert four[0].flops_per_step == pytest.approx(one[0].flops_per_step, rel=0.01)
    assert _one_counted_step(2, 4) == pytest.approx(reference, rel=0.01)  # the reference agrees
    for r in one:
        assert r.tflops_per_sec == pytest.approx(r.flops_per_step * r.optimizer_steps / r.window_s / 1e12)
        assert r.mfu is None and r.peak is None  # no peak for the CPU


def test_mfu_is_flops_times_steps_over_the_window_time_over_the_given_peak(tmp_path):
    model = tiny_model()
    memory = MemorySink()
    callback = PerformanceCallback(4, sinks=[memory], report_hardware=False, peak_flops=5e9)
    trainer = Trainer(model=model, args=arguments(tmp_path), train_dataset=Padded(200), callbacks=[callback])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    for r in memory.records:
        assert r.mfu == pytest.approx(r.flops_per_step * r.optimizer_steps / r.window_s / 5e9)
        assert r.peak == "5.0 GFLOP/s (given)"


def test_given_flops_per_step_are_used_and_nothing_is_counted(tmp_path, monkeypatch):
    import torch.utils.flop_counter as flop_counter

    monkeypatch.setattr(flop_counter, "FlopCounterMode", lambda *a, **k: pytest.fail("counted"))
    model = tiny_model()
    memory = MemorySink()
    callback = PerformanceCallback(4, sinks=[memory], report_hardware=False, flops_per_step=3e9, peak_flops=1e11)
    trainer = Trainer(model=model, args=arguments(tmp_path), train_dataset=Padded(200), callbacks=[callback])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    assert all(r.flops_per_step == 3e9 for r in memory.records)
    assert all(r.mfu == pytest.approx(3e9 * 4 / r.window_s / 1e11) for r in memory.records)


def test_two_ranks_under_gloo_each_report_their_own_tokens_and_the_report_adds_them(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from _ranks import free_port
    from trainperf import build_report

    here = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(here, "..", "src"), here]),
           "OMP_NUM_THREADS": "1"}
    run_dir, out = tmp_path / "run", tmp_path
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
         os.path.join(here, "_trainer_rank.py"), str(run_dir), str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    per_rank = [json.loads((out / f"seen-{r}.json").read_text()) for r in (0, 1)]
    for rank, got in enumerate(per_rank):
        seen = got["seen"]
        assert got["ranks"] == [rank, rank]
        assert got["tokens"] == [sum(seen[0:8]), sum(seen[8:16])]  # 4 steps of 2 micro-batches per window
    assert per_rank[0]["seen"] != per_rank[1]["seen"]  # each rank trained on its own shard
    alone, _, _ = train(tmp_path / "alone", Padded(400), gradient_accumulation_steps=2)  # one process, same step
    for got in per_rank:  # FLOPs per step do not move with the world size
        assert got["flops"] == [pytest.approx(alone[0].flops_per_step, rel=0.01)] * 2
    report = build_report(run_dir)
    assert report["world_size"] == 2
    tokens_per_sec = [e["tokens_per_sec"] for e in report["ranks"]]
    assert report["world"]["tokens_per_sec"] == pytest.approx(sum(tokens_per_sec), rel=1e-3)


def test_every_train_of_one_callback_reaches_the_users_sinks_and_close_closes_them(tmp_path):
    from trainperf.sinks import JsonLinesSink

    path = tmp_path / "perf.jsonl"
    sink = JsonLinesSink(path)
    callback = PerformanceCallback(4, sinks=[sink], report_hardware=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", category=SinkError)  # a sink used after it was closed fails
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=UserWarning)
        for run in ("first", "second"):
            trainer = Trainer(model=tiny_model(), args=arguments(tmp_path / run), train_dataset=Padded(200),
                              callbacks=[callback])
            trainer.train()
        assert not sink.closed  # each run's listener leaves the user's sinks open for the next
    lines = path.read_text().splitlines()
    assert len(lines) == 4  # two windows of each run
    callback.close()
    assert sink.closed
